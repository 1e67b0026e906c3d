"""Bad input gets a 4xx with a message and the server keeps serving; a client that goes away mid-stream
aborts its request and frees its KV blocks."""

import json
import subprocess

import httpx
import pytest

from support import sse_events

pytestmark = pytest.mark.slow  # a real `localchat serve`: left out of `./dev test --fast`

MODEL = "SmolLM2-135M-Instruct"
CHAT = "/v1/chat/completions"


def chat(**fields):
    return {"model": MODEL, "messages": [{"role": "user", "content": "Hi"}], "max_tokens": 2, **fields}


@pytest.mark.parametrize("path, body, status, message", [
    (CHAT, b'{"messages": [', 400, "malformed JSON"),
    (CHAT, b"", 400, "JSON request body is required"),
    (CHAT, chat(n="three"), 400, "n: Expected `int`, got `str`"),
    (CHAT, chat(messages="hello"), 400, "messages: Expected `array`"),
    (CHAT, {"model": MODEL}, 400, "missing required field `messages`"),
    (CHAT, chat(temperature=-1), 400, "temperature must be at least 0.0"),
    (CHAT, chat(model="no-such-model"), 404, "model 'no-such-model' does not exist"),
    (CHAT, chat(n=17), 400, "n must be at most 16"),
    (CHAT, chat(n=0), 400, "n must be at least 1"),
    (CHAT, chat(max_tokens=0), 400, "max_tokens must be at least 1"),
    (CHAT, chat(max_completion_tokens=-5), 400, "max_completion_tokens must be at least 1"),
    (CHAT, chat(messages=[{"role": "user", "content": "word " * 9000}]), 400, "more than this engine's max_model_len"),
    (CHAT, chat(top_logprobs=3), 400, "top_logprobs needs logprobs"),
    ("/v1/completions", {"model": MODEL, "prompt": [1, "a"]}, 400, "prompt must be"),
    ("/v1/completions", {"model": MODEL, "prompt": [99999999]}, 400, "prompt token ids must be integers"),
    ("/v1/completions", {"model": MODEL, "prompt": "x", "logprobs": 50}, 400, "logprobs must be at most 20"),
])
def test_bad_openai_requests(api, path, body, status, message):
    if isinstance(body, bytes):
        response = api.post(path, content=body, headers={"Content-Type": "application/json"})
    else:
        response = api.post(path, json=body)
    assert response.status_code == status, response.text
    error = response.json()["error"]
    assert message in error["message"]
    assert error["type"] and error["code"] == status


@pytest.mark.parametrize("content_type", ["text/plain", "application/x-www-form-urlencoded",
                                          "multipart/form-data; boundary=x"])
@pytest.mark.parametrize("path, body", [
    (CHAT, chat()), ("/v1/completions", {"model": MODEL, "prompt": "Hi", "max_tokens": 2}),
    ("/api/conversations", {"title": "sent as text"}), ("/api/conversations/{cid}/messages", {"content": "Hi"}),
])
def test_a_json_body_sent_as_another_type_is_a_415_that_names_json(api, path, body, content_type):
    path = path.format(cid=api.post("/api/conversations", json={}).json()["id"])
    sent = api.post(path, content=json.dumps(body), headers={"Content-Type": content_type})
    assert sent.status_code == 415, sent.text
    assert sent.json()["error"]["message"] == (f"the body must be JSON, sent with Content-Type: application/json "
                                               f"(it came as {content_type.partition(';')[0]})")
    if not path.endswith("/messages"):  # the same body as JSON is taken
        assert api.post(path, json=body).status_code in (200, 201)


def test_ollamas_routes_take_what_its_clients_send_and_refuse_text(server):
    """Ollama's documentation sends `curl -d '{...}'` with no -H (application/x-www-form-urlencoded), Ollama reads
    it as JSON, and so does localchat; its Python client sends application/json (test_ollama_api.py). Text or
    multipart is a 415 in Ollama's error shape."""
    body = json.dumps({"model": MODEL, "prompt": "Hi", "stream": False, "options": {"num_predict": 2}})
    curl = subprocess.run(["curl", "-s", "-w", "\n%{http_code}", f"{server.url}/api/generate", "-H",
                           f"Authorization: Bearer {server.token}", "-d", body],
                          capture_output=True, text=True, timeout=120, check=True)
    answer, status = curl.stdout.rsplit("\n", 1)
    assert status == "200" and json.loads(answer)["done"] is True
    headers = {"Authorization": f"Bearer {server.token}"}
    assert httpx.post(f"{server.url}/api/generate", content=body, headers=headers, timeout=120).status_code == 200
    for content_type in ("text/plain", "multipart/form-data; boundary=x"):
        refused = httpx.post(f"{server.url}/api/generate", content=body, timeout=60,
                             headers={**headers, "Content-Type": content_type})
        assert refused.status_code == 415 and refused.json() == {"error": (
            f"the body must be JSON, sent with Content-Type: application/json (it came as "
            f"{content_type.partition(';')[0]})")}


