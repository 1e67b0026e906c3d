"""Switching the engine's model through the API, against a real engine with a second model (tiny-llama): the
catalog, the switch and its progress, a conversation continued with the other model, the choice remembered."""

import time

import httpx
import pytest

from localchat.engine.loading.model_catalog import EMBEDDED_NAME
from support import SECOND_MODEL_NAME, Server, stream_api, stream_in_background

pytestmark = pytest.mark.slow


def catalog(client: httpx.Client) -> dict:
    response = client.get("/api/models")
    assert response.status_code == 200, response.text
    return response.json()


def switch(client: httpx.Client, name: str) -> dict:
    """POST the switch, then wait for the new model to be ready; the /health answers seen while it loaded."""
    response = client.post("/api/models/current", json={"model": name})
    assert response.status_code == 202, response.text
    seen = []
    deadline = time.monotonic() + 120
    while time.monotonic() < deadline:
        health = client.get("/health").json()
        seen.append(health)
        if health["status"] != "loading":
            assert health["status"] == "ready", health
            return {"health": health, "seen": seen}
        time.sleep(0.05)
    raise TimeoutError(f"{name} did not load: {seen[-1]}")


def second_model(client: httpx.Client) -> str:
    return next(m["name"] for m in catalog(client)["models"] if m["name"].endswith(SECOND_MODEL_NAME))


def test_the_catalog_lists_both_models_and_marks_the_current_one(two_model_server):
    with two_model_server.client() as client:
        listed = catalog(client)
        names = {m["name"]: m for m in listed["models"]}
        assert listed["switchable"] and listed["current"] == EMBEDDED_NAME and names[EMBEDDED_NAME]["current"]
        tiny = names[second_model(client)]
        assert tiny["supported"] and not tiny["current"] and tiny["format"] == "safetensors"
        assert tiny["architecture"] == "llama" and tiny["memory_bytes"] > 0
        assert tiny["served_name"] == SECOND_MODEL_NAME and names[EMBEDDED_NAME]["served_name"] == EMBEDDED_NAME


def test_unknown_and_malformed_choices_are_refused(two_model_server):
    with two_model_server.client() as client:
        missing = client.post("/api/models/current", json={"model": "no-such-model"})
        assert missing.status_code == 404 and "no-such-model" in missing.json()["error"]["message"]
        assert client.post("/api/models/current", json={"name": "x"}).status_code == 400
        assert client.get("/health").json()["model"] == EMBEDDED_NAME  # nothing was unloaded


def test_a_chat_continued_with_another_model_is_tokenized_again_and_says_so(two_model_server, tmp_path):
    with two_model_server.client() as client:
        conversation = client.post("/api/conversations", json={
            "settings": {"temperature": 0, "max_tokens": 8}}).json()
        path = f"/api/conversations/{conversation['id']}/messages"
        first = stream_api(client, path, {"content": "Name a colour."})
        reply = first[-1]["message"]
        assert first[1]["model"] == EMBEDDED_NAME and first[1]["retokenized_from"] == []

        # a reply being written when the switch comes is stopped and kept
        listener, events, writing = stream_in_background(client, path, {
            "content": "Count to one hundred.", "parent_id": reply["id"],
            "settings": {"temperature": 0, "max_tokens": 2000}})
        assert writing.wait(60)
        tiny = second_model(client)
        switched = switch(client, tiny)
        listener.join(60)
        stopped = events[-1]["message"]
        assert events[-1]["type"] == "done" and stopped["stopped"] and stopped["finish_reason"] == "abort"
        assert any(h["status"] == "loading" and h["progress"] for h in switched["seen"])
        assert switched["health"]["model"] == SECOND_MODEL_NAME
        assert catalog(client)["current"] == tiny

        second = stream_api(client, path, {"content": "And another?", "parent_id": reply["id"]})
        start, done = second[1], second[-1]["message"]
        assert start["model"] == SECOND_MODEL_NAME and start["retokenized_from"] == [EMBEDDED_NAME]
        assert done["model"] == SECOND_MODEL_NAME
        # a new model's cache: at most the template's opening, which its warm-up request shares, not the first turn
        assert done["stats"]["cached_tokens"] < reply["stats"]["prompt_tokens"]
        stored = client.get(f"/api/conversations/{conversation['id']}").json()
        assert stored["conversation"]["model"] == SECOND_MODEL_NAME
        by_id = {m["id"]: m for m in stored["messages"]}
        assert by_id[reply["id"]]["model"] == EMBEDDED_NAME  # each message keeps the model that wrote it

        # the choice outlives the process: a restart without --model loads it again
        two_model_server.stop()
        two_model_server.start()
        assert client.get("/health").json()["model"] == SECOND_MODEL_NAME

        switch(client, EMBEDDED_NAME)
        back = stream_api(client, path, {"content": "Name a colour.", "parent_id": None})
        assert back[-1]["message"]["content"] == reply["content"]  # the same model, greedy: the same reply
        assert catalog(client)["current"] == EMBEDDED_NAME


def test_switching_to_the_running_model_reloads_nothing(two_model_server):
    with two_model_server.client() as client:
        current = catalog(client)["current"]
        response = client.post("/api/models/current", json={"model": current})
        assert response.status_code == 202 and client.get("/health").json()["status"] == "ready"


def test_a_server_restarted_with_a_vanished_model_loads_the_default(tmp_path):
    from support import make_home

    home = make_home(tmp_path / "home")
    (home / "data").mkdir(parents=True, exist_ok=True)
    (home / "data" / "model").write_text(str(tmp_path / "gone-model") + "\n")
    server = Server(home, args=["--kv-blocks", "64"]).start()
    try:
        assert httpx.get(f"{server.url}/health").json()["model"] == EMBEDDED_NAME
    finally:
        server.stop()
