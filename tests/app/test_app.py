"""The app factory in process (Litestar's AsyncTestClient): wiring, the store-only routes, and what the API
answers while its engine is not ready. The backend here is a remote engine that is not there (yet)."""

import pytest
from litestar.testing import AsyncTestClient

from localchat.app.sampling_defaults import UNKNOWN_MODEL
from localchat.app.server.app import create_app
from localchat.app.server.config import ServerConfig
from localchat.app.server.embedded_backend import EmbeddedBackend
from localchat.app.server.remote_backend import RemoteBackend
from localchat.app.server.store import Store
from support import free_port

TOKEN = "test-token"
AUTH = {"Authorization": f"Bearer {TOKEN}"}


@pytest.fixture
def anyio_backend():
    return "asyncio"


@pytest.fixture
async def client(tmp_path):
    settings = ServerConfig(port=8741)
    backend = RemoteBackend(f"http://127.0.0.1:{free_port()}")  # nothing listens there
    app = create_app(settings, backend=backend, store=Store(tmp_path / "app.db"), token=TOKEN)
    async with AsyncTestClient(app, base_url="http://127.0.0.1:8741") as client:
        yield client


@pytest.mark.anyio
async def test_health_reports_loading_and_generation_waits(client):
    health = (await client.get("/health")).json()
    assert health["status"] == "loading" and health["backend"] == "remote"
    assert health["progress"]["stage"].startswith("connecting to http://127.0.0.1:")
    refused = await client.get("/v1/models", headers=AUTH)
    assert refused.status_code == 503 and "waiting for" in refused.json()["error"]["message"]
    cid = (await client.post("/api/conversations", json={}, headers=AUTH)).json()["id"]
    send = await client.post(f"/api/conversations/{cid}/messages", json={"content": "hi"}, headers=AUTH)
    assert send.status_code == 503
    assert (await client.get(f"/api/conversations/{cid}", headers=AUTH)).json()["messages"] == []


@pytest.mark.anyio
async def test_conversation_crud_without_an_engine(client):
    created = await client.post("/api/conversations", headers=AUTH,
                                json={"title": "Plans", "system_prompt": "Be brief.", "settings": {"seed": 4}})
    assert created.status_code == 201
    conversation = created.json()
    # a value left out is the model's default (a remote engine's model: localchat's)
    settings = conversation["settings"]
    assert settings["seed"] == 4 and settings["temperature"] == UNKNOWN_MODEL.temperature
    cid = conversation["id"]
    renamed = await client.patch(f"/api/conversations/{cid}", json={"title": "Trips"}, headers=AUTH)
    assert renamed.json()["title"] == "Trips" and renamed.json()["system_prompt"] == "Be brief."
    listed = (await client.get("/api/conversations", headers=AUTH)).json()
    assert [c["title"] for c in listed] == ["Trips"]
    exported = await client.get(f"/api/conversations/{cid}/export", headers=AUTH)
    assert exported.text.startswith("# Trips") and "Be brief." in exported.text
    stop = await client.post(f"/api/conversations/{cid}/stop", json={}, headers=AUTH)
    assert stop.json() == {"stopped": []}
    assert (await client.delete(f"/api/conversations/{cid}", headers=AUTH)).status_code == 204
    assert (await client.get("/api/conversations", headers=AUTH)).json() == []


