"""Regressions of the hardening probe, on real `localchat serve` processes: one bad request never stops the
engine, a stop right after a send ends its stream, a delete during a reply ends it cleanly, a huge prompt
does not freeze the server, settings that cannot work are refused where they are set, unsupported parameters
are named, a partial reply survives a SIGKILL, and the chat files are private under a 022 umask. Bodies: one nested
too deep is a 400 before it is decoded, an unknown field is named, NUL characters and lone surrogates are refused in
words, a long name comes back cut; the schema states the limits, OPTIONS every method, the export one charset."""

import contextlib
import json
import os
import random
import signal
import sqlite3
import stat
import subprocess
import threading
import time

import httpx
import pytest

from localchat.app.server.config import MAX_JSON_DEPTH, MAX_QUOTED_CHARS
from localchat.app.server.json_body import nesting_depth
from localchat.engine.sampling_limits import LIMITS, MAX_STOP_STRINGS
from support import Server, make_home, sse_events, stream_api, stream_in_background

pytestmark = pytest.mark.slow  # real `localchat serve` processes: left out of `./dev test --fast`

CHAT = "/v1/chat/completions"
# /health answers within this while a huge body is read and refused: reading and decoding 9 MB takes a small part of
# it even on a loaded 2-core machine; a body tokenized on the event loop would hold it as long as the tokenizer ran
HEALTH_WITHIN_S = 1.0


def chat(**fields):
    return {"messages": [{"role": "user", "content": "Hi"}], "max_tokens": 3, **fields}


def generating(api) -> bool:
    reply = api.post(CHAT, json=chat(temperature=0))
    return reply.status_code == 200 and bool(reply.json()["choices"][0]["message"]["content"])


@pytest.mark.parametrize("fields", [
    {"seed": 2**64}, {"seed": 2**64 - 1, "n": 2}, {"seed": -(2**63) - 1}, {"seed": 2**70},
])
def test_an_out_of_range_seed_is_refused_and_the_engine_keeps_generating(api, server, fields):
    response = api.post(CHAT, json=chat(**fields))
    if fields.get("n") == 2:  # 2**64 - 1 is a valid seed; reply 1 samples with it + 1, modulo 2**64
        assert response.status_code == 200 and len(response.json()["choices"]) == 2
    else:
        assert response.status_code == 400 and "seed must be in" in response.json()["error"]["message"]
    cid = api.post("/api/conversations", json={}).json()["id"]
    through_api = api.post(f"/api/conversations/{cid}/messages", json={"content": "Hi", "settings": fields})
    assert through_api.status_code in (200, 400)
    assert generating(api)
    assert httpx.get(f"{server.url}/health").json()["status"] == "ready"


def test_a_stop_right_after_a_send_ends_the_stream_and_saves_the_reply(api, server):
    cid = api.post("/api/conversations", json={"settings": {"max_tokens": 48, "temperature": 1.0}}).json()["id"]
    rng = random.Random(7)
    for _ in range(16):
        listener, events, _ = stream_in_background(api, f"/api/conversations/{cid}/messages", {"content": "Tell me"})
        time.sleep(rng.uniform(0.0, 0.02))
        assert api.post(f"/api/conversations/{cid}/stop", json={}).status_code == 200
        listener.join(timeout=60)
        assert not listener.is_alive(), f"the stream hung after {[e['type'] for e in events]}"
        (done,) = [e["message"] for e in events if e["type"] == "done"]
        assert done["finish_reason"] in ("stop", "length", "abort")
    saved = [m for m in api.get(f"/api/conversations/{cid}").json()["messages"] if m["role"] == "assistant"]
    assert len(saved) == 16 and all(m["finish_reason"] for m in saved)
    assert server.wait_idle()["localchat_kv_blocks_used"] == 0


