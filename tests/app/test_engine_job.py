"""One lifecycle for every engine request of the server (engine_job.py): EngineJob opens, registers and aborts them
all, /v1's and Ollama's, a conversation's replies (and those sampled again), summaries and chat titles. No model: a
backend that records what it is asked plays the engine."""

import ast
import asyncio
from collections.abc import AsyncIterator
from pathlib import Path

import pytest

import localchat.app.server as server_package
from localchat.app.protocol.conversations import SamplingSettings, filled
from localchat.app.sampling_defaults import UNKNOWN_MODEL
from localchat.app.server.active_requests import ActiveRequests
from localchat.app.server.backends import BackendRequestError, Update
from localchat.app.server.conversations import Conversations
from localchat.app.server.engine_job import PREFIX_PARAMS, EngineJob
from localchat.app.server.store import Store
from localchat.app.server.tool_calls import IN_SYSTEM_PROMPT
from localchat.engine.frontend.outputs import CompletionOutput
from localchat.engine.sampling_params import SamplingParams

SERVER = Path(server_package.__file__).parent


class RecordingBackend:
    """Takes chat messages (as a remote backend does); each request writes `reply` word by word once `release` is
    set (at once where it is None); records the requests opened and aborted. refuse: the prompts it will not open."""

    kind, renders_templates, model_name, tool_syntax, sampling = "remote", False, "recording", IN_SYSTEM_PROMPT, \
        UNKNOWN_MODEL
    max_model_len = template = None

    def __init__(self, reply: str = "Fine words.", refuse: tuple = ()):
        self.reply, self.refuse = reply, refuse
        self.opened: list[tuple[str, object]] = []  # (request id, prompt)
        self.params: dict[str, SamplingParams] = {}  # by request id
        self.aborted: list[str] = []
        self.release: asyncio.Event | None = None

    def check_chat(self) -> None:
        pass

    def check_text_size(self, num_chars: int) -> None:
        pass

    async def check_request(self, prompt, params) -> None:
        pass

    async def open(self, prompt, params, request_id, draft_sources=()) -> AsyncIterator[Update]:
        if prompt in self.refuse:
            raise BackendRequestError("refused")
        self.opened.append((request_id, prompt))
        self.params[request_id] = params
        return self._stream(request_id)

    async def _stream(self, request_id: str) -> AsyncIterator[Update]:
        if self.release is not None:
            await self.release.wait()
        words = self.reply.split(" ")
        for i, word in enumerate(words):
            if request_id in self.aborted:
                yield Update([CompletionOutput(0, finish_reason="abort")], prompt_tokens=5, finished=True)
                return
            last = i == len(words) - 1
            yield Update([CompletionOutput(0, text=word + ("" if last else " "), token_ids=[i],
                                           finish_reason="stop" if last else None)], prompt_tokens=5, finished=last)

    async def abort(self, request_id: str) -> None:
        self.aborted.append(request_id)


def _calls(tree: ast.AST, method: str, receiver: str) -> list[int]:
    """The lines that call `<...receiver>.method(...)` (self.backend.open, backend.open, ...)."""
    found = []
    for node in ast.walk(tree):
        if isinstance(node, ast.Call) and isinstance(node.func, ast.Attribute) and node.func.attr == method:
            target = node.func.value
            name = target.attr if isinstance(target, ast.Attribute) else getattr(target, "id", None)
            if name == receiver:
                found.append(node.lineno)
    return found


def test_only_engine_job_opens_registers_and_ends_engine_requests():
    """No module of the server but engine_job.py starts an engine request (Backend.open) or adds one to, or removes
    one from, the active requests; aborting by id stays open to stop and shutdown (their requests' readers then
    close their jobs)."""
    others = {}
    for path in sorted(SERVER.glob("*.py")):
        tree = ast.parse(path.read_text())
        calls = {f"{receiver}.{method}": lines for receiver, method in
                 (("backend", "open"), ("active", "add"), ("active", "remove"), ("active", "rename"))
                 if (lines := _calls(tree, method, receiver))}
        if calls:
            others[path.name] = calls
    assert set(others) == {"engine_job.py"}, others


@pytest.mark.asyncio
async def test_a_job_registers_its_requests_and_closing_it_unregisters_and_aborts_them():
    backend, active = RecordingBackend(), ActiveRequests()
    backend.release = asyncio.Event()
    job = await EngineJob.open(backend, active, [["a"], ["b"]], SamplingParams(n=2), conversation_id="c_1",
                               message_ids=["m_1"])
    assert [rid for rid, _ in backend.opened] == job.request_ids and len(job.request_ids) == 2
    assert set(active.matching("c_1", "m_1")) == set(job.request_ids)
    assert active.busy.is_set() and not active.idle.is_set()
    async with job:
        pass
    assert active.requests == {} and active.idle.is_set() and not active.busy.is_set()
    assert backend.aborted == job.request_ids


@pytest.mark.asyncio
async def test_a_prompt_that_cannot_start_aborts_the_prompts_started_before_it():
    backend, active = RecordingBackend(refuse=(["bad"],)), ActiveRequests()
    with pytest.raises(BackendRequestError):
        await EngineJob.open(backend, active, [["good"], ["bad"]], SamplingParams())
    ((started, _),) = backend.opened
    assert started in backend.aborted and active.requests == {} and active.idle.is_set()