@pytest.mark.anyio
async def test_security_in_front_of_every_route(client):
    assert (await client.get("/api/conversations")).status_code == 401
    assert (await client.get("/api/conversations", headers={**AUTH, "Host": "rebind.example"})).status_code == 403
    assert (await client.get("/health", headers={"Host": "rebind.example"})).status_code == 403
    assert (await client.get("/api/conversations", headers=AUTH)).status_code == 200
    assert (await client.get("/api/conversations", headers={"Cookie": f"localchat_session={TOKEN}"})
            ).status_code == 401  # the cookie holds a session of its own, never the token
    code = (await client.post("/api/auth/login-code", headers=AUTH)).json()["code"]
    login = await client.get("/auth", params={"code": code}, follow_redirects=False)
    session = login.cookies["localchat_session"]
    assert session != TOKEN and "Max-Age=1209600" in login.headers["set-cookie"]  # 14 days
    cookie = {"Cookie": f"localchat_session={session}"}
    assert (await client.get("/api/conversations", headers=cookie)).status_code == 200
    post = await client.post("/api/conversations", json={}, headers={**cookie, "Origin": "http://127.0.0.1:8741"})
    assert post.status_code == 201
    cross = await client.post("/api/conversations", json={}, headers={**cookie, "Origin": "http://127.0.0.1:9999"})
    assert cross.status_code == 403  # another port is another origin
    own = {**cookie, "Origin": "http://127.0.0.1:8741"}
    assert (await client.post("/api/auth/logout", headers=own)).status_code == 200
    assert (await client.get("/api/conversations", headers=cookie)).status_code == 401  # revoked


@pytest.mark.anyio
async def test_every_browser_session_can_be_revoked(client):
    sessions = []
    for _ in range(2):
        code = (await client.post("/api/auth/login-code", headers=AUTH)).json()["code"]
        login = await client.get("/auth", params={"code": code}, follow_redirects=False)
        sessions.append(login.cookies["localchat_session"])
    for session in sessions:
        assert (await client.get("/api/conversations", headers={"Cookie": f"localchat_session={session}"})
                ).status_code == 200
    assert (await client.delete("/api/auth/sessions", headers=AUTH)).json() == {"revoked": 2}
    for session in sessions:
        assert (await client.get("/api/conversations", headers={"Cookie": f"localchat_session={session}"})
                ).status_code == 401


@pytest.mark.anyio
async def test_metrics_of_a_remote_backend(client):
    text = (await client.get("/metrics")).text
    assert "localchat_requests_running 0" in text
    assert "localchat_kv_blocks_used" not in text  # the remote server's KV cache is its own business


class FailingBackend(RemoteBackend):
    async def stats(self):
        raise RuntimeError("failed to read /home/someone/.cache/localchat/secret.bin")


@pytest.mark.anyio
async def test_an_unexpected_error_is_logged_with_its_traceback_and_answered_without_internals(tmp_path, caplog):
    app = create_app(ServerConfig(port=8741), backend=FailingBackend("http://127.0.0.1:9"),
                     store=Store(tmp_path / "a.db"), token=TOKEN)
    async with AsyncTestClient(app, base_url="http://127.0.0.1:8741") as client:
        response = await client.get("/metrics")
    assert response.status_code == 500
    assert response.json()["error"]["type"] == "server_error" and "/home" not in response.text
    (record,) = [r for r in caplog.records if r.name == "localchat.app"]
    assert "GET /metrics failed" in record.getMessage() and record.exc_info[1].args[0].startswith("failed to read")


@pytest.mark.anyio
async def test_a_dead_engine_is_not_reported_ready(tmp_path):
    class DeadEngine:
        error = "OverflowError: Python int too large to convert to C long"

        def shutdown(self):
            pass

    backend = EmbeddedBackend()
    backend.llm, backend.model_name, backend.loading.ready = DeadEngine(), "m", True
    app = create_app(ServerConfig(port=8741), backend=backend, store=Store(tmp_path / "a.db"), token=TOKEN)
    async with AsyncTestClient(app, base_url="http://127.0.0.1:8741") as client:
        health = (await client.get("/health")).json()
        assert health["status"] == "error" and "OverflowError" in health["error"]
        refused = await client.post("/v1/chat/completions", headers=AUTH,
                                    json={"messages": [{"role": "user", "content": "Hi"}]})
        assert refused.status_code == 503 and "the engine stopped after a failure" in refused.json()["error"]["message"]