@pytest.mark.parametrize("method, path", [
    ("GET", "/api/search?q=%00"), ("GET", "/static/%00"), ("GET", "/static/index.html/x"), ("GET", "/static/."),
    ("POST", "/api/conversations"), ("PATCH", "/api/conversations/{cid}"),
    ("POST", "/api/conversations/{cid}/messages"),
    ("POST", "/api/conversations/{cid}/messages/{mid}/edit"),
    ("POST", "/api/conversations/{cid}/messages/{mid}/regenerate"),
])
def test_bad_paths_and_non_object_settings_get_a_4xx_without_internals(api, method, path):
    cid = api.post("/api/conversations", json={}).json()["id"]
    mid = stream_api(api, f"/api/conversations/{cid}/messages",
                     {"content": "Hi", "settings": {"max_tokens": 1}})[0]["message"]["id"]
    body = {"content": "x", "settings": "not an object"} if method != "GET" else None
    response = api.request(method, path.format(cid=cid, mid=mid), json=body)
    assert 400 <= response.status_code < 500, response.text
    assert "/" not in response.json()["error"]["message"].replace(path.format(cid=cid, mid=mid), "")


def test_a_delete_during_a_reply_stops_it_and_ends_the_stream_cleanly(api, server):
    cid = api.post("/api/conversations", json={}).json()["id"]
    listener, events, writing = stream_in_background(api, f"/api/conversations/{cid}/messages", {
        "content": "Tell me a long story.",
        "settings": {"max_tokens": 2000, "ignore_eos": True, "temperature": 1.0}})  # still writing at the delete
    assert writing.wait(60)
    assert api.delete(f"/api/conversations/{cid}").status_code == 204
    listener.join(timeout=30)
    assert not listener.is_alive()
    kinds = [e["type"] for e in events]
    assert "error" not in kinds and kinds[-1] == "done" and events[-1]["message"]["stopped"]
    assert api.get(f"/api/conversations/{cid}").status_code == 404
    assert server.wait_idle()["localchat_kv_blocks_used"] == 0
    assert "IntegrityError" not in server.log.read_text() and "Traceback" not in server.log.read_text()


def test_a_send_that_races_a_delete_is_a_404_never_a_500(api, server):
    """The soak found a reply stored into a conversation deleted at that moment: a foreign-key error, a 500."""
    statuses = []
    for _ in range(12):
        cid = api.post("/api/conversations", json={}).json()["id"]
        sender = threading.Thread(target=lambda cid=cid: statuses.append(api.post(
            f"/api/conversations/{cid}/messages", json={"content": "Hi", "settings": {"max_tokens": 2}}).status_code))
        sender.start()
        api.delete(f"/api/conversations/{cid}")
        sender.join(timeout=60)
    assert set(statuses) <= {200, 404}, statuses
    assert server.wait_idle()["localchat_kv_blocks_used"] == 0
    assert "IntegrityError" not in server.log.read_text()


def health_latency_while(server, request) -> tuple[httpx.Response, float]:
    """Send `request` (a function) on a thread and time /health meanwhile; (its response, the slowest /health)."""
    result = {}
    worker = threading.Thread(target=lambda: result.setdefault("response", request()))
    worker.start()
    slowest = 0.0
    while worker.is_alive():
        started = time.monotonic()
        assert httpx.get(f"{server.url}/health", timeout=30).status_code == 200
        slowest = max(slowest, time.monotonic() - started)
        time.sleep(0.05)
    worker.join()
    return result["response"], slowest


def test_a_huge_prompt_is_refused_early_and_the_server_stays_responsive(api, server):
    cid = api.post("/api/conversations", json={}).json()["id"]
    big = "word " * 1_800_000  # 9 MB: over the request size limit
    response, slowest = health_latency_while(server, lambda: api.post(CHAT, json=chat(
        messages=[{"role": "user", "content": big}])))
    assert response.status_code == 413 and slowest < HEALTH_WITHIN_S
    long = "word " * 700_000  # 3.5 MB: within the size limit, but it cannot fit max_model_len tokens
    for send in (lambda: api.post(CHAT, json=chat(messages=[{"role": "user", "content": long}])),
                 lambda: api.post(f"/api/conversations/{cid}/messages", json={"content": long}),
                 lambda: api.post("/v1/completions", json={"prompt": long})):
        response, slowest = health_latency_while(server, send)
        # refused by its size in characters, before the tokenizer sees it
        assert response.status_code == 400 and "characters" in response.json()["error"]["message"]
        assert slowest < HEALTH_WITHIN_S
    many = api.post("/v1/completions", json={"prompt": ["Hi"] * 2000, "max_tokens": 1})
    assert many.status_code == 400 and "at most 32 prompts" in many.json()["error"]["message"]
    assert generating(api)


