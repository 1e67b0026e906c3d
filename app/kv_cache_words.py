"""The KV cache's size in a user's terms, the one wording the start line, `localchat status` and both UIs show:
a share of memory in GiB reads as waste to a newcomer; tokens of chats kept resident, and that the memory fills only
as they are used, say what it buys."""

from localchat.app.protocol.conversations import Warmth
from localchat.app.protocol.system import KVCacheSize, PinBudget
from localchat.engine.stats import PinUsage
from localchat.engine.stats import Warmth as EngineWarmth

# how each place of a chat's history reads in a list
WARMTH_WORDS = {"resident": "warm", "on_disk": "on disk", "cold": "cold"}


def kv_cache_size(blocks: int, block_size: int, max_bytes: int, context_tokens: int) -> KVCacheSize:
    tokens = blocks * block_size
    chats = tokens / context_tokens if context_tokens else 0.0
    count = f"{chats:.0f}" if chats >= 2 else f"{chats:.1f}"
    summary = (f"chats stay resident for quick replies: {tokens:,} tokens, about {count} chats at the full "
               f"{context_tokens:,}-token context; memory fills only as chats use it, up to "
               f"{max_bytes / 2**30:.1f} GiB")
    return KVCacheSize(tokens=tokens, context_tokens=context_tokens, full_context_chats=round(chats, 1),
                       max_bytes=max_bytes, summary=summary)


def warmth_of(warmth: EngineWarmth) -> Warmth:
    """The engine's report of where a chat's history is, as the API gives it and both UIs show it: "warm · instant",
    "on disk · about 0.4 s", "cold · about 4 s" (the wait its history adds to the next first token)."""
    word, wait = WARMTH_WORDS[warmth.state], warmth.predicted_s
    if warmth.state == "resident":  # at most a block to compute: no more than any turn's own first step
        summary = f"{word} · instant"
    elif wait is None:
        summary = word
    else:
        summary = f"{word} · about {about(wait)}"
    return Warmth(state=warmth.state, tokens=warmth.tokens, resident_tokens=warmth.resident,
                  on_disk_tokens=warmth.on_disk, cold_tokens=warmth.cold, predicted_s=wait, pinned=warmth.pinned,
                  summary=summary)


def about(seconds: float) -> str:
    """A wait as a person says it: 0.1 s, 4 s, 2 min."""
    if seconds < 1:
        return f"{max(seconds, 0.1):.1f} s"
    return f"{seconds:.0f} s" if seconds < 90 else f"{seconds / 60:.0f} min"


def pin_budget(usage: PinUsage) -> PinBudget:
    """The pins' use of the KV cache, in tokens and memory."""
    summary = (f"pinned chats keep {usage.tokens:,} of {usage.limit_tokens:,} tokens "
               f"({usage.bytes / 2**20:,.0f} of {usage.limit_bytes / 2**20:,.0f} MiB)")
    return PinBudget(tokens=usage.tokens, limit_tokens=usage.limit_tokens, bytes=usage.bytes,
                     limit_bytes=usage.limit_bytes, summary=summary)
