"""AsyncLLM streams the same replies as LLM, runs requests side by side, and aborts cleanly."""

import asyncio
import threading
import time

import pytest

from localchat.engine import LLM, AsyncLLM, SamplingParams, StructuredOutput
from localchat.engine.frontend.async_llm import EngineFailed
from localchat.engine.frontend.outputs import RequestFailed

pytestmark = pytest.mark.slow  # the embedded model: left out of `./dev test --fast`

PROMPT = [{"role": "user", "content": "Write a haiku about autumn leaves."}]


@pytest.fixture(scope="module")
def async_llm():
    """The engine with a KV cache of 512 blocks (8,192 tokens, the model's whole context, as by default): a failed
    step zeroes the cache, which took seconds of page faults on the default share of memory (gigabytes)."""
    engine = AsyncLLM(dtype="float32", num_kv_blocks=512)
    assert engine.max_model_len == 8192
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
        long = SamplingParams(temperature=0.8, seed=1, max_tokens=4000, ignore_eos=True)  # running at the abort
        running = asyncio.create_task(collect(async_llm, ids, long, request_id="long"))
        short = await collect(async_llm, ids, SamplingParams(temperature=0, max_tokens=8), "short")
        await async_llm.abort("long")
        return short, await running

    (_, short_tokens, _, _), (_, long_tokens, _, long_last) = asyncio.run(scenario())
    assert len(short_tokens) == 8
    assert long_last.outputs[0].finish_reason == "abort" and len(long_tokens) < 4000
    assert asyncio.run(async_llm.stats()).kv.used == 0


def test_an_abort_right_after_the_request_ends_its_stream(async_llm):
    """The request is queued when add_request returns, so an abort that follows at once always finds it."""
    ids = async_llm.engine.apply_chat_template(PROMPT)

    async def scenario(i):
        stream = await async_llm.add_request(ids, SamplingParams(n=2, max_tokens=400, ignore_eos=True), f"quick-{i}")
        await async_llm.abort(f"quick-{i}")
        return [delta async for delta in stream]

    for i in range(5):
        deltas = asyncio.run(asyncio.wait_for(scenario(i), 60))
        assert deltas[-1].finished and {o.finish_reason for o in deltas[-1].outputs} == {"abort"}
    assert asyncio.run(async_llm.stats()).kv.used == 0


def test_a_failing_step_fails_its_requests_and_the_engine_goes_on(async_llm, monkeypatch):
    ids = async_llm.engine.apply_chat_template(PROMPT)
    step, calls = async_llm.engine.step, []

    def failing_once():
        calls.append(1)
        if len(calls) == 3:
            raise OverflowError("a step that fails")
        return step()

    monkeypatch.setattr(async_llm.engine, "step", failing_once)
    params = SamplingParams(temperature=0, max_tokens=16, ignore_eos=True)
    with pytest.raises(EngineFailed, match="a step that fails"):
        asyncio.run(collect(async_llm, ids, params))
    assert async_llm.alive and asyncio.run(async_llm.stats()).kv.used == 0
    _, tokens, _, last = asyncio.run(collect(async_llm, ids, params))  # the next request is served
    assert len(tokens) == 16 and last.finished


def test_an_engine_that_cannot_recover_refuses_new_requests(monkeypatch):
    broken = AsyncLLM(dtype="float32", num_kv_blocks=16)
    ids = broken.engine.apply_chat_template(PROMPT)
    monkeypatch.setattr(broken.engine, "step", lambda: 1 / 0)
    monkeypatch.setattr(broken.engine, "reset", lambda: 1 / 0)
    with pytest.raises(EngineFailed):
        asyncio.run(collect(broken, ids, SamplingParams(max_tokens=4)))
    assert not broken.alive and "ZeroDivisionError" in broken.error
    with pytest.raises(RuntimeError, match="the engine has stopped"):
        asyncio.run(collect(broken, ids, SamplingParams(max_tokens=4)))
    broken.shutdown()


def test_bad_request_raises_before_streaming(async_llm):
    async def scenario():
        async for _ in async_llm.generate("x" * 10, SamplingParams(max_tokens=1), request_id="r"):
            pass
        with pytest.raises(ValueError, match="empty"):
            async for _ in async_llm.generate([], SamplingParams()):
                pass

    asyncio.run(scenario())


