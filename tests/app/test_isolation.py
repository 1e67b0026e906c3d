"""One request's failure, or work that grows with one request's size, never reaches the others: on the shared
`localchat serve`, a grammar that gives up fails its own request while three replies beside it finish; a search runs
on a worker thread, not the event loop, and a grammar of 25 tools compiles off both the event loop and the engine's
thread (the time they take and a stream's pace beside them: benchmarks/hostile_load.py)."""

import asyncio
import json
import threading

import httpx
import pytest

from localchat.app.protocol.conversations import SamplingSettings
from localchat.app.protocol.openai import FunctionDefinition, Tool
from localchat.app.server.active_requests import ActiveRequests
from localchat.app.server.app import create_app
from localchat.app.server.config import ServerConfig
from localchat.app.server.embedded_backend import EmbeddedBackend
from localchat.app.server.engine_job import EngineJob
from localchat.app.server.remote_backend import RemoteBackend
from localchat.app.server.sampling import reply_sampling
from localchat.app.server.store import Store
from localchat.engine import SamplingParams
from support import free_port, sse_events, stream_api, stream_in_background

pytestmark = pytest.mark.slow  # a real `localchat serve`: left out of `./dev test --fast`

CHAT = "/v1/chat/completions"
STORY = [{"role": "user", "content": "Tell me a long story."}]
LONG = {"max_tokens": 300, "temperature": 1.0, "seed": 1}  # over 300 tokens of story: it runs for seconds
RECURSIVE = {"type": "object", "properties": {"x": {"$ref": "#"}}, "required": ["x"]}
HOSTILE_SCHEMAS = [
    RECURSIVE,
    {"type": "string", "pattern": "^a{1000000}$"},
    {"anyOf": [{"type": "object", "properties": {f"k{i}": {"type": "integer"}}, "required": [f"k{i}"]}
               for i in range(3000)]},
]
HELD_S = 60  # how long a test holds work it must see others go on without (a guard: it releases it sooner)


def json_schema(schema: dict) -> dict:
    return {"type": "json_schema", "json_schema": {"name": "hostile", "schema": schema}}


class Stream:
    """A /v1 chat stream read on a thread: its chunks as they come."""

    def __init__(self, api: httpx.Client, body: dict):
        self.chunks: list[dict | str] = []
        self.writing = threading.Event()
        self.thread = threading.Thread(target=self._read, args=(api, body))
        self.thread.start()

    def _read(self, api: httpx.Client, body: dict) -> None:
        with api.stream("POST", CHAT, json={**body, "stream": True}) as response:
            for _, data in sse_events(response):
                self.chunks.append(data if data == "[DONE]" else json.loads(data))
                if data != "[DONE]" and any(c["delta"].get("content") for c in json.loads(data).get("choices", [])):
                    self.writing.set()

    def join(self) -> list[dict | str]:
        self.thread.join(timeout=120)
        assert not self.thread.is_alive(), "the stream hung"
        return self.chunks


def finished_normally(chunks: list[dict | str]) -> str:
    """The text of a stream that ended with a finish reason and `[DONE]`, with no error in it."""
    assert chunks[-1] == "[DONE]" and not any("error" in c for c in chunks[:-1]), chunks[-3:]
    choices = [c for chunk in chunks[:-1] for c in chunk["choices"]]
    assert choices[-1]["finish_reason"] in ("stop", "length")
    return "".join(c["delta"].get("content") or "" for c in choices)


def test_a_grammar_that_gives_up_fails_its_own_request_alone(api, server):
    streamed = Stream(api, {"messages": STORY, **LONG})
    whole: dict = {}
    whole_reply = threading.Thread(target=lambda: whole.setdefault("r", api.post(CHAT, json={"messages": STORY,
                                                                                            **LONG})))
    whole_reply.start()
    cid = api.post("/api/conversations", json={"settings": LONG}).json()["id"]
    listener, events, writing = stream_in_background(api, f"/api/conversations/{cid}/messages",
                                                     {"content": "Tell me a long story."})
    assert streamed.writing.wait(60) and writing.wait(60)

    for schema in HOSTILE_SCHEMAS:  # whole replies: a 400 that says why
        refused = api.post(CHAT, json={"messages": STORY, "max_tokens": 64, "response_format": json_schema(schema)})
        assert refused.status_code == 400, refused.text
        assert "the reply's grammar failed" in refused.json()["error"]["message"]
    hostile = Stream(api, {"messages": STORY, "max_tokens": 64, "response_format": json_schema(RECURSIVE)})
    *_, error, done = hostile.join()  # a stream: the error as its last event, then [DONE]
    assert done == "[DONE]" and "the reply's grammar failed" in error["error"]["message"]
    tools = [{"type": "function", "function": {"name": "recurse", "parameters": RECURSIVE}}]
    tool_chat = api.post("/api/conversations", json={"settings": {"tools": tools, "tool_choice": "required",
                                                                  "max_tokens": 64}}).json()["id"]
    tool_events = stream_api(api, f"/api/conversations/{tool_chat}/messages", {"content": "Call it."})
    assert [e["message"] for e in tool_events if e["type"] == "error"] == [
        next(e["message"] for e in tool_events if e["type"] == "error")]
    assert "the reply's grammar failed" in next(e["message"] for e in tool_events if e["type"] == "error")

    story = finished_normally(streamed.join())
    whole_reply.join(timeout=120)
    assert whole["r"].status_code == 200 and whole["r"].json()["choices"][0]["finish_reason"] in ("stop", "length")
    listener.join(timeout=120)
    assert not listener.is_alive() and "error" not in [e["type"] for e in events]
    assert events[-1]["type"] == "done" and events[-1]["message"]["finish_reason"] in ("stop", "length")
    for text in (story, whole["r"].text, json.dumps(events)):
        assert "$ref" not in text and "a{1000000}" not in text  # nothing of the hostile schemas reached others
    assert server.wait_idle()["localchat_kv_blocks_used"] == 0
    assert httpx.get(f"{server.url}/health").json()["status"] == "ready"