@pytest.mark.parametrize("settings, message", [
    ({"temperature": -1}, "temperature must be at least 0.0"),
    ({"temperature": 1e-320}, "temperature must be 0 (greedy) or at least 0.01"),
    ({"top_p": 1e-320}, "top_p must be at least 0.001"),
    ({"max_tokens": 0}, "max_tokens must be at least 1"),
    ({"temperature": 9}, "temperature must be at most 2.0"),
    ({"seed": 2**64}, "seed must be in"),
])
def test_settings_that_cannot_work_are_refused_where_they_are_set(api, settings, message):
    created = api.post("/api/conversations", json={"settings": settings})
    assert created.status_code == 400 and message in created.json()["error"]["message"]
    cid = api.post("/api/conversations", json={}).json()["id"]
    patched = api.patch(f"/api/conversations/{cid}", json={"settings": settings})
    assert patched.status_code == 400 and message in patched.json()["error"]["message"]
    sent = api.post(f"/api/conversations/{cid}/messages", json={"content": "Hi", "settings": settings})
    assert sent.status_code == 400 and message in sent.json()["error"]["message"]
    conversation = api.get(f"/api/conversations/{cid}").json()
    defaults = api.get("/api/conversation-defaults").json()["settings"]
    assert conversation["conversation"]["settings"] == defaults and conversation["messages"] == []


@pytest.mark.parametrize("field, value", [
    ("logit_bias", {"1": 5}), ("functions", []), ("function_call", "auto"), ("audio", {}), ("modalities", ["text"]),
    ("prediction", {}), ("web_search_options", {}),
])
def test_unsupported_parameters_are_refused_by_name(api, field, value):
    response = api.post(CHAT, json=chat(**{field: value}))
    assert response.status_code == 400
    assert f"`{field}` is not supported" in response.json()["error"]["message"]


def test_the_openapi_schema_is_served_behind_the_token(api, server):
    assert httpx.get(f"{server.url}/api/openapi/openapi.json").status_code == 401
    schema = api.get("/api/openapi/openapi.json").json()
    assert {"/v1/chat/completions", "/api/conversations", "/api/conversations/{conversation_id}/messages"} <= set(
        schema["paths"])
    body = schema["paths"]["/v1/chat/completions"]["post"]["requestBody"]["content"]["application/json"]["schema"]
    assert body["$ref"].endswith("ChatCompletionRequest")


def test_a_host_with_a_loopback_prefix_is_refused_and_405_names_the_allowed_methods(server):
    refused = httpx.get(f"{server.url}/health", headers={"Host": "[::1].evil.example"})
    assert refused.status_code == 403
    not_allowed = httpx.delete(f"{server.url}/health")
    assert not_allowed.status_code == 405 and "GET" in not_allowed.headers["allow"]


def saved_content(db, message_id: str) -> str:
    """A reply's text as the server's store holds it now (read-only, beside the writing server)."""
    with contextlib.closing(sqlite3.connect(f"file:{db}?mode=ro", uri=True, timeout=30)) as store:
        return store.execute("SELECT content FROM messages WHERE id = ?", (message_id,)).fetchone()[0]


def test_a_reply_survives_a_sigkill_as_far_as_it_was_saved(tmp_path):
    """Killed once the store holds the reply's text from two saves (it saves every SAVE_INTERVAL_S), whatever
    the machine's speed: ignore_eos keeps the reply going until then (max_tokens is far beyond two seconds of
    tokens on any CPU)."""
    server = Server(make_home(tmp_path / "home"), args=["--kv-blocks", "256"]).start()
    try:
        with server.client() as api:
            cid = api.post("/api/conversations", json={}).json()["id"]
            with api.stream("POST", f"/api/conversations/{cid}/messages", json={
                    "content": "Tell me a long story.",
                    "settings": {"max_tokens": 3000, "ignore_eos": True, "temperature": 1.0, "seed": 1}}) as r:
                text, saves = "", [""]
                for event, data in sse_events(r):
                    assert event in ("user", "start", "delta"), (event, data)  # the reply goes on until the kill
                    if event != "delta":
                        reply_id = json.loads(data)["message_ids"][0] if event == "start" else None
                        continue
                    text += json.loads(data)["text"]
                    if (saved := saved_content(server.db, reply_id)) != saves[-1]:
                        saves.append(saved)
                    if len(saves) > 2:  # two saves of the text so far
                        server.kill(signal.SIGKILL)
                        break
        server.start()
        with server.client() as api:
            tree = api.get(f"/api/conversations/{cid}").json()
            (reply,) = [m for m in tree["messages"] if m["role"] == "assistant"]
            assert reply["id"] == reply_id == tree["conversation"]["active_leaf"]
            assert reply["finish_reason"] == "interrupted" and reply["stopped"]
            assert reply["content"].startswith(saves[-1]) and text.startswith(reply["content"])
            # the branch goes on from the interrupted reply: its token ids are rendered again
            events = stream_api(api, f"/api/conversations/{cid}/messages",
                                {"content": "Go on.", "parent_id": reply_id, "settings": {"max_tokens": 4}})
            assert events[-1]["type"] == "done" and events[-1]["message"]["stats"]["prompt_tokens"] > 20
    finally:
        server.stop()