def test_a_grammar_that_gives_up_fails_its_stream_alone(async_llm):
    ids = async_llm.engine.apply_chat_template(PROMPT)
    recursive = {"type": "object", "properties": {"x": {"$ref": "#"}}, "required": ["x"]}
    hostile = SamplingParams(temperature=1.0, seed=1, max_tokens=64, structured=StructuredOutput.json_schema(recursive))
    free = SamplingParams(temperature=0, max_tokens=24, ignore_eos=True)

    async def scenario():
        running = asyncio.create_task(collect(async_llm, ids, free))
        with pytest.raises(RequestFailed, match="the reply's grammar failed"):
            await collect(async_llm, ids, hostile)
        return await running

    _, tokens, _, last = asyncio.run(scenario())
    assert len(tokens) == 24 and last.finished and last.error is None
    assert asyncio.run(async_llm.stats()).kv.used == 0


def test_a_slow_grammar_compiles_while_the_other_replies_go_on(async_llm, monkeypatch):
    """Compiling happens on a worker thread: neither the event loop nor the engine's thread waits for it."""
    ids = async_llm.engine.apply_chat_template(PROMPT)
    grammars = async_llm.engine.grammars
    slow = StructuredOutput.json_schema({"type": "object", "title": "slow to compile"})
    compile_, compiling, compiled = grammars._compile, threading.Event(), threading.Event()

    def slow_compile(structured):
        if structured == slow:
            compiling.set()
            time.sleep(2)
            compiled.set()
        return compile_(structured)

    monkeypatch.setattr(grammars, "_compile", slow_compile)

    async def scenario():
        deltas_while_compiling = 0

        writing = asyncio.Event()

        async def stream():
            nonlocal deltas_while_compiling
            params = SamplingParams(temperature=0, max_tokens=4000, ignore_eos=True)  # until it is aborted
            async for _ in async_llm.generate(ids, params, "steady"):
                writing.set()
                deltas_while_compiling += compiling.is_set() and not compiled.is_set()

        steady = asyncio.create_task(stream())
        await writing.wait()
        await collect(async_llm, ids, SamplingParams(max_tokens=4, structured=slow))
        await async_llm.abort("steady")
        await steady
        return deltas_while_compiling

    assert asyncio.run(scenario()) >= 5


def test_a_caller_that_stops_waiting_during_a_long_step_fails_no_reply(async_llm, monkeypatch):
    """A step held in the test (longer than any caller waits): the stats come at once, from the snapshot; calls
    whose callers give up (end-thinking, a deleted chat's forget) still run once the step ends, and the replies
    running meanwhile all finish whole."""
    ids = async_llm.engine.apply_chat_template(PROMPT)
    step, in_long_step, release = async_llm.engine.step, threading.Event(), threading.Event()

    def long_step():
        if len(async_llm.engine.requests) == 2 and not in_long_step.is_set():  # both replies are in the engine
            in_long_step.set()
            release.wait()
        return step()

    monkeypatch.setattr(async_llm.engine, "step", long_step)
    params = SamplingParams(temperature=0, max_tokens=24, ignore_eos=True)

    async def scenario():
        replies = [asyncio.create_task(collect(async_llm, ids, params, f"held-{i}")) for i in range(2)]
        await asyncio.to_thread(in_long_step.wait)
        try:
            stats = await asyncio.wait_for(async_llm.stats(), 30)  # the snapshot: the held step is not waited for
            assert not release.is_set() and stats.num_running + stats.num_waiting == 2
            for gives_up in (async_llm.end_thinking("held-0"), async_llm.forget([ids], [])):
                with pytest.raises(TimeoutError):
                    await asyncio.wait_for(gives_up, 0.05)  # its caller leaves while the step still runs
        finally:
            release.set()
        return await asyncio.gather(*replies)

    for _, tokens, _, last in asyncio.run(scenario()):
        assert len(tokens) == 24 and last.finished and last.error is None
        assert last.outputs[0].finish_reason == "length"
    assert async_llm.alive and asyncio.run(async_llm.stats()).kv.used == 0


def test_a_stream_whose_event_loop_has_closed_is_aborted_alone(async_llm):
    """A caller's event loop that closes with its stream unread: the engine cannot hand that stream its deltas, so it
    aborts that request, and the next caller's reply is whole."""
    ids = async_llm.engine.apply_chat_template(PROMPT)

    async def leave():
        await async_llm.add_request(ids, SamplingParams(max_tokens=400, ignore_eos=True), "left")

    asyncio.run(leave())  # the loop closes; the stream was never read
    params = SamplingParams(temperature=0, max_tokens=16, ignore_eos=True)
    _, tokens, _, last = asyncio.run(asyncio.wait_for(collect(async_llm, ids, params), 120))
    assert len(tokens) == 16 and last.error is None and async_llm.alive
    assert "left" not in async_llm.engine.requests and asyncio.run(async_llm.stats()).kv.used == 0
