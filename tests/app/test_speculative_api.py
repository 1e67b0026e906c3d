"""Speculative decoding through a real `localchat serve`: the shared server (speculation on, the default) and one
started with `--speculative off` give the same replies through the conversations API (n=4 forks, regenerate,
edit-and-resend) and /v1 (a JSON Schema); a regenerated reply drafts from the replies it replaces; the counts
show in its stats and in /metrics."""

import pytest

from support import running_server, stream_api

pytestmark = pytest.mark.slow  # real `localchat serve` processes: left out of `./dev test --fast`

PARAGRAPH = ("The lighthouse keeper climbed the stairs every evening at dusk. He wound the clockwork, trimmed the "
             "wick and polished the great lens until it shone, then sat by the window and watched the ships.")
SAMPLED = {"max_tokens": 64, "temperature": 0.8, "seed": 7}


@pytest.fixture(scope="module")
def plain(tmp_path_factory):
    with running_server(tmp_path_factory.mktemp("plain-home"), kv_blocks=768, args=["--speculative", "off"]) as s:
        with s.client() as client:
            yield client


def done(events: list[dict]) -> list[dict]:
    """The replies in the order asked for (reply k samples with seed + k), not the order they ended in."""
    (start,) = [e for e in events if e["type"] == "start"]
    by_id = {e["message"]["id"]: e["message"] for e in events if e["type"] == "done"}
    return [by_id[message_id] for message_id in start["message_ids"]]


def conversation_run(api) -> list[list[dict]]:
    """Four replies to a copying prompt, two regenerated of the first, then the prompt edited and resent."""
    cid = api.post("/api/conversations", json={"settings": SAMPLED}).json()["id"]
    asked = f"Repeat this paragraph word for word:\n\n{PARAGRAPH}"
    events = stream_api(api, f"/api/conversations/{cid}/messages", {"content": asked, "n": 4, "settings": SAMPLED})
    first = done(events)
    regenerated = done(stream_api(api, f"/api/conversations/{cid}/messages/{first[0]['id']}/regenerate",
                                  {"n": 2, "settings": {**SAMPLED, "seed": 9}}))
    edited = done(stream_api(api, f"/api/conversations/{cid}/messages",
                             {"content": asked.replace("dusk", "dawn"), "parent_id": None,
                              "settings": {**SAMPLED, "seed": 11}}))
    return [first, regenerated, edited]


def metric(api, name: str) -> float:
    for line in api.get("/metrics").text.splitlines():
        if line.startswith(f"localchat_{name} "):
            return float(line.split()[1])
    raise AssertionError(f"no {name} in /metrics")


def test_replies_are_the_same_with_speculation_on_and_off(api, plain) -> None:
    drafted_before = metric(api, "draft_tokens_total")
    on, off = conversation_run(api), conversation_run(plain)
    assert [[m["content"] for m in step] for step in on] == [[m["content"] for m in step] for step in off]
    assert [len(step) for step in on] == [4, 2, 1]
    regenerated = on[1]
    assert all(m["stats"]["accepted_draft_tokens"] > 0 for m in regenerated), [m["stats"] for m in regenerated]
    assert all(0 <= m["stats"]["accepted_draft_tokens"] <= m["stats"]["draft_tokens"] for step in on for m in step)
    assert all(m["stats"]["draft_tokens"] == 0 for step in off for m in step)
    assert metric(api, "draft_tokens_total") > drafted_before
    assert metric(api, "accepted_draft_tokens_total") > 0
    assert metric(plain, "draft_tokens_total") == 0


def test_a_json_schema_reply_is_the_same_with_speculation_on_and_off(api, plain) -> None:
    schema = {"type": "object", "properties": {"items": {"type": "array", "items": {"type": "string"}}},
              "required": ["items"]}
    body = {"messages": [{"role": "user", "content": 'Return {"items": ["apple", "pear", "plum", "apple", "pear"]}'}],
            "max_tokens": 60, "temperature": 0.8, "seed": 3,
            "response_format": {"type": "json_schema", "json_schema": {"name": "list", "schema": schema}}}
    replies = [client.post("/v1/chat/completions", json=body).json()["choices"][0]["message"]["content"]
               for client in (api, plain)]
    assert replies[0] == replies[1] and replies[0].replace(" ", "").startswith('{"items":[')
