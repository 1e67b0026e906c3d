"""A chat that outgrows the model's context, on a real engine with a small max_model_len: the context each branch
uses, each policy past the edge with its cut reported, the turns after a cut served from the cache again, and stop's
refusal with the numbers."""

import json

import pytest

from support import SMALL_CONTEXT as LIMIT  # the engine's max_model_len: a few turns fit, then the prompt is cut
from support import sse_events, stream_api

pytestmark = pytest.mark.slow  # real `localchat serve` processes: left out of `./dev test --fast`

SYSTEM = "You answer in one short sentence."
QUESTION = ("Here is a long question about the history of the river and the old mill by the bridge, the town "
            "around it and the families who lived there for a hundred years: what happened in year {n}?")


@pytest.fixture(scope="module")
def api(small_context_server):
    with small_context_server.client() as client:
        yield client


def chat(api, policy: str, turns: int) -> tuple[str, list[dict]]:
    """A conversation of `turns` turns under `policy`: its id and each turn's reply."""
    conversation = api.post("/api/conversations", json={"system_prompt": SYSTEM, "settings": {
        "temperature": 0.0, "max_tokens": 32, "context_overflow": policy}}).json()["id"]
    parent, replies = None, []
    for n in range(turns):
        events = stream_api(api, f"/api/conversations/{conversation}/messages",
                            {"content": QUESTION.format(n=1900 + n), "parent_id": parent})
        reply = next(e["message"] for e in events if e["type"] == "done")
        replies.append(reply)
        parent = reply["id"]
    return conversation, replies


@pytest.mark.parametrize("policy", ["truncate_middle", "rolling_window"])
def test_a_policy_cuts_past_the_edge_reports_it_and_the_next_turns_hit_the_cache(api, policy):
    conversation, replies = chat(api, policy, 9)
    stats = [r["stats"] for r in replies]
    first_cut = next(k for k, s in enumerate(stats) if s["dropped_messages"])
    assert first_cut >= 2  # the first turns fit whole
    for s in stats:
        assert s["context_limit"] == LIMIT and s["context_tokens"] == s["prompt_tokens"] + s["completion_tokens"]
        assert s["prompt_tokens"] + 32 <= LIMIT  # every reply had room
    cut = stats[first_cut]
    assert cut["dropped_messages"] % 2 == 0 and cut["dropped_tokens"] > 0 and cut["first_kept_id"]
    assert cut["prompt_tokens"] <= LIMIT // 2  # down to half the context: room for several turns
    tree = api.get(f"/api/conversations/{conversation}").json()
    by_id = {m["id"]: m for m in tree["messages"]}
    assert by_id[cut["first_kept_id"]]["role"] == "user"
    if policy == "truncate_middle":  # the first exchange stays: the cut starts after it
        first_reply = replies[0]["id"]
        assert cut["first_kept_id"] not in (by_id[first_reply]["parent_id"], first_reply)
    # the turn after a cut keeps it (its prompt extends the last one) and finds that prompt in the cache
    after = stats[first_cut + 1]
    if not after["dropped_messages"] or after["first_kept_id"] == cut["first_kept_id"]:
        assert after["cached_tokens"] >= (cut["prompt_tokens"] + cut["completion_tokens"]) // 16 * 16 - 16
    cached = [(s["prompt_tokens"], s["cached_tokens"], s["dropped_messages"]) for s in stats]
    print(f"{policy}: (prompt, cached, dropped messages) per turn: {cached}")
    assert tree["context"] == {"tokens": stats[-1]["context_tokens"], "limit": LIMIT}


def test_stop_refuses_with_the_numbers_and_keeps_nothing(api):
    conversation, replies = chat(api, "stop", 1)
    parent = replies[0]["id"]
    for n in range(12):
        with api.stream("POST", f"/api/conversations/{conversation}/messages",
                        json={"content": QUESTION.format(n=n), "parent_id": parent}) as response:
            if response.status_code != 200:
                response.read()
                break
            events = [json.loads(data) for _, data in sse_events(response)]
        parent = next(e["message"]["id"] for e in events if e["type"] == "done")
    assert response.status_code == 400
    message = response.json()["error"]["message"]
    assert f"context holds {LIMIT}" in message and "needs room for 32 more" in message and "stop" in message
    tree = api.get(f"/api/conversations/{conversation}").json()
    assert tree["messages"][-1]["id"] == parent  # the refused message was not kept


def test_the_context_of_a_chat_without_messages_is_none(api):
    conversation = api.post("/api/conversations", json={"system_prompt": ""}).json()["id"]
    assert api.get(f"/api/conversations/{conversation}").json()["context"] is None
    # a new chat's default system prompt (the embedded model is a small one) is its context before the first message
    with_default = api.post("/api/conversations", json={}).json()["id"]
    assert 0 < api.get(f"/api/conversations/{with_default}").json()["context"]["tokens"] < 32


def test_a_summary_starts_a_new_chat_linked_to_the_old_one(api):
    conversation, _ = chat(api, "stop", 4)  # near the edge; a summary is made anyway (its prompt cut to fit)
    response = api.post(f"/api/conversations/{conversation}/summarize", json={})
    assert response.status_code == 201, response.text
    fresh = response.json()
    assert fresh["summary_of"] == conversation and fresh["title"].startswith("Summary: ")
    system, summary = fresh["system_prompt"].split("\n\n", 1)
    assert system == SYSTEM and summary.startswith("A summary of an earlier conversation") and len(summary) > 80
    assert api.get(f"/api/conversations/{conversation}").json()["summaries"] == [fresh["id"]]
    events = stream_api(api, f"/api/conversations/{fresh['id']}/messages", {"content": "Go on."})
    reply = next(e["message"] for e in events if e["type"] == "done")
    assert reply["content"] and reply["stats"]["dropped_messages"] == 0
    empty = api.post("/api/conversations", json={}).json()["id"]
    assert api.post(f"/api/conversations/{empty}/summarize", json={}).status_code == 400