@pytest.mark.asyncio
async def test_a_reader_that_leaves_early_aborts_every_request_and_one_that_reads_to_the_end_is_unregistered():
    backend, active = RecordingBackend("one two three four"), ActiveRequests()
    job = await EngineJob.open(backend, active, [["a"], ["b"]], SamplingParams())
    async with job:
        async for _ in job.updates():
            break  # the client left
    assert active.requests == {} and sorted(backend.aborted) == sorted(job.request_ids)

    whole = await EngineJob.open(backend, active, [["a"], ["b"]], SamplingParams())
    outputs = await whole.collect()
    assert sorted((o.index, o.text) for o in outputs) == [(0, "one two three four"), (1, "one two three four")]
    assert whole.completion_tokens == 8 and whole.prompt_tokens == [5, 5] and active.requests == {}


@pytest.mark.asyncio
async def test_a_varying_fork_computes_its_history_first_then_opens_each_prompt_with_its_own_sampling():
    """A fork whose replies vary on purpose: the history every prompt starts with runs first as a request of its own
    (registered with the fork's replies), then a request per prompt, each with its sampling; reply i is prompt i's."""
    backend, active = RecordingBackend("Fine words."), ActiveRequests()
    hot, cool = SamplingParams(temperature=1.0, seed=1), SamplingParams(temperature=0.2, seed=2)
    job = await EngineJob.open(backend, active, [[1, 2, 3, 7], [1, 2, 3, 8, 9]], [hot, cool], conversation_id="c_1",
                               message_ids=["m_1", "m_2"], prefix=[1, 2, 3])
    ((history_id, history),) = backend.opened  # the prompts wait for it
    assert history == [1, 2, 3] and backend.params[history_id] == PREFIX_PARAMS
    assert list(active.matching("c_1", "m_2")) == [history_id]
    async with job:
        texts = {}
        async for prompt, update in job.updates():
            for out in update.outputs:
                assert out.index == prompt
                texts[prompt] = texts.get(prompt, "") + out.text
    assert texts == {0: "Fine words.", 1: "Fine words."}
    _, *opened = backend.opened
    assert [prompt for _, prompt in opened] == [[1, 2, 3, 7], [1, 2, 3, 8, 9]]
    assert [backend.params[rid] for rid, _ in opened] == [hot, cool]
    assert job.request_ids == [history_id] + [rid for rid, _ in opened] and job.prompt_tokens == [5, 5]
    assert active.requests == {} and sorted(backend.aborted) == sorted(job.request_ids)


@pytest.mark.asyncio
async def test_a_varying_fork_stopped_while_its_history_computes_starts_none_of_its_prompts():
    backend, active = RecordingBackend("Fine words."), ActiveRequests()
    backend.release = asyncio.Event()
    job = await EngineJob.open(backend, active, [[1, 2, 7], [1, 2, 8]], [SamplingParams(), SamplingParams()],
                               conversation_id="c_1", message_ids=["m_1", "m_2"], prefix=[1, 2])
    for request_id in active.matching("c_1", "m_1"):  # as a stop does
        await backend.abort(request_id)
    backend.release.set()
    async with job:
        ended = [(prompt, [(o.index, o.finish_reason) for o in update.outputs])
                 async for prompt, update in job.updates()]
    assert ended == [(0, [(0, "abort")]), (1, [(1, "abort")])]
    assert len(backend.opened) == 1 and active.requests == {}


@pytest.mark.asyncio
async def test_a_title_gives_way_while_a_reply_waits_for_nothing():
    backend, active = RecordingBackend(), ActiveRequests()
    backend.release = asyncio.Event()
    title = await EngineJob.open(backend, active, [["title"]], SamplingParams(), gives_way=True)
    assert title.request_ids[0] in active.requests and active.idle.is_set() and not active.busy.is_set()
    reply = await EngineJob.open(backend, active, [["reply"]], SamplingParams(), conversation_id="c_1")
    assert active.busy.is_set() and not active.idle.is_set()
    await reply.close()
    assert active.idle.is_set() and title.request_ids[0] in active.requests
    await title.close()
    assert active.requests == {}


@pytest.mark.asyncio
async def test_a_summary_runs_as_a_job_of_its_conversation(tmp_path):
    """A summary's request is the conversation's while it runs (a stop or a delete of the chat finds it), and its
    job ends with it."""
    store, backend, active = Store(tmp_path / "chats.db"), RecordingBackend("A short summary."), ActiveRequests()
    conversations = Conversations(store, backend, active)
    chat = store.create_conversation("Trip", "", filled(SamplingSettings(max_tokens=32), UNKNOWN_MODEL))
    await conversations.add_user_message(chat, None, "Plan a trip to Oslo.")
    backend.release = asyncio.Event()
    summarizing = asyncio.ensure_future(conversations.summarize(store.get_conversation(chat.id), None))
    while not backend.opened:
        await asyncio.sleep(0.01)
    ((request_id, prompt),) = backend.opened
    assert list(active.matching(chat.id)) == [request_id] and "summary" in prompt[-1]["content"]
    backend.release.set()
    summary = await asyncio.wait_for(summarizing, 10)
    assert summary.summary_of == chat.id and summary.system_prompt.endswith("A short summary.")
    assert active.requests == {} and backend.aborted == [request_id]
