"""AsyncLLM streams the same replies as LLM, runs requests side by side, and aborts cleanly."""

import asyncio

import pytest

from localchat.engine import AsyncLLM, LLM, SamplingParams

PROMPT = [{"role": "user", "content": "Write a haiku about autumn leaves."}]


@pytest.fixture(scope="module")
def async_llm():
    engine = AsyncLLM(dtype="float32")
    yield engine
    engine.shutdown()


async def collect(async_llm, prompt, params, request_id=None):
    text, tokens, deltas, last = "", [], 0, None
    async for delta in async_llm.generate(prompt, params, request_id):
        for part in delta.outputs:
            text += part.text
            tokens += part.token_ids
        deltas += 1
        last = delta
    return text, tokens, deltas, last


def test_streamed_deltas_add_up_to_the_offline_reply(async_llm):
    ids = async_llm.engine.apply_chat_template(PROMPT)
    params = SamplingParams(temperature=0, max_tokens=32)
    text, tokens, deltas, last = asyncio.run(collect(async_llm, ids, params))
    (offline,) = LLM(dtype="float32").generate(ids, params)
    assert tokens == offline.outputs[0].token_ids and text == offline.outputs[0].text
    assert deltas > 3 and last.finished and last.outputs[0].finish_reason in ("stop", "length")


def test_concurrent_requests_and_abort_free_blocks(async_llm):
    ids = async_llm.engine.apply_chat_template(PROMPT)

    async def scenario():
        long = SamplingParams(temperature=0.8, seed=1, max_tokens=400, ignore_eos=True)
        running = asyncio.create_task(collect(async_llm, ids, long, request_id="long"))
        short = await collect(async_llm, ids, SamplingParams(temperature=0, max_tokens=8), "short")
        await async_llm.abort("long")
        return short, await running

    (_, short_tokens, _, _), (_, long_tokens, _, long_last) = asyncio.run(scenario())
    assert len(short_tokens) == 8
    assert long_last.outputs[0].finish_reason == "abort" and len(long_tokens) < 400
    assert async_llm.stats()["kv_blocks_used"] == 0


def test_bad_request_raises_before_streaming(async_llm):
    async def scenario():
        async for _ in async_llm.generate("x" * 10, SamplingParams(max_tokens=1), request_id="r"):
            pass
        with pytest.raises(ValueError, match="empty"):
            async for _ in async_llm.generate([], SamplingParams()):
                pass

    asyncio.run(scenario())
