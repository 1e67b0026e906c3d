"""The model's context as the terminal UI shows it: how much of it the branch on screen uses ("3.4k / 8k"), when that
comes near the edge, and where the last reply's prompt was cut to fit (app/server/context_budget.py decides)."""

import math
from dataclasses import dataclass

from localchat.app.protocol.conversations import ContextUse, Message, branch_tokens

NEAR_LIMIT = 0.8  # of the context: the gauge warns, and offers a new chat from a summary


@dataclass(frozen=True)
class CutShown:
    """The last reply's prompt left out `dropped` messages of the branch; it saw it whole from `first_kept` on."""

    first_kept: str
    dropped: int

    def __str__(self) -> str:
        earlier = "1 earlier message" if self.dropped == 1 else f"{self.dropped} earlier messages"
        return f"{earlier} left out — the model sees from here"


def tokens_text(tokens: int) -> str:
    """812, 3.4k, 8k, 128k (k: 1024, as contexts are counted), halves rounded up: the web UI's formatTokens
    (webui/static/context.js) writes the same, so both show one number for one chat."""
    if tokens < 1024:
        return str(tokens)
    tenths = math.floor(tokens / 1024 * 10 + 0.5)
    return (f"{tenths / 10:.1f}".removesuffix(".0") if tenths < 100 else str(math.floor(tokens / 1024 + 0.5))) + "k"


def gauge_text(use: ContextUse) -> str:
    """"3.4k / 8k" """
    return f"{tokens_text(use.tokens)} / {tokens_text(use.limit)}"


def near_limit(use: ContextUse) -> bool:
    return use.tokens >= NEAR_LIMIT * use.limit


def branch_use(path: list[Message], limit: int | None, documents_tokens: int = 0) -> ContextUse | None:
    """What the branch uses of the model's context, as the server counts ConversationTree.context: its last reply's
    prompt and reply, and the messages after it; before the first message, what the chat's documents hold
    (documents_tokens). None for an empty chat, or where the context's length is not known (a remote engine's, which
    refuses a prompt too long itself)."""
    if limit is None or not (path or documents_tokens):
        return None
    return ContextUse(branch_tokens(path) if path else documents_tokens, limit)


def last_cut(path: list[Message]) -> CutShown | None:
    """Where the last reply of the branch began to see it, if its prompt was cut (and that message is on it)."""
    reply = next((m for m in reversed(path) if m.role == "assistant" and m.stats is not None), None)
    if reply is None or not reply.stats.dropped_messages or reply.stats.first_kept_id is None:
        return None
    if all(m.id != reply.stats.first_kept_id for m in path):
        return None
    return CutShown(reply.stats.first_kept_id, reply.stats.dropped_messages)
