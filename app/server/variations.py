"""A fork whose replies differ on purpose: each reply its own instruction (a short last user turn after the whole
history) and sampling values, all sharing the history's KV blocks.

Each variation is a request of its own (its prompt ends otherwise), run beside the others. With the embedded engine
the history is computed first, once, as a request of its own (one token, dropped): its full blocks and its partial
last block are then in the prefix cache, and each variation finds the whole history there (its cached_tokens is the
history's length) and computes only its own turn. A remote engine's own prefix cache does the sharing there."""

import asyncio
import dataclasses
import time
from collections.abc import AsyncIterator
from dataclasses import dataclass

import msgspec

from localchat.app.protocol.conversations import SAMPLING_FIELDS, Conversation, Message, SamplingSettings, Variation
from localchat.app.server.backends import Backend, Update
from localchat.app.server.sampling import Sampling
from localchat.app.server.store import new_id
from localchat.engine.sampling_params import SamplingParams

HISTORY_PARAMS = SamplingParams(max_tokens=1, temperature=0.0)  # the history's own request: its one token is dropped


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


async def variation_updates(backend: Backend, history: list[int] | None, requests: list[VariationRequest],
                            request_ids: list[str], history_id: str) -> AsyncIterator[Update]:
    """The replies of the variations as one stream, each update's replies numbered by variation (and its counts
    theirs: Update.reply). The history first, as its own request (history_id), where it is given."""
    if history:
        async for _ in await backend.open(history, HISTORY_PARAMS, history_id):
            pass
    # opened together, so that the engine takes them in the same step
    streams = await asyncio.gather(*(backend.open(r.prompt, r.sampling.params, rid)
                                     for r, rid in zip(requests, request_ids)))
    async for index, update in _merged(streams):
        outputs = [dataclasses.replace(out, index=index) for out in update.outputs]
        yield Update(outputs, update.prompt_tokens, update.cached_tokens, update.finished, reply=index)


async def _merged(streams: list[AsyncIterator[Update]]) -> AsyncIterator[tuple[int, Update]]:
    """(stream's index, update) as they come from any of the streams, until each has ended; the first failure
    raises. Leaving early closes them all."""
    queue: asyncio.Queue = asyncio.Queue()

    async def pump(index: int, stream: AsyncIterator[Update]) -> None:
        try:
            async for update in stream:
                await queue.put((index, update))
            await queue.put((index, None))
        except Exception as error:
            await queue.put((index, error))

    tasks = [asyncio.create_task(pump(i, stream)) for i, stream in enumerate(streams)]
    try:
        running = len(tasks)
        while running:
            index, item = await queue.get()
            if isinstance(item, Exception):
                raise item
            if item is None:
                running -= 1
            else:
                yield index, item
    finally:
        for task in tasks:
            task.cancel()
        await asyncio.gather(*tasks, return_exceptions=True)