@pytest.fixture(scope="module")
def small_server_under_umask_022(tmp_path_factory):
    """A `localchat serve --kv-blocks 32` of this module's own, started under a 022 umask in a home that an install
    from before left readable by others (a 0755 data folder, a 0644 database): the chat files' modes are read from
    it, and its memory is measured (a small cache, touched within the warm-up). One start for the two."""
    home = tmp_path_factory.mktemp("umask-home") / "home"
    old_install = home / "data"
    old_install.mkdir(parents=True, mode=0o755)
    (old_install / "localchat.db").touch(mode=0o644)  # an install from before: fixed on start
    os.chmod(old_install / "localchat.db", 0o644)
    server = Server(make_home(home), args=["--kv-blocks", "32"])
    with open(server.log, "ab") as log:
        server.process = subprocess.Popen(server.command("serve", "--port", str(server.port), *server.args),
                                          env=server.env, stdout=log, stderr=subprocess.STDOUT,
                                          preexec_fn=lambda: os.umask(0o022))
    try:
        yield server.wait_ready()
    finally:
        server.stop()


def test_chat_files_and_folders_are_private_under_a_022_umask(small_server_under_umask_022):
    server = small_server_under_umask_022
    home = server.home
    with server.client() as api:
        stream_api(api, f"/api/conversations/{api.post('/api/conversations', json={}).json()['id']}/messages",
                   {"content": "Hi", "settings": {"max_tokens": 1}})
    for folder in ("data", "config", "runtime", "cache"):
        assert stat.S_IMODE((home / folder).stat().st_mode) == 0o700, folder
    for name in ("localchat.db", "localchat.db-wal", "localchat.db-shm"):
        assert stat.S_IMODE((home / "data" / name).stat().st_mode) == 0o600, name
    for path in (home / "config" / "token", home / "runtime" / "engine.json"):
        assert stat.S_IMODE(path.stat().st_mode) == 0o600, path


def test_memory_stays_flat_once_the_kv_cache_has_been_used(small_server_under_umask_022):
    """RSS grew in a straight line in the probe: that was the KV cache's pages being used for the first time
    (it is allocated lazily and is bounded by its size). With a small cache, touched within the warm-up, the
    server's memory must stay flat over many requests of every kind."""
    server = small_server_under_umask_022
    rng = random.Random(1)

    def requests(api, count):
        for i in range(count):
            if i % 3 == 0:
                api.post(CHAT, json=chat(messages=[{"role": "user", "content": "Hi " * rng.randint(1, 100)}],
                                         n=rng.choice([1, 2])))
            elif i % 3 == 1:
                cid = api.post("/api/conversations", json={}).json()["id"]
                stream_api(api, f"/api/conversations/{cid}/messages",
                           {"content": "Hello " * rng.randint(1, 50), "settings": {"max_tokens": 4}})
                api.delete(f"/api/conversations/{cid}")
            else:
                api.post("/v1/completions", json={"prompt": "x " * rng.randint(1, 100), "max_tokens": 4})

    with server.client() as api:
        # measured (RSS after every 6 requests, 150 in all): +17 MB over the first 24 requests, the cache and the
        # allocators settling, then +2 MB over the next 126; 36 of warm-up (each kind 12 times), a margin past that
        requests(api, 36)
        before = rss_mb(server.process.pid)
        requests(api, 60)
        after = rss_mb(server.process.pid)
    assert after - before < 8, f"RSS {before:.1f} -> {after:.1f} MB over 60 requests"


