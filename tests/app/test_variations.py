"""A fork whose replies vary on purpose (an instruction and sampling values per reply): the replies share the
history's KV blocks, each computes only its own turn, and the chat goes on from a reply without its instruction unless
it was kept. Run on the conversations service in process, over the embedded engine, whose block pool it reads."""

import asyncio

import pytest

from localchat.app.protocol.conversations import (
    DeltaEvent,
    DoneEvent,
    ErrorEvent,
    SamplingSettings,
    Variation,
    filled,
)
from localchat.app.server.active_requests import ActiveRequests
from localchat.app.server.conversations import Conversations
from localchat.app.server.embedded_backend import EmbeddedBackend
from localchat.app.server.store import Store

pytestmark = pytest.mark.slow  # the embedded model, in process

SYSTEM = " ".join(f"Rule {i}: be kind, be brief, and answer in plain English." for i in range(24))
HEADER = 4  # SmolLM2's generation prompt <|im_start|>assistant\n
VARIATIONS = [Variation(instruction="Answer in one word."), Variation(instruction="Answer as a list.", keep=True),
              Variation(temperature=1.0, seed=7), Variation()]


@pytest.fixture(scope="module")
def backend():
    backend = EmbeddedBackend(num_kv_blocks=512, kv_disk_bytes=0)
    backend.start()
    asyncio.run(backend.loaded())
    yield backend
    asyncio.run(backend.close())


async def reply_to(conversations: Conversations, conversation, parent_id: str | None, content: str):
    """A user message and its reply, as stored."""
    user = await conversations.add_user_message(conversation, parent_id, content)
    replies = await conversations.start_replies(conversation, user, 1)
    done = [event.message async for event in replies.events() if isinstance(event, DoneEvent)]
    return user, done


def test_variations_share_the_history_and_the_chat_goes_on_without_their_instructions(backend, tmp_path):
    asyncio.run(_variations(backend, Store(tmp_path / "v.db")))


async def _variations(backend: EmbeddedBackend, store: Store) -> None:
    conversations = Conversations(store, backend, ActiveRequests())
    settings = filled(SamplingSettings(temperature=0.0, max_tokens=8), backend.sampling)
    conversation = store.create_conversation("variations", SYSTEM, settings)
    _, (first,) = await reply_to(conversations, conversation, None, "What is a cat?")

    kv = backend.llm.engine.scheduler.kv
    checked = []

    async def check_sharing(written: set[str]) -> None:
        """Once all four replies write (each runs for 300 tokens), every full block of the history is held by all
        four: shared, not copied; then the replies are stopped."""
        if len(written) == 4 and not checked:
            history = conversations.history_tokens(conversation, store.path(conversation.id, user.id))
            checked.append(history)
            counts = [kv.pool.ref_count(kv.pool.lookup(h, history[i * 16 : (i + 1) * 16]))
                      for i, h in enumerate(kv.chain(history))]
            assert counts == [4] * (len(history) // 16)
            await conversations.stop(conversation.id)

    long = SamplingSettings(max_tokens=300, ignore_eos=True)
    user = await conversations.add_user_message(conversation, first.id, "And a dog?")
    replies = await conversations.start_replies(conversation, user, 4, long, VARIATIONS)
    written, done = set(), []
    async for event in replies.events():
        assert not isinstance(event, ErrorEvent), event
        if isinstance(event, DeltaEvent):
            written.add(event.message_id)
            await check_sharing(written)
        elif isinstance(event, DoneEvent):
            done.append(event.message)
    (history,) = checked
    by_id = {m.id: m for m in done}
    one_word, as_list, hot, plain = (by_id[mid] for mid in replies.message_ids)
    for reply, variation in zip((one_word, as_list, hot, plain), VARIATIONS):
        assert reply.variation == variation  # stored with what it was asked for
        assert reply.stats.cached_tokens == len(history)  # the whole history, computed once for all four
    assert plain.stats.prompt_tokens == len(history) + HEADER  # the history, then the generation prompt
    assert one_word.stats.prompt_tokens > plain.stats.prompt_tokens  # its own short turn after the history
    assert hot.stats.temperature == 1.0 and plain.stats.temperature == backend.sampling.fork_temperature

    # the chat goes on from a reply without its instruction; from a kept one with it, as a turn before the reply
    tokenizer = backend.llm.tokenizer
    for reply, instruction, kept in ((one_word, "Answer in one word.", False), (as_list, "Answer as a list.", True)):
        user, (next_reply,) = await reply_to(conversations, conversation, reply.id, "Why?")
        branch = conversations.history_tokens(conversation, store.path(conversation.id, user.id))
        assert next_reply.stats.prompt_tokens == len(branch) + HEADER
        assert (instruction in tokenizer.decode(branch)) is kept
        assert branch[: len(history)] == history
