"""A reply that did not end its turn goes on (continue), and a reply edited by the user is a branch to go on from, on
a real `localchat serve` (issue 56): the continuation's prompt is the branch and the reply's own tokens without an end
of turn, so the prefix cache serves them and only the new tokens are computed; an edited reply's branch reuses the
cached prefix up to the edit."""

import pytest

from support import stream_api, stream_in_background

pytestmark = pytest.mark.slow  # a real `localchat serve`: left out of `./dev test --fast`

GREEDY = {"temperature": 0.0}
STORY = "Tell me a story about a fox."
HEADER = 4  # SmolLM2's generation prompt <|im_start|>assistant\n
BLOCK = 16  # tokens in a KV block: the prefix cache holds whole blocks, and a kept partial one


def chat(api, max_tokens: int) -> str:
    response = api.post("/api/conversations", json={"settings": {**GREEDY, "max_tokens": max_tokens}})
    assert response.status_code == 201
    return response.json()["id"]


def done(events: list[dict]) -> dict:
    (message,) = [e["message"] for e in events if e["type"] == "done"]
    return message


def send(api, cid: str, content: str, parent_id: str | None = None) -> dict:
    return done(stream_api(api, f"/api/conversations/{cid}/messages", {"content": content, "parent_id": parent_id}))


def continue_reply(api, cid: str, message_id: str, **body) -> list[dict]:
    return stream_api(api, f"/api/conversations/{cid}/messages/{message_id}/continue", body)


def test_a_reply_cut_at_max_tokens_goes_on_in_place_and_its_tokens_come_from_the_cache(api):
    cid = chat(api, max_tokens=20)
    cut = send(api, cid, STORY)
    assert cut["finish_reason"] == "length" and cut["stats"]["completion_tokens"] == 20

    events = continue_reply(api, cid, cut["id"])
    start = events[0]
    assert start["type"] == "start" and start["continued"] and start["message_ids"] == [cut["id"]]
    continued = done(events)
    new_text = "".join(e["text"] for e in events if e["type"] == "delta")
    assert continued["id"] == cut["id"] and continued["content"] == cut["content"] + new_text and new_text
    stats = continued["stats"]
    # the prompt is the reply's prompt and its 20 tokens (no end of turn between): all of it from the cache but the
    # last token, whose KV the reply never computed; only the new tokens are generated
    assert stats["prompt_tokens"] == cut["stats"]["prompt_tokens"] + 20
    assert stats["cached_tokens"] == stats["prompt_tokens"] - 1
    assert stats["completion_tokens"] == 20
    tree = api.get(f"/api/conversations/{cid}", params={"token_ids": "true"}).json()
    assert [m["id"] for m in tree["messages"]] == [cut["parent_id"], cut["id"]]  # no new message
    (stored,) = [m for m in tree["messages"] if m["id"] == cut["id"]]
    assert stored["content"] == continued["content"] and stored["finish_reason"] == "length"
    assert len(stored["token_ids"]) == HEADER + 40 + 2  # header, 20 + 20 generated, <|im_end|>\n

    # the same as the reply written at once (greedy: the prompt is token for token the one it would have had)
    whole = send(api, chat(api, max_tokens=40), STORY)
    assert whole["content"] == continued["content"]


def test_a_stopped_reply_continues_and_a_finished_one_or_a_message_is_refused(api):
    cid = api.post("/api/conversations", json={"settings": {"max_tokens": 2000, "ignore_eos": True}}).json()["id"]
    listener, events, writing = stream_in_background(api, f"/api/conversations/{cid}/messages",
                                                     {"content": "Tell me a long story."})
    assert writing.wait(60)
    assert api.post(f"/api/conversations/{cid}/stop", json={}).status_code == 200
    listener.join(timeout=60)
    stopped = done(events)
    assert stopped["finish_reason"] == "abort" and stopped["stopped"]
    continued = done(continue_reply(api, cid, stopped["id"], settings={"max_tokens": 6}))
    assert continued["content"].startswith(stopped["content"]) and not continued.get("stopped")
    assert continued["stats"]["completion_tokens"] == 6
    assert continued["stats"]["cached_tokens"] == continued["stats"]["prompt_tokens"] - 1

    finished = send(api, chat(api, max_tokens=64), "Say hi.")
    assert finished["finish_reason"] == "stop"
    for message_id in (finished["id"], finished["parent_id"]):
        conversation = finished["conversation_id"]
        response = api.post(f"/api/conversations/{conversation}/messages/{message_id}/continue", json={})
        assert response.status_code == 400
        assert "only those can be continued" in response.json()["error"]["message"]
    response = api.post(f"/api/conversations/{cid}/messages/m_nope/continue", json={})
    assert response.status_code == 404


def test_an_edited_reply_is_a_branch_whose_next_reply_reuses_the_prefix_up_to_the_edit(api):
    cid = chat(api, max_tokens=40)
    original = send(api, cid, STORY)
    words = original["content"].split(" ")
    edited_text = " ".join(words[: len(words) // 2]) + " and then the fox went home."

    events = stream_api(api, f"/api/conversations/{cid}/messages/{original['id']}/edit", {"content": edited_text})
    assert [e["type"] for e in events] == ["edited"]  # nothing is generated
    edited = events[0]["message"]
    assert edited["parent_id"] == original["parent_id"] and edited["id"] != original["id"]
    assert (edited["role"], edited["content"], edited["finish_reason"]) == ("assistant", edited_text, "edited")
    tree = api.get(f"/api/conversations/{cid}", params={"token_ids": "true"}).json()
    assert tree["conversation"]["active_leaf"] == edited["id"]
    by_id = {m["id"]: m for m in tree["messages"]}
    assert by_id[original["id"]]["content"] == original["content"]  # the original stays, a sibling

    following = send(api, cid, "What happened next?", parent_id=edited["id"])
    old, new = by_id[original["id"]]["token_ids"], by_id[edited["id"]]["token_ids"]
    same = next(i for i, (a, b) in enumerate(zip(old, new)) if a != b)
    up_to_the_edit = original["stats"]["prompt_tokens"] - HEADER + same  # the reply's prompt, its unchanged tokens
    assert same > BLOCK and up_to_the_edit // BLOCK * BLOCK <= following["stats"]["cached_tokens"] <= up_to_the_edit

    # an edited reply can be continued: the model goes on from the user's text
    grown = done(continue_reply(api, cid, edited["id"], settings={"max_tokens": 8}))
    assert grown["content"].startswith(edited_text) and grown["stats"]["completion_tokens"] > 0
    assert grown["stats"]["cached_tokens"] >= up_to_the_edit // BLOCK * BLOCK
