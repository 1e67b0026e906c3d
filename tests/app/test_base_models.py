"""A base model (a GGUF without a chat template) served by `localchat serve --model FILE`, of the Llama and of the
Gemma 3 shape (tests/base_models.py): it loads, /health says it cannot chat, /v1/completions answers, and a chat,
over /v1 or in a conversation, is refused with a 400 that says why. A chat written with a chat model stays
usable (opened, its system prompt changed, deleted) once the engine has switched to the base model."""

import time
from collections.abc import Iterator

import httpx
import pytest
from base_models import BASE_GEMMA3, BASE_LLAMA, base_model_file, base_model_server

from support import SECOND_MODEL_NAME, Server, stream_api

pytestmark = pytest.mark.slow

NO_TEMPLATE = "has no chat template (a base model, not a chat model): it answers /v1/completions only"


@pytest.fixture(scope="module", params=[BASE_LLAMA, BASE_GEMMA3])
def base_model(request) -> str:
    return request.param


@pytest.fixture(scope="module")
def base_server(base_model, tmp_path_factory) -> Iterator[Server]:
    with base_model_server(tmp_path_factory.mktemp(f"{base_model}-home"), base_model) as server:
        yield server


@pytest.fixture
def base_api(base_server) -> httpx.Client:
    with base_server.client() as client:
        yield client


def assert_refused_as_a_base_model(response: httpx.Response, model: str) -> None:
    assert response.status_code == 400, response.text
    assert response.json()["error"]["message"].startswith(f"{model} {NO_TEMPLATE}")


def test_it_loads_and_health_says_it_cannot_chat(base_model, base_api):
    health = base_api.get("/health").json()
    assert (health["status"], health["model"], health["chat"]) == ("ready", base_model, False)
    assert base_api.get("/v1/models").json()["data"][0]["id"] == base_model


def test_the_embedded_chat_model_can_chat(api):
    assert api.get("/health").json()["chat"] is True


def test_completions_answer(base_model, base_api):
    response = base_api.post("/v1/completions", json={"prompt": "Once upon a time", "max_tokens": 4,
                                                      "temperature": 0})
    assert response.status_code == 200, response.text
    body = response.json()
    assert body["model"] == base_model and body["choices"][0]["text"]
    assert body["usage"]["completion_tokens"] == 4


def test_a_chat_completion_is_refused_with_a_clear_400(base_model, base_api):
    for stream in (False, True):
        response = base_api.post("/v1/chat/completions", json={"messages": [{"role": "user", "content": "Hi"}],
                                                               "stream": stream})
        assert_refused_as_a_base_model(response, base_model)


def test_a_conversation_message_is_refused_with_a_clear_400(base_model, base_api):
    cid = base_api.post("/api/conversations", json={}).json()["id"]
    response = base_api.post(f"/api/conversations/{cid}/messages", json={"content": "Hello"})
    assert_refused_as_a_base_model(response, base_model)
    assert base_api.get(f"/api/conversations/{cid}").json()["messages"] == []  # nothing was stored


def test_localchat_chat_says_the_model_cannot_chat(base_model, base_server):
    """Through the running engine, and in its own process (another --model than the engine runs)."""
    for args in ([], ["--model", str(base_model_file(base_model))]):
        done = base_server.run_cli("chat", *args, "Hello")
        assert done.returncode == 1 and f"localchat: {base_model} has no chat template" in done.stderr, done.stderr
        assert "Traceback" not in done.stderr


def test_a_chat_of_a_chat_model_stays_usable_under_the_base_model(base_model, base_api):
    """Written with tiny-llama, then the engine switches to the base model: the chat opens, its system prompt
    changes, a reply in it is refused (a 400, not a 500), and it is deleted (its prompts are not rendered)."""
    catalog = base_api.get("/api/models").json()
    chat_model = next(m["name"] for m in catalog["models"] if m["served_name"] == SECOND_MODEL_NAME)
    assert switch(base_api, chat_model)["chat"] is True
    cid = base_api.post("/api/conversations", json={"settings": {"max_tokens": 3}}).json()["id"]
    events = stream_api(base_api, f"/api/conversations/{cid}/messages", {"content": "Hello"})
    user = next(e["message"] for e in events if e["type"] == "user")
    assert switch(base_api, str(base_model_file(base_model)))["chat"] is False

    assert base_api.get(f"/api/conversations/{cid}").status_code == 200
    changed = base_api.patch(f"/api/conversations/{cid}", json={"system_prompt": "Be terse."})
    assert changed.status_code == 200, changed.text
    regenerated = base_api.post(f"/api/conversations/{cid}/messages/{user['id']}/regenerate", json={})
    assert_refused_as_a_base_model(regenerated, base_model)
    edited = base_api.post(f"/api/conversations/{cid}/messages/{user['id']}/edit", json={"content": "Hi"})
    assert_refused_as_a_base_model(edited, base_model)
    assert base_api.delete(f"/api/conversations/{cid}").status_code == 204


def switch(client: httpx.Client, name: str) -> dict:
    """Switch the engine to `name` (a name GET /api/models lists); its /health once it is ready."""
    response = client.post("/api/models/current", json={"model": name})
    assert response.status_code == 202, response.text
    deadline = time.monotonic() + 120
    while (health := client.get("/health").json())["status"] == "loading":
        assert time.monotonic() < deadline, f"{name} did not load: {health}"
        time.sleep(0.1)
    assert health["status"] == "ready", health
    return health