def rss_mb(pid: int) -> float:
    for line in open(f"/proc/{pid}/status"):
        if line.startswith("VmRSS:"):
            return int(line.split()[1]) / 1024
    raise RuntimeError("no VmRSS")


JSON_BODIES = [  # every endpoint that takes a JSON body
    ("POST", "/api/conversations"), ("PATCH", "/api/conversations/{cid}"),
    ("POST", "/api/conversations/{cid}/messages"), ("POST", "/api/conversations/{cid}/messages/{mid}/edit"),
    ("POST", "/api/conversations/{cid}/messages/{mid}/regenerate"), ("POST", "/api/conversations/{cid}/stop"),
    ("POST", "/api/models/current"), ("POST", CHAT), ("POST", "/v1/completions"),
]


def conversation_with_a_message(api) -> tuple[str, str]:
    """A new conversation (replies of one token) and the id of its user message, once the model has named it (its
    title is written in the background after the first reply: a check that nothing changed must not race it)."""
    cid = api.post("/api/conversations", json={"settings": {"max_tokens": 1}}).json()["id"]
    mid = stream_api(api, f"/api/conversations/{cid}/messages", {"content": "Hi"})[0]["message"]["id"]
    assert api.post(f"/api/conversations/{cid}/title").status_code == 200
    return cid, mid


@pytest.mark.parametrize("depth", [900, 1000, 100_000])
def test_a_body_nested_too_deep_is_refused_before_it_is_decoded(api, server, depth):
    cid, mid = conversation_with_a_message(api)
    body = b'{"settings": ' + b"[" * depth + b"]" * depth + b"}"
    for method, path in JSON_BODIES:
        response = api.request(method, path.format(cid=cid, mid=mid), content=body,
                               headers={"Content-Type": "application/json"})
        assert response.status_code == 400, (path, response.text)
        assert response.json()["error"]["message"] == f"the JSON body is nested deeper than {MAX_JSON_DEPTH} levels"
    assert "RecursionError" not in server.log.read_text()
    assert generating(api)