@pytest.mark.parametrize("levels", [250, 1000])
def test_a_schema_nested_too_deep_is_a_400(api, levels):
    """Refused by the body's depth check before anything recurses (the schema's own check is the engine's, for
    callers of the library: tests/engine/frontend/test_structured_output.py)."""
    deep = '{"type": "object", "properties": {"a": ' * (levels // 2) + '{"type": "string"}' + "}}" * (levels // 2)
    tools = f'[{{"type": "function", "function": {{"name": "deep", "parameters": {deep}}}}}]'
    story = json.dumps(STORY)
    for path, body in [
        (CHAT, f'{{"messages": {story}, "response_format": {{"type": "json_schema", "json_schema": '
               f'{{"name": "deep", "schema": {deep}}}}}}}'),
        (CHAT, f'{{"messages": {story}, "tools": {tools}, "tool_choice": "required"}}'),
        ("/api/conversations", f'{{"settings": {{"tools": {tools}, "tool_choice": "required"}}}}'),
    ]:  # written by hand: json.dumps itself recurses
        refused = api.post(path, content=body, headers={"Content-Type": "application/json"})
        assert refused.status_code == 400 and "nested deeper than" in refused.json()["error"]["message"]


def many_tools(count: int) -> list[dict]:
    """Functions whose parameters a grammar must follow: a bounded string, a bounded number, an enum of its own."""
    return [{"type": "function", "function": {"name": f"tool_{i}", "parameters": {
        "type": "object", "required": ["q"], "properties": {
            "q": {"type": "string", "maxLength": 40}, "n": {"type": "integer", "minimum": 0, "maximum": i + 1},
            "mode": {"enum": ["a", "b", f"mode_{i}"]}}}}} for i in range(count)]


# How long a search over long chats or a big tool grammar takes, and what it does to a stream's pace beside it, is
# benchmarks/hostile_load.py's to measure; here: where that work runs. Each is held in the test (an Event) until the
# event loop, or the engine, has shown that it goes on without it.

@pytest.mark.asyncio
async def test_a_search_runs_on_a_worker_thread_while_the_event_loop_answers(tmp_path, monkeypatch):
    store = Store(tmp_path / "app.db")
    app = create_app(ServerConfig(port=8741), backend=RemoteBackend(f"http://127.0.0.1:{free_port()}"), store=store,
                     token="token")
    searching, release, threads = threading.Event(), threading.Event(), []
    search = store.search

    def held_search(query: str, limit: int = 50):
        threads.append(threading.current_thread())
        searching.set()
        release.wait(HELD_S)  # a guard: the event loop answers first, unless the search holds it
        return search(query, limit)

    monkeypatch.setattr(store, "search", held_search)
    # the app on this test's event loop (Litestar's AsyncTestClient runs it on a thread of its own, one request at
    # a time)
    async with httpx.AsyncClient(transport=httpx.ASGITransport(app), base_url="http://127.0.0.1:8741") as client:
        found = asyncio.create_task(client.get("/api/search", params={"q": "paris"},
                                               headers={"Authorization": "Bearer token"}))
        assert await asyncio.to_thread(searching.wait, HELD_S)
        answered_meanwhile = (await client.get("/health")).status_code == 200 and not found.done()
        release.set()
        assert (await found).status_code == 200
    assert answered_meanwhile and threads[0] is not threading.current_thread()  # not the event loop's


@pytest.mark.asyncio
async def test_a_tool_grammar_compiles_off_the_event_loop_and_the_engines_thread(monkeypatch):
    """Through the server's own path (EngineJob.open: the backend checks the request, then starts it): while 25
    tools' grammar compiles, held, a stream beside it goes on getting tokens."""
    backend = EmbeddedBackend(num_kv_blocks=128)
    backend.start()
    try:
        while not backend.loading.ready:
            assert backend.loading.error is None, backend.loading.error
            await asyncio.sleep(0.05)
        llm = backend.llm
        grammars = llm.engine.grammars
        compile_, compiling, release, threads = grammars._compile, threading.Event(), threading.Event(), []

        def held_compile(structured):
            threads.append(threading.current_thread())
            compiling.set()
            release.wait(HELD_S)
            return compile_(structured)

        monkeypatch.setattr(grammars, "_compile", held_compile)
        prompt = llm.apply_chat_template(STORY)
        steady = await llm.add_request(prompt, SamplingParams(temperature=0, max_tokens=8000, ignore_eos=True))
        await anext(steady)
        tools = [Tool(type="function", function=FunctionDefinition(**t["function"])) for t in many_tools(25)]
        params = reply_sampling(SamplingSettings(tools=tools, tool_choice="required", max_tokens=8), 1,
                                backend.tool_syntax).params
        opening = asyncio.create_task(EngineJob.open(backend, ActiveRequests(), [llm.apply_chat_template(
            [{"role": "user", "content": "Use a tool."}], tools=None)], params))
        assert await asyncio.to_thread(compiling.wait, HELD_S)
        for _ in range(5):  # tokens of the stream while the grammar is held
            await anext(steady)
        held = not opening.done()
        release.set()
        job = await opening
        whole = await job.collect()
        await steady.aclose()
        assert held and whole[0].text and threads[0] not in (threading.current_thread(), llm._thread)
    finally:
        await backend.close()
