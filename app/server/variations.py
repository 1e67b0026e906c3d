"""A fork whose replies differ on purpose: each reply its own instruction (a short last user turn after the whole
history) and sampling values, all sharing the history's KV blocks.

Each variation is a request of its own (its prompt ends otherwise), run beside the others in one EngineJob. With the
embedded engine the job computes the history first, once, as a request of its own (engine_job.py's prefix): its full
blocks and its partial last block are then in the prefix cache, and each variation finds the whole history there (its
cached_tokens is the history's length) and computes only its own turn. A remote engine's own prefix cache does the
sharing there."""

import time
from dataclasses import dataclass

import msgspec

from localchat.app.protocol.conversations import SAMPLING_FIELDS, Conversation, Message, SamplingSettings, Variation
from localchat.app.server.sampling import Sampling
from localchat.app.server.store import new_id


def variation_settings(settings: SamplingSettings, variation: Variation, index: int) -> SamplingSettings:
    """Reply `index`'s settings: the variation's sampling values over the request's (a seed that the settings name
    goes on as seed + index, as reply k of an n-reply fork samples)."""
    values = {name: getattr(variation, name) for name in SAMPLING_FIELDS if getattr(variation, name) is not None}
    seed = variation.seed if variation.seed is not None else (
        settings.seed + index if settings.seed is not None else None)
    return msgspec.structs.replace(settings, **values, seed=seed)


def instruction_message(conversation: Conversation, parent: Message, instruction: str) -> Message:
    """A variation's instruction as the user turn its reply's prompt ends with (never stored as a message)."""
    return Message(id=new_id("m"), conversation_id=conversation.id, parent_id=parent.id, role="user",
                   content=instruction, created_at=time.time())


@dataclass
class VariationRequest:
    """One variation's request: its prompt, how it samples, the fit of its prompt to the context."""

    prompt: list[int] | list[dict]
    sampling: Sampling
    fit: object | None  # conversations.Fit


def shared_history(history: list[int], prompts: list[list[int]]) -> list[int]:
    """The tokens every variation's prompt starts with: the history, or (where a cut to fit the context or a thinking
    template's rendering makes them start otherwise) their longest common prefix."""
    if all(prompt[: len(history)] == history for prompt in prompts):
        return history
    shortest = min(prompts, key=len)
    common = next((i for i, token in enumerate(shortest) if any(p[i] != token for p in prompts)), len(shortest))
    return shortest[:common]
