"""The app factory in process (Litestar's AsyncTestClient): wiring, the store-only routes, and what the API
answers while its engine is not ready. The backend here is a remote engine that is not there (yet)."""

import pytest
from litestar.testing import AsyncTestClient
from support import free_port

from localchat.app.backends import RemoteBackend
from localchat.app.server import create_app
from localchat.app.settings import Settings
from localchat.app.store import Store

TOKEN = "test-token"
AUTH = {"Authorization": f"Bearer {TOKEN}"}


@pytest.fixture
def anyio_backend():
    return "asyncio"


@pytest.fixture
async def client(tmp_path):
    settings = Settings(port=8741)
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
    assert conversation["settings"]["seed"] == 4 and conversation["settings"]["temperature"] == 0.7
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
    cookie = {"Cookie": f"localchat_token={TOKEN}"}
    assert (await client.get("/api/conversations", headers=cookie)).status_code == 200
    post = await client.post("/api/conversations", json={}, headers={**cookie, "Origin": "http://127.0.0.1:8741"})
    assert post.status_code == 201
    cross = await client.post("/api/conversations", json={}, headers={**cookie, "Origin": "http://127.0.0.1:9999"})
    assert cross.status_code == 403  # another port is another origin


@pytest.mark.anyio
async def test_metrics_of_a_remote_backend(client):
    text = (await client.get("/metrics")).text
    assert "localchat_requests_running 0" in text
    assert "localchat_kv_blocks_used" not in text  # the remote server's KV cache is its own business
