"""The KV cache's size in a user's terms, the one wording the start line, `localchat status` and both UIs show:
a share of memory in GiB reads as waste to a newcomer; tokens of chats kept resident, and that the memory fills only
as they are used, say what it buys."""

from localchat.app.protocol.system import KVCacheSize


def kv_cache_size(blocks: int, block_size: int, max_bytes: int, context_tokens: int) -> KVCacheSize:
    tokens = blocks * block_size
    chats = tokens / context_tokens if context_tokens else 0.0
    count = f"{chats:.0f}" if chats >= 2 else f"{chats:.1f}"
    summary = (f"chats stay resident for quick replies: {tokens:,} tokens, about {count} chats at the full "
               f"{context_tokens:,}-token context; memory fills only as chats use it, up to "
               f"{max_bytes / 2**30:.1f} GiB")
    return KVCacheSize(tokens=tokens, context_tokens=context_tokens, full_context_chats=round(chats, 1),
                       max_bytes=max_bytes, summary=summary)
