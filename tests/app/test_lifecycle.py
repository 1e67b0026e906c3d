"""The engine process's life on real processes: one instance per user, the CLI, SIGKILL and restart, a clean
stop with a request in flight, and a client that starts the engine in the background."""

import asyncio
import json
import re
import signal
import socket
import sqlite3

import pytest

from support import Server, free_port, make_home, sse_events, stream_api, stream_in_background

pytestmark = pytest.mark.slow  # real `localchat serve` processes: left out of `./dev test --fast`


@pytest.fixture(scope="module")
def home(tmp_path_factory):
    return make_home(tmp_path_factory.mktemp("lifecycle-home"))


@pytest.fixture
def use_home(home, monkeypatch):
    """Point this test process's lifecycle functions at the module's home."""
    monkeypatch.setenv("LOCALCHAT_HOME", str(home))
    return home


def test_cli_without_an_engine(home):
    idle = Server(home)
    assert idle.run_cli("status").stdout.strip() == "not running"
    result = idle.run_cli("stop")
    assert result.returncode == 0 and result.stdout.strip() == "no engine is running"
    token = idle.run_cli("token").stdout.strip()
    assert token == idle.token and len(token) >= 32


def test_serve_refuses_a_port_in_use(home):
    busy = Server(make_home(home / "other"))
    with socket.socket() as taken:
        taken.bind(("127.0.0.1", 0))
        taken.listen()
        result = busy.run_cli("serve", "--port", str(taken.getsockname()[1]))
    assert result.returncode == 1
    assert result.stderr.strip().splitlines()[-1].startswith("localchat: port ")
    assert "Traceback" not in result.stderr


def test_kill_restart_and_stop(home):
    server = Server(home, args=["--kv-blocks", "256"]).start()
    try:
        # a second instance is refused with a clear message
        second = server.run_cli("serve", "--port", str(free_port()))
        assert second.returncode == 1
        assert "already running" in second.stderr and f"pid {server.process.pid}" in second.stderr
        assert "Traceback" not in second.stderr
        status = server.run_cli("status").stdout
        assert status.startswith("ready:") and str(server.port) in status
        assert re.search(r"KV cache: .*; disk tier [0-9.]+ of 8 GB \(\d+ blocks\)", status)  # serve's default
        state = json.loads((home / "runtime" / "engine.json").read_text())
        assert (state["pid"], state["port"]) == (server.process.pid, server.port)
        url = server.run_cli("web", "--print").stdout.strip()
        assert url.startswith(f"http://127.0.0.1:{server.port}/auth?code=")

        with server.client() as api:
            cid = api.post("/api/conversations", json={}).json()["id"]
            complete = [e for e in stream_api(api, f"/api/conversations/{cid}/messages",
                                              {"content": "Hello!", "settings": {"max_tokens": 4}})
                        if e["type"] in ("user", "done")]
            kept = {e["message"]["id"]: e["message"]["content"] for e in complete}
            # SIGKILL while a reply is being written
            with api.stream("POST", f"/api/conversations/{cid}/messages",
                            json={"content": "Tell me a long story.", "settings": {"max_tokens": 500}}) as r:
                for event, _ in sse_events(r):
                    if event == "delta":
                        server.kill(signal.SIGKILL)
                        break
    finally:
        server.kill()

    db = sqlite3.connect(server.db)
    assert db.execute("PRAGMA integrity_check").fetchone()[0] == "ok"
    db.close()

    server.start()  # the stale state file and lock of the killed process do not stop a restart
    try:
        with server.client() as api:
            saved = {m["id"]: m for m in api.get(f"/api/conversations/{cid}").json()["messages"]}
            for message_id, content in kept.items():
                assert saved[message_id]["content"] == content
            # the interrupted turn's user message was complete; its reply is kept as far as it was saved
            assert [m["content"] for m in saved.values() if m["role"] == "user"] == ["Hello!", "Tell me a long story."]
            assert len(saved) == 4
            (interrupted,) = [m for m in saved.values() if m["id"] not in kept and m["role"] == "assistant"]
            assert interrupted["finish_reason"] == "interrupted" and interrupted["stopped"]

            # `localchat stop` with a reply in flight: it ends with a finish reason and is stored as stopped
            # a reply that cannot end before the stop lands: its one tool call's text is at least 2,000 characters
            long_call = {"type": "function", "function": {"name": "write", "parameters": {
                "type": "object", "properties": {"text": {"type": "string", "minLength": 2000}},
                "required": ["text"]}}}
            listener, events, writing = stream_in_background(
                api, f"/api/conversations/{cid}/messages",
                {"content": "Another long story, please.",
                 "settings": {"max_tokens": 500, "tools": [long_call], "tool_choice": "required"}})
            assert writing.wait(120)
            stopped = server.run_cli("stop")
            listener.join(60)
        assert stopped.returncode == 0 and stopped.stdout.strip() == f"stopped the engine (pid {server.process.pid})"
        assert server.process.wait(30) == 0
        (done,) = [e["message"] for e in events if e["type"] == "done"]
        assert done["finish_reason"] == "abort" and done["stopped"] is True
        assert not (home / "runtime" / "engine.json").exists()
        assert not server.db.with_name("localchat.db-wal").exists()  # the store was closed (checkpointed)
        db = sqlite3.connect(server.db)
        row = db.execute("SELECT stopped, content FROM messages WHERE id = ?", (done["id"],)).fetchone()
        db.close()
        assert row == (1, done["content"])
    finally:
        server.kill()