def test_bad_conversation_requests(api):
    cid = api.post("/api/conversations", json={}).json()["id"]
    cases = [
        ("POST", "/api/conversations", {"title": 5}, 400, "title: Expected `str | null`, got `int`"),
        ("GET", "/api/conversations/c_nope", None, 404, "no conversation 'c_nope'"),
        ("PATCH", "/api/conversations/c_nope", {"title": "x"}, 404, "no conversation"),
        ("PATCH", f"/api/conversations/{cid}", {"title": " "}, 400, "title must have text"),
        ("DELETE", "/api/conversations/c_nope", None, 404, "no conversation"),
        ("POST", "/api/conversations/c_nope/messages", {"content": "hi"}, 404, "no conversation"),
        ("POST", f"/api/conversations/{cid}/messages", {"content": "hi", "parent_id": "m_nope"}, 404,
         "no message 'm_nope'"),
        ("POST", f"/api/conversations/{cid}/messages", {"content": "  "}, 400, "the message is empty"),
        ("POST", f"/api/conversations/{cid}/messages", {"content": "hi", "n": 17}, 400, "n must be at most 16"),
        ("POST", f"/api/conversations/{cid}/messages", {"content": "hi", "settings": {"max_tokens": 0}}, 400,
         "max_tokens must be at least 1"),
        ("POST", f"/api/conversations/{cid}/messages", {"content": "word " * 9000}, 400,
         "more than the model's context of 8,192, even with every earlier exchange left out"),
        ("POST", f"/api/conversations/{cid}/messages/m_nope/regenerate", {}, 404, "no message"),
        ("POST", f"/api/conversations/{cid}/messages/m_nope/edit", {"content": "x"}, 404, "no message"),
        ("GET", f"/api/conversations/{cid}/export?format=pdf", None, 400, "format"),
        ("POST", f"/api/conversations/{cid}/stop", {"message_id": 3}, 400, "message_id: Expected `str | null`"),
    ]
    for method, path, body, status, message in cases:
        response = api.request(method, path, json=body)
        assert response.status_code == status, (path, response.text)
        assert message in response.json()["error"]["message"], (path, response.text)
    # refused sends left no message behind
    assert api.get(f"/api/conversations/{cid}").json()["messages"] == []


def test_the_server_keeps_serving_after_bad_input(api, server):
    for _ in range(3):
        api.post(CHAT, content=b"{{{", headers={"Content-Type": "application/json"})
    reply = api.post(CHAT, json=chat(max_tokens=3))
    assert reply.status_code == 200 and reply.json()["choices"][0]["message"]["content"]
    assert server.wait_idle()["localchat_kv_blocks_used"] == 0


@pytest.mark.parametrize("kind", ["v1", "api"])
def test_a_client_that_disconnects_mid_stream_frees_its_blocks(api, server, kind):
    if kind == "v1":
        path, body = CHAT, chat(max_tokens=2000, ignore_eos=True, stream=True)
    else:
        cid = api.post("/api/conversations", json={}).json()["id"]
        path, body = f"/api/conversations/{cid}/messages", {
            "content": "Tell me a long story.",
            "settings": {"max_tokens": 2000, "ignore_eos": True, "temperature": 1.0}}
    with httpx.Client(base_url=server.url, headers={"Authorization": f"Bearer {server.token}"}, timeout=60) as own:
        with own.stream("POST", path, json=body) as response:
            for _, data in sse_events(response):
                if '"delta":{"content"' in data or '"type":"delta"' in data:  # generation has begun
                    running = server.metrics()
                    assert running["localchat_requests_running"] == 1
                    assert running["localchat_kv_blocks_used"] > 0
                    break
    # the connection is closed: the request is aborted and every block it held goes back
    metrics = server.wait_idle()
    assert metrics["localchat_kv_blocks_used"] == 0 and metrics["localchat_requests_running"] == 0
    if kind == "api":
        (reply,) = [m for m in api.get(f"/api/conversations/{cid}").json()["messages"] if m["role"] == "assistant"]
        assert reply["stopped"] and reply["finish_reason"] == "abort" and reply["content"]
    else:
        assert json.loads(data)["choices"]  # it was streaming