def test_a_body_nested_as_deep_as_the_limit_is_taken(api):
    parameters = {"type": "string"}
    for _ in range((MAX_JSON_DEPTH - 6) // 2):  # 6 levels from the body down to a tool's parameters, 2 per property
        parameters = {"type": "object", "properties": {"inner": parameters}}
    body = {"settings": {"tools": [{"type": "function", "function": {"name": "deep", "parameters": parameters}}]}}
    assert nesting_depth(json.dumps(body).encode()) == MAX_JSON_DEPTH
    assert api.post("/api/conversations", json=body).status_code == 201


@pytest.mark.parametrize("method, path, body, field", [
    ("POST", "/api/conversations", {"settings": {"temprature": 0.5}}, "settings: `temprature`"),
    ("POST", "/api/conversations", {"titel": "Notes"}, "`titel`"),
    ("PATCH", "/api/conversations/{cid}", {"title": "Notes", "pinned": True}, "`pinned`"),
    ("POST", "/api/conversations/{cid}/messages", {"content": "Hi", "parent": None}, "`parent`"),
    ("POST", "/api/conversations/{cid}/messages/{mid}/edit", {"content": "Hi", "settings": {"top-p": 0.5}},
     "settings: `top-p`"),
    ("POST", "/api/conversations/{cid}/messages/{mid}/regenerate", {"count": 2}, "`count`"),
    ("POST", "/api/conversations/{cid}/stop", {"message": "m_1"}, "`message`"),
    ("POST", "/api/models/current", {"model": "SmolLM2-135M-Instruct", "force": True}, "`force`"),
])
def test_an_unknown_field_is_refused_by_name(api, method, path, body, field):
    cid, mid = conversation_with_a_message(api)
    conversations, before = api.get("/api/conversations").json(), api.get(f"/api/conversations/{cid}").json()
    response = api.request(method, path.format(cid=cid, mid=mid), json=body)
    assert response.status_code == 400 and response.json()["error"]["message"] == f"{field} is not supported"
    assert api.get("/api/conversations").json() == conversations
    assert api.get(f"/api/conversations/{cid}").json() == before


@pytest.mark.parametrize("method, path, body, message", [
    ("POST", "/api/conversations/{cid}/messages", {"content": "\x00\x00"}, "content must not contain NUL characters"),
    ("POST", "/api/conversations/{cid}/messages/{mid}/edit", {"content": "\x00"},
     "content must have text (and no NUL characters)"),
    ("POST", "/api/conversations", {"title": "\x00"}, "title must not contain NUL characters"),
    ("PATCH", "/api/conversations/{cid}", {"title": "\x00"}, "title must have text (and no NUL characters)"),
    ("PATCH", "/api/conversations/{cid}", {"system_prompt": "Be\x00brief."},
     "system_prompt must not contain NUL characters"),
])
def test_nul_characters_in_a_text_are_refused(api, method, path, body, message):
    cid, mid = conversation_with_a_message(api)
    conversations, before = api.get("/api/conversations").json(), api.get(f"/api/conversations/{cid}").json()
    response = api.request(method, path.format(cid=cid, mid=mid), json=body)
    assert response.status_code == 400 and response.json()["error"]["message"] == message
    assert api.get("/api/conversations").json() == conversations
    assert api.get(f"/api/conversations/{cid}").json() == before


@pytest.mark.parametrize("path, body", [
    ("/api/conversations", b'{"title": "\\ud800"}'),
    ("/api/conversations/{cid}/messages", b'{"content": "Hi \\udc00 there"}'),
    (CHAT, b'{"messages": [{"role": "user", "content": "\\ud800"}], "max_tokens": 1}'),
])
def test_a_lone_surrogate_is_refused_as_not_unicode(api, path, body):
    cid, _ = conversation_with_a_message(api)
    response = api.post(path.format(cid=cid), content=body, headers={"Content-Type": "application/json"})
    assert response.status_code == 400
    assert response.json()["error"]["message"].startswith("the JSON body is not valid Unicode")
    paired = api.post("/api/conversations", content=b'{"title": "\\ud83d\\ude00"}',
                      headers={"Content-Type": "application/json"})
    assert paired.status_code == 201 and paired.json()["title"] == "\U0001f600"


def test_a_long_name_is_quoted_cut_in_an_error_message(api):
    cid, _ = conversation_with_a_message(api)
    name = "x" * 3_000_000
    for path, body in [("/api/models/current", {"model": name}), (CHAT, chat(model=name)),
                       (f"/api/conversations/{cid}/messages", {"content": "Hi", "parent_id": name})]:
        response = api.post(path, json=body)
        message = response.json()["error"]["message"]
        assert response.status_code == 404 and f"'{'x' * MAX_QUOTED_CHARS}…'" in message and len(message) < 300


def test_the_markdown_export_names_its_charset_once(api):
    cid, _ = conversation_with_a_message(api)
    response = api.get(f"/api/conversations/{cid}/export")
    assert response.status_code == 200 and response.headers["content-type"] == "text/markdown; charset=utf-8"


def test_options_names_every_method_of_a_path(api):
    cid, _ = conversation_with_a_message(api)
    assert api.options("/api/conversations").headers["allow"] == "GET, OPTIONS, POST"
    assert api.options(f"/api/conversations/{cid}").headers["allow"] == "DELETE, GET, OPTIONS, PATCH"


def test_the_openapi_schema_states_the_limits_the_server_enforces(api):
    components = api.get("/api/openapi/openapi.json").json()["components"]["schemas"]
    for name in ("ConversationCreate", "ConversationUpdate", "SamplingSettings", "SendMessage", "EditMessage",
                 "Regenerate", "StopRequest", "ModelChoice", "ChatCompletionRequest", "CompletionRequest"):
        assert components[name]["additionalProperties"] is False, name
    settings = components["SamplingSettings"]["properties"]
    assert (settings["temperature"]["minimum"], settings["temperature"]["maximum"]) == LIMITS["temperature"]
    assert (settings["seed"]["anyOf"][0]["minimum"], settings["seed"]["anyOf"][0]["maximum"]) == LIMITS["seed"]
    assert settings["stop"]["maxItems"] == MAX_STOP_STRINGS
    n = components["SendMessage"]["properties"]["n"]
    assert (n["minimum"], n["maximum"]) == LIMITS["n"]
    assert components["SendMessage"]["properties"]["content"]["pattern"] == r"^[^\x00]*$"