def test_a_client_starts_the_engine_in_the_background_and_chats(use_home):
    from localchat.app.engine_state import read_state

    port, reports = free_port(), []
    state = asyncio.run(client_session(port, reports))
    assert state.port == port
    # it showed the loading progress: stages from /health while the model loaded
    assert reports and all(r.status == "loading" and r.progress.stage for r in reports)
    assert read_state() is None  # stopped


async def client_session(port: int, reports: list):
    from localchat.app.client.engine_client import EngineClient, EngineError
    from localchat.app.client.engine_process import ensure_engine, stop_engine
    from localchat.app.engine_state import read_state
    from localchat.app.protocol.conversations import DeltaEvent, DoneEvent, SamplingSettings, StartEvent, UserEvent

    assert read_state() is None
    client = await EngineClient.connect(on_progress=reports.append, timeout=240,
                                        serve_args=["--port", str(port), "--kv-blocks", "64"])
    state = read_state()
    try:
        assert ensure_engine(timeout=10) == state  # found, not started again
        assert (await client.health()).status == "ready"
        conversation = await client.create_conversation(title="client", settings=SamplingSettings(max_tokens=4))
        events = [e async for e in client.send(conversation.id, "Hi!", n=2)]
        assert isinstance(events[0], UserEvent) and isinstance(events[1], StartEvent)
        assert any(isinstance(e, DeltaEvent) for e in events)
        done = [e.message for e in events if isinstance(e, DoneEvent)]
        assert len(done) == 2 and {m.id for m in done} == set(events[1].message_ids)
        tree = await client.conversation(conversation.id)
        assert len(tree.messages) == 3
        assert (await client.rename(conversation.id, "renamed")).title == "renamed"
        assert "# renamed" in await client.export(conversation.id)
        with pytest.raises(EngineError) as refused:
            [e async for e in client.send("c_missing", "Hi")]
        assert refused.value.status == 404
    finally:
        await client.close()
        assert stop_engine() == state.pid
    return state


def test_a_taken_default_port_gives_way_to_a_free_one_that_clients_find(use_home, monkeypatch):
    """Another program on the default port (LOCALCHAT_PORT names it here): the engine a client starts in the
    background takes a free port, writes it in the state file, and the client finds it there and chats."""
    from localchat.app.client.engine_process import stop_engine
    from localchat.app.engine_state import read_state
    from localchat.app.paths import log_path

    with socket.socket() as taken:
        taken.bind(("127.0.0.1", 0))
        taken.listen()
        default = taken.getsockname()[1]
        monkeypatch.setenv("LOCALCHAT_PORT", str(default))
        try:
            assert asyncio.run(chat_once(["--kv-blocks", "64"])).finish_reason in ("stop", "length")
            state = read_state()
            assert state.port != default and state.url == f"http://127.0.0.1:{state.port}"
        finally:
            stop_engine()
    assert f"port {default} on 127.0.0.1 is taken by another program; serving on port {state.port}" in (
        log_path().read_text())


async def chat_once(serve_args: list[str]):
    """The reply to one message, from the engine a client finds or starts (with serve_args)."""
    from localchat.app.client.engine_client import EngineClient
    from localchat.app.protocol.conversations import DoneEvent, SamplingSettings

    client = await EngineClient.connect(timeout=240, serve_args=serve_args)
    try:
        conversation = await client.create_conversation(title="taken", settings=SamplingSettings(max_tokens=2))
        (done,) = [e.message async for e in client.send(conversation.id, "Hi!") if isinstance(e, DoneEvent)]
        return done
    finally:
        await client.close()
