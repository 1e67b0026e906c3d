"""`localchat serve --engine-url` in front of a second `localchat serve`: the same store and API, the other
server generating (with its own prefix cache)."""

import openai
import pytest

from support import Server, make_home, stream_api

pytestmark = pytest.mark.slow  # real `localchat serve` processes: left out of `./dev test --fast`

MODEL = "SmolLM2-135M-Instruct"


@pytest.fixture(scope="module")
def front(server, tmp_path_factory):
    """A server without a model of its own: its engine is the shared `server`."""
    process = Server(make_home(tmp_path_factory.mktemp("front-home")), args=["--engine-url", f"{server.url}/v1"],
                     env={"LOCALCHAT_ENGINE_API_KEY": server.token}).start()
    yield process
    process.stop()


def test_health_names_the_remote_backend(front, server):
    with front.client() as api:
        health = api.get("/health").json()
    assert (health["status"], health["backend"], health["model"]) == ("ready", "remote", MODEL)
    assert front.token != server.token  # its own token, not the engine's
    with front.client() as api:
        api.headers["Authorization"] = "Bearer wrong"
        assert api.get("/v1/models").status_code == 401


def test_openai_client_through_the_front(front):
    client = openai.OpenAI(base_url=f"{front.url}/v1", api_key=front.token, max_retries=0, timeout=120)
    assert [m.id for m in client.models.list().data] == [MODEL]
    reply = client.chat.completions.create(model=MODEL, messages=[{"role": "user", "content": "Hi"}], n=2,
                                           max_tokens=4, seed=3)
    assert sorted(c.index for c in reply.choices) == [0, 1] and all(c.message.content for c in reply.choices)
    finishes = {}
    for chunk in client.chat.completions.create(model=MODEL, messages=[{"role": "user", "content": "Hi"}], n=2,
                                                max_tokens=4, stream=True):
        for choice in chunk.choices:
            finishes[choice.index] = choice.finish_reason or finishes.get(choice.index)
    assert set(finishes) == {0, 1} and all(finishes.values())
    with pytest.raises(openai.NotFoundError):  # the engine's own error, relayed
        client.chat.completions.create(model="nope", messages=[{"role": "user", "content": "Hi"}])


def test_conversation_with_branches_through_the_front(front, server):
    with front.client() as api:
        cid = api.post("/api/conversations", json={"system_prompt": "You are brief. " * 20}).json()["id"]
        events = stream_api(api, f"/api/conversations/{cid}/messages",
                            {"content": "Name two colors.", "n": 2, "settings": {"max_tokens": 6, "seed": 1}})
        start = [e for e in events if e["type"] == "start"][0]
        done = [e["message"] for e in events if e["type"] == "done"]
        assert len(done) == 2 and {m["id"] for m in done} == set(start["message_ids"])
        for event in events:
            if event["type"] == "delta":
                assert event["message_id"] == start["message_ids"][event["index"]]
        assert all(m["content"] and m["finish_reason"] in ("stop", "length") for m in done)
        assert all(m["stats"]["prompt_tokens"] > 0 for m in done)
        # continue one branch: the engine's prefix cache serves the shared start of the conversation
        follow = [e["message"] for e in stream_api(
            api, f"/api/conversations/{cid}/messages",
            {"content": "And one more?", "parent_id": done[1]["id"], "settings": {"max_tokens": 4}})
            if e["type"] == "done"][0]
        assert follow["stats"]["cached_tokens"] > 0
        regenerated = [e for e in stream_api(api, f"/api/conversations/{cid}/messages/{done[0]['id']}/regenerate",
                                             {"n": 2, "settings": {"max_tokens": 3}}) if e["type"] == "done"]
        assert len(regenerated) == 2
        tree = api.get(f"/api/conversations/{cid}").json()["messages"]
        assert len(tree) == 1 + 2 + 2 + 2
        assert all("token_ids" not in m for m in tree)
    # the conversations live in the front's store, not the engine's
    with server.client() as engine_api:
        assert cid not in {c["id"] for c in engine_api.get("/api/conversations").json()}
