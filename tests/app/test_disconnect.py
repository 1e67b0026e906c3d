"""A whole (not streamed) answer is worked out only while its client waits for it (issue 46): a client that
disconnects from /v1/chat/completions, /v1/completions, or Ollama's /api/chat and /api/generate with stream false
ends its request, and the KV blocks it held are freed, long before the reply could have been written to its end."""

import json
import socket
import time

import pytest

from support import SECOND_MODEL_NAME, SESSION_HOME, running_server, second_model_dir

pytestmark = pytest.mark.slow  # a real `localchat serve`: left out of `./dev test --fast`

CONTEXT = 2048  # tiny-llama's positions; every request below asks for all the context leaves
# Time for the server to see the request (a first one loads its kernels), and, once the client left, for it to end
# the request: generous for a loaded machine; a reply left running ends by itself only after writing its whole
# context, which the checks below tell apart by the tokens generated, not by the time it took.
START_DEADLINE_S = 60
IDLE_DEADLINE_S = 60


@pytest.fixture(scope="module")
def tiny_server(tmp_path_factory):
    # tiny-llama (random weights) writes fast and all but never ends a reply by itself (its end-of-text token is one
    # of ~49k, none favoured): a reply stops only at its length or at an abort, with or without ignore_eos
    model = second_model_dir(SESSION_HOME / "cache" / "test-references" / "second-model") / SECOND_MODEL_NAME
    with running_server(tmp_path_factory.mktemp("disconnect-home"), kv_blocks=CONTEXT // 16 + 16,
                        args=["--max-model-len", str(CONTEXT), "--model", str(model)]) as server:
        server.model = str(model)  # its name in Ollama's API: a folder's name is its path
        yield server


def requests(model: str) -> dict[str, dict]:
    chat = [{"role": "user", "content": "Tell me a long story."}]
    return {
        "/v1/chat/completions": {"messages": chat, "max_tokens": 10**12, "ignore_eos": True},
        "/v1/completions": {"prompt": "Once upon a time", "max_tokens": 10**12, "ignore_eos": True},
        "/api/chat": {"model": model, "messages": chat, "stream": False},  # num_predict left out: to the end
        "/api/generate": {"model": model, "prompt": "Once upon a time", "stream": False},
    }


def post_and_keep_open(server, path: str, body: dict) -> socket.socket:
    """A request sent whole on a connection of its own, whose answer nobody reads."""
    payload = json.dumps(body).encode()
    head = (f"POST {path} HTTP/1.1\r\nHost: 127.0.0.1:{server.port}\r\nAuthorization: Bearer {server.token}\r\n"
            f"Content-Type: application/json\r\nContent-Length: {len(payload)}\r\n\r\n")
    connection = socket.create_connection(("127.0.0.1", server.port))
    connection.sendall(head.encode() + payload)
    return connection


def wait_generating(server, generated_before: float) -> dict[str, float]:
    deadline = time.monotonic() + START_DEADLINE_S
    while time.monotonic() < deadline:
        metrics = server.metrics()
        if (metrics["localchat_requests_running"] == 1
                and metrics["localchat_generated_tokens_total"] > generated_before):
            return metrics
        time.sleep(0.02)
    raise AssertionError(f"the request did not start generating in {START_DEADLINE_S} s: {metrics}")


@pytest.mark.parametrize("path", list(requests("")))
def test_a_client_that_disconnects_ends_its_whole_answer_and_frees_its_blocks(tiny_server, path):
    model = tiny_server.model
    before = tiny_server.wait_idle()["localchat_generated_tokens_total"]
    connection = post_and_keep_open(tiny_server, path, requests(model)[path])
    try:
        running = wait_generating(tiny_server, before)
        assert running["localchat_kv_blocks_used"] > 0
    finally:
        connection.close()
    idle = tiny_server.wait_idle(timeout=IDLE_DEADLINE_S)
    assert idle["localchat_requests_running"] == 0 and idle["localchat_kv_blocks_used"] == 0, idle
    written = idle["localchat_generated_tokens_total"] - before
    assert 0 < written < CONTEXT // 2, f"{written} tokens: the reply went on after its client left"


def test_many_clients_that_leave_at_once_free_every_block(tiny_server):
    """An abort storm: two requests of each API, their clients all gone at once."""
    before = tiny_server.wait_idle()["localchat_generated_tokens_total"]
    bodies = requests(tiny_server.model)
    connections = [post_and_keep_open(tiny_server, path, body) for path, body in bodies.items() for _ in range(2)]
    try:
        deadline = time.monotonic() + START_DEADLINE_S
        while time.monotonic() < deadline:  # every request taken by the engine (running, or waiting for blocks)
            metrics = tiny_server.metrics()
            if metrics["localchat_requests_running"] + metrics["localchat_requests_waiting"] == len(connections):
                break
            time.sleep(0.02)
        assert metrics["localchat_requests_running"] + metrics["localchat_requests_waiting"] == len(connections)
    finally:
        for connection in connections:
            connection.close()
    idle = tiny_server.wait_idle(timeout=IDLE_DEADLINE_S)
    assert idle["localchat_requests_running"] == 0 and idle["localchat_requests_waiting"] == 0, idle
    assert idle["localchat_kv_blocks_used"] == 0, idle
    written = idle["localchat_generated_tokens_total"] - before
    assert written < len(connections) * CONTEXT // 2, f"{written} tokens: replies went on after their clients left"


def test_a_client_that_waits_still_gets_its_whole_answer(tiny_server):
    with tiny_server.client() as api:
        model = tiny_server.model
        chat = api.post("/v1/chat/completions", json={"messages": [{"role": "user", "content": "Hi"}],
                                                       "max_tokens": 40, "ignore_eos": True})
        generate = api.post("/api/generate", json={"model": model, "prompt": "Hi", "stream": False,
                                                   "options": {"num_predict": 40}})
    assert chat.status_code == 200 and chat.json()["usage"]["completion_tokens"] == 40
    assert generate.status_code == 200 and generate.json()["eval_count"] == 40
    assert tiny_server.wait_idle()["localchat_kv_blocks_used"] == 0
    assert "Traceback" not in tiny_server.log.read_text()
