"""Conversations through /api on a real `localchat serve`: token-exact turns, branches, regenerate, edit,
stop, export."""

import time

import httpx
import msgspec
import pytest

from localchat.app.chat_defaults import SMALL_MODEL_SYSTEM_PROMPT
from localchat.app.protocol.conversations import SAMPLING_FIELDS, SamplingSettings
from localchat.app.sampling_defaults import LOCALCHAT_DEFAULTS
from localchat.app.server.conversations import MAX_RESAMPLES, WIDEN_TEMPERATURE
from localchat.engine.worker import native_kernels
from support import stream_api, stream_in_background

pytestmark = pytest.mark.slow  # a real `localchat serve`: left out of `./dev test --fast`

# A long system prompt, so that a turn's new tokens are a small share of its prompt.
SYSTEM = " ".join(f"Rule {i}: be kind, be brief, and answer in plain English." for i in range(24))
SHORT = {"max_tokens": 8, "temperature": 0.0}
HEADER = 4  # SmolLM2's generation prompt <|im_start|>assistant\n is 4 tokens


def send(api, conversation_id, content, parent_id=None, n=1, settings=SHORT):
    return stream_api(api, f"/api/conversations/{conversation_id}/messages",
                      {"content": content, "parent_id": parent_id, "n": n, "settings": settings})


def replies(events):
    return [e["message"] for e in events if e["type"] == "done"]


@pytest.fixture
def conversation(api):
    response = api.post("/api/conversations", json={"system_prompt": SYSTEM, "settings": SHORT})
    assert response.status_code == 201
    return response.json()


def test_six_turns_reuse_the_cached_prefix(api, conversation):
    cid, parent, shares = conversation["id"], None, []
    questions = ["Hi, who are you?", "What is a cat?", "And a dog?", "Which is bigger?", "Why?", "Thanks, bye."]
    for turn, question in enumerate(questions, 1):
        events = send(api, cid, question, parent)
        user, start = events[0], events[1]
        assert (user["type"], start["type"]) == ("user", "start")
        assert start["parent_id"] == user["message"]["id"]
        (reply,) = replies(events)
        assert reply["id"] == start["message_ids"][0] and reply["finish_reason"] in ("stop", "length")
        deltas = "".join(e["text"] for e in events if e["type"] == "delta")
        assert deltas == reply["content"] and reply["content"]
        stats = reply["stats"]
        assert 0 < stats["completion_tokens"] <= SHORT["max_tokens"]
        # header + generated ids + the template's closing: "\n" after <|im_end|>, or "<|im_end|>\n"
        closing = 1 if reply["finish_reason"] == "stop" else 2
        assert reply["num_tokens"] == HEADER + stats["completion_tokens"] + closing
        shares.append(stats["cached_tokens"] / stats["prompt_tokens"])
        if turn >= 2:
            assert shares[-1] >= 0.9, shares
        parent = reply["id"]
    print("cached share per turn:", [round(s, 3) for s in shares])

    # the prompt is the branch's stored token ids, token for token
    tree = api.get(f"/api/conversations/{cid}", params={"token_ids": "true"}).json()
    messages = {m["id"]: m for m in tree["messages"]}
    assert len(messages) == 12
    last = messages[parent]
    path, at = [], last
    while at:
        path.insert(0, at)
        at = messages.get(at["parent_id"])
    assert [m["role"] for m in path] == ["user", "assistant"] * 6
    branch_tokens = sum(len(m["token_ids"]) for m in path[:-1])  # everything before the last reply
    assert last["stats"]["prompt_tokens"] == system_tokens(api) + branch_tokens + HEADER
    assert all(m["token_ids"][:HEADER] == path[1]["token_ids"][:HEADER] for m in path[1::2])

    listed = api.get("/api/conversations").json()
    assert listed[0]["id"] == cid and listed[0]["title"] == "Hi, who are you?"
    assert listed[0]["message_count"] == 12


def system_tokens(api) -> int:
    """The system segment's length: a one-turn conversation's prompt minus its user segment and header."""
    cid = api.post("/api/conversations", json={"system_prompt": SYSTEM}).json()["id"]
    events = send(api, cid, "Hi", settings={"max_tokens": 1})
    user_tokens = events[0]["message"]["num_tokens"]
    prompt = replies(events)[0]["stats"]["prompt_tokens"]
    api.delete(f"/api/conversations/{cid}")
    return prompt - user_tokens - HEADER


def test_n_branches_regenerate_edit(api, conversation):
    cid = conversation["id"]
    events = send(api, cid, "Give me a name for a cat.", n=2, settings={"max_tokens": 8, "temperature": 1.0,
                                                                        "seed": 5})
    user = events[0]["message"]
    start = events[1]
    assert len(start["message_ids"]) == 2
    # every delta names its branch; each branch ends with its own done event
    for event in events:
        if event["type"] == "delta":
            assert event["message_id"] == start["message_ids"][event["index"]]
    first, second = replies(events)
    assert {first["id"], second["id"]} == set(start["message_ids"])
    assert first["parent_id"] == second["parent_id"] == user["id"]
    by_branch = {}
    for event in events:
        if event["type"] == "delta":
            by_branch[event["message_id"]] = by_branch.get(event["message_id"], "") + event["text"]
    assert by_branch == {first["id"]: first["content"], second["id"]: second["content"]}

    # continue the second branch: its prompt holds that branch's tokens, found in the cache
    follow = replies(send(api, cid, "Another one?", parent_id=second["id"]))[0]
    assert follow["stats"]["cached_tokens"] / follow["stats"]["prompt_tokens"] >= 0.9

    # regenerate: n more siblings of a reply
    regenerating = stream_api(api, f"/api/conversations/{cid}/messages/{first['id']}/regenerate",
                              {"n": 2, "settings": {"max_tokens": 6, "temperature": 1.0, "seed": 9}})
    regenerated = replies(regenerating)
    assert len(regenerated) == 2 and all(m["parent_id"] == user["id"] for m in regenerated)
    assert all(m["stats"]["cached_tokens"] > 0 for m in regenerated)  # the same prompt as the first replies

    # edit: a new user message beside the original, then its reply
    edited = stream_api(api, f"/api/conversations/{cid}/messages/{user['id']}/edit", {"content": "Name a dog."})
    new_user = edited[0]["message"]
    assert new_user["parent_id"] == user["parent_id"] and new_user["content"] == "Name a dog."
    assert replies(edited)[0]["parent_id"] == new_user["id"]

    tree = api.get(f"/api/conversations/{cid}").json()["messages"]
    children = {}
    for message in tree:
        children.setdefault(message["parent_id"], []).append(message["id"])
    assert children[None] == [user["id"], new_user["id"]]  # two user branches at the root
    assert len(children[user["id"]]) == 4  # 2 replies + 2 regenerated
    # siblings in the order they were asked for (reply 0 first), whichever finished first
    assert children[user["id"]] == start["message_ids"] + regenerating[0]["message_ids"]
    assert "token_ids" not in tree[0]


def test_stop_keeps_the_partial_reply(api, server, conversation):
    cid = conversation["id"]
    long = {"max_tokens": 400, "ignore_eos": True, "temperature": 1.0, "seed": 1}  # still writing at the stop
    listener, events, started = stream_in_background(
        api, f"/api/conversations/{cid}/messages",
        {"content": "Write a very long story about the sea.", "settings": long})
    assert started.wait(120)
    stopped = api.post(f"/api/conversations/{cid}/stop", json={}).json()["stopped"]
    listener.join(60)
    (reply,) = replies(events)
    assert stopped == [reply["id"]]
    assert reply["stopped"] is True and reply["finish_reason"] == "abort"
    assert reply["content"] and reply["stats"]["completion_tokens"] < 400
    saved = api.get(f"/api/conversations/{cid}").json()["messages"]
    assert [m for m in saved if m["id"] == reply["id"]][0]["content"] == reply["content"]
    assert server.wait_idle()["localchat_kv_blocks_used"] == 0
    # a stopped reply can be continued: its tokens end with the template's end of turn
    follow = replies(send(api, cid, "Go on.", parent_id=reply["id"], settings={"max_tokens": 3}))[0]
    assert follow["finish_reason"] in ("stop", "length")


def test_rename_settings_system_prompt_delete(api):
    cid = api.post("/api/conversations", json={"title": "Mine"}).json()["id"]
    assert api.patch(f"/api/conversations/{cid}", json={"title": "Renamed"}).json()["title"] == "Renamed"
    first = replies(send(api, cid, "Hello there"))[0]
    without_system = first["stats"]["prompt_tokens"]
    changed = api.patch(f"/api/conversations/{cid}", json={"system_prompt": "You are terse.",
                                                          "settings": {"max_tokens": 2, "temperature": 0.0}}).json()
    assert changed["system_prompt"] == "You are terse." and changed["settings"]["max_tokens"] == 2
    # the conversation's settings apply when a request brings none; the new system prompt replaces the default
    again = replies(stream_api(api, f"/api/conversations/{cid}/messages/{first['id']}/regenerate", {}))[0]
    assert again["stats"]["completion_tokens"] <= 2
    assert again["stats"]["prompt_tokens"] < without_system  # "You are terse." is shorter than a new chat's default
    assert api.get("/api/conversations").json()[0]["id"] == cid  # newest activity first
    assert api.delete(f"/api/conversations/{cid}").status_code == 204
    assert api.get(f"/api/conversations/{cid}").status_code == 404


def test_a_new_chat_on_the_small_embedded_model_gets_its_defaults(api, server):
    defaults = api.get("/api/conversation-defaults").json()
    assert defaults["small_model"] is True  # 135M weights
    # SmolLM2's model card recommends temperature 0.2 and top_p 0.9; the rest are localchat's
    sampling = {name: defaults["settings"][name] for name in SAMPLING_FIELDS}
    assert sampling == LOCALCHAT_DEFAULTS | {"temperature": 0.2, "top_p": 0.9}
    assert defaults["sampling"]["source"].startswith("SmolLM2's model card")
    assert defaults["system_prompt"] == SMALL_MODEL_SYSTEM_PROMPT
    plain = api.post("/api/conversations", json={"title": "plain"}).json()
    assert (plain["system_prompt"], plain["settings"]) == (defaults["system_prompt"], defaults["settings"])
    # what the creator sets is kept: no system prompt at all, and its settings, each sampling value it leaves out the
    # model's
    own = api.post("/api/conversations", json={"system_prompt": "", "settings": {"seed": 3, "top_k": 7}}).json()
    assert own["system_prompt"] == "" and own["settings"] == msgspec.to_builtins(
        SamplingSettings(seed=3, **(sampling | {"top_k": 7})))
    # the same values in /health, /v1/models and Ollama's /api/show
    health = httpx.get(f"{server.url}/health").json()
    assert health["sampling"] == defaults["sampling"] == api.get("/v1/models").json()["data"][0]["sampling"]
    shown = api.post("/api/show", json={"model": health["model"]}).json()
    assert "temperature                    0.2" in shown["parameters"] and "SmolLM2" in shown["modelfile"]


def test_the_kv_cache_is_said_in_tokens_and_chats(server):
    health = httpx.get(f"{server.url}/health").json()
    kv_cache = health["kv_cache"]
    assert kv_cache["tokens"] % 16 == 0 and kv_cache["context_tokens"] == 8192
    assert kv_cache["summary"].startswith(f"chats stay resident for quick replies: {kv_cache['tokens']:,} tokens, "
                                          f"about {kv_cache['full_context_chats']:g} chats at the full 8,192-token")
    assert "memory fills only as chats use it" in kv_cache["summary"]
    assert f"{health['model']} ready: {kv_cache['summary']}" in server.log.read_text()  # the start line says it


def test_health_and_the_start_line_name_the_kernels_and_the_machines_peaks(server):
    """What runs decode and prompt rows, chosen by measuring the machine (engine/worker/kernel_choice.py)."""
    kernels = httpx.get(f"{server.url}/health").json()["kernels"]
    if native_kernels.load() is None:
        assert kernels is None
        return
    isa = native_kernels.load().isa
    assert kernels["decode"] == f"native int8 ({isa})" and kernels["prompt_rows"] == 64
    assert kernels["prompt"] in (f"native int8 ({isa})", "oneDNN bfloat16 over dequantized panels")
    assert set(kernels["peaks"]) == {"fp32_tflops", "bf16_tflops", "int8_tops", "native_tops", "read_gbs"}
    assert kernels["peaks"]["native_tops"] > 0 and kernels["peaks"]["read_gbs"] > 0
    assert f"kernels: native int8 ({isa})" in server.log.read_text()


def test_a_fork_gives_different_replies_and_says_how_it_sampled(api):
    """A fork samples at the fork temperature (0.7 for the embedded model, whose chats sample at 0.2), and a reply
    the same as a sibling's is sampled again with the next seeds and wider each time (issue 56: hotter by
    WIDEN_TEMPERATURE, top_p and min_p toward every token), at most MAX_RESAMPLES times, its stats saying how."""
    fork_temperature = api.get("/api/conversation-defaults").json()["sampling"]["fork_temperature"]
    cid = api.post("/api/conversations", json={}).json()["id"]
    events = stream_api(api, f"/api/conversations/{cid}/messages", {"content": "Name a color.", "n": 3})
    (start,) = [e for e in events if e["type"] == "start"]
    forked = replies(events)
    assert start["temperature"] == fork_temperature == 0.7
    assert len({m["content"] for m in forked}) == 3 and {m["stats"]["temperature"] for m in forked} == {0.7}
    # seeded and sampling so narrow that new seeds alone give the same reply: a repeat is sampled again, wider each
    # time (hotter, top_p and min_p toward every token), until it differs; its stats say how
    for temperature, top_p, min_p, must_repeat in ((0.3, 0.9, 0.05, False), (0.1, 0.3, 0.5, True)):
        sampled = replies(stream_api(api, f"/api/conversations/{cid}/messages", {
            "content": "Say the word red.", "n": 3, "settings": {
                "temperature": temperature, "top_p": top_p, "min_p": min_p, "seed": 5, "max_tokens": 8}}))
        assert len({m["content"] for m in sampled}) == 3, [m["content"] for m in sampled]
        assert not must_repeat or sum(m["stats"]["resampled"] for m in sampled) > 0
        for reply in sampled:
            stats, times = reply["stats"], reply["stats"]["resampled"]
            assert stats["temperature"] == round(temperature + WIDEN_TEMPERATURE * times, 3)
            assert (stats.get("top_p"), stats.get("min_p")) == (
                (None, None) if not times else (round(top_p + (1 - top_p) * times / MAX_RESAMPLES, 3),
                                                  round(min_p * (1 - times / MAX_RESAMPLES), 3))), stats
    # a model that cannot write another reply (top_k 1): sampled again at most MAX_RESAMPLES times, then kept
    same = replies(stream_api(api, f"/api/conversations/{cid}/messages", {
        "content": "Say the word red.", "n": 3, "settings": {"temperature": 0.3, "top_k": 1, "max_tokens": 8}}))
    assert len({m["content"] for m in same}) == 1
    assert [m["stats"]["resampled"] for m in same] == [0, MAX_RESAMPLES, MAX_RESAMPLES]


def test_export_markdown_and_json(api):
    cid = api.post("/api/conversations", json={"title": "Export me", "system_prompt": "Be nice."}).json()["id"]
    first = replies(send(api, cid, "Say one word."))[0]
    second = replies(stream_api(api, f"/api/conversations/{cid}/messages/{first['id']}/regenerate",
                                {"settings": {"max_tokens": 4, "temperature": 1.0, "seed": 2}}))[0]
    markdown = api.get(f"/api/conversations/{cid}/export", params={"format": "markdown", "leaf": first["id"]})
    assert markdown.headers["content-type"].startswith("text/markdown")
    assert 'filename="Export-me.md"' in markdown.headers["content-disposition"]
    text = markdown.text
    assert text.startswith("# Export me") and "Be nice." in text and "Say one word." in text
    assert first["content"] in text
    # the newest reply's branch is the active one: a UI reopening the chat shows it, and export defaults to it
    assert api.get(f"/api/conversations/{cid}").json()["conversation"]["active_leaf"] == second["id"]
    newest = api.get(f"/api/conversations/{cid}/export").text
    assert second["content"] in newest
    # a UI switching back to the first reply makes that branch the active one (updated_at is not activity)
    before = api.get(f"/api/conversations/{cid}").json()["conversation"]
    switched = api.patch(f"/api/conversations/{cid}", json={"active_leaf": first["id"]}).json()
    assert switched["active_leaf"] == first["id"] and switched["updated_at"] == before["updated_at"]
    assert first["content"] in api.get(f"/api/conversations/{cid}/export").text.split("Say one word.")[1]
    missing = api.patch(f"/api/conversations/{cid}", json={"active_leaf": "m-nope"})
    assert missing.status_code == 404 and "m-nope" in missing.json()["error"]["message"]
    exported = api.get(f"/api/conversations/{cid}/export", params={"format": "json"}).json()
    assert exported["conversation"]["title"] == "Export me"
    assert {m["id"] for m in exported["messages"]} == {first["parent_id"], first["id"], second["id"]}
    hits = api.get("/api/search", params={"q": "word"}).json()
    assert any(hit["message_id"] == first["parent_id"] for hit in hits)


def test_timestamps_order_the_list(api):
    a = api.post("/api/conversations", json={"title": "a"}).json()
    time.sleep(0.01)
    b = api.post("/api/conversations", json={"title": "b"}).json()
    ids = [c["id"] for c in api.get("/api/conversations").json()]
    assert ids.index(b["id"]) < ids.index(a["id"])
    api.patch(f"/api/conversations/{a['id']}", json={"title": "a2"})
    ids = [c["id"] for c in api.get("/api/conversations").json()]
    assert ids.index(a["id"]) < ids.index(b["id"])


def disk_blocks(server) -> int:
    """Blocks in the server's KV disk tier once its writes have settled."""
    seen = None
    for _ in range(100):
        count = int(server.metrics()["localchat_kv_disk_blocks"])
        if count == seen:
            return count
        seen = count
        time.sleep(0.2)
    raise AssertionError("the disk tier kept writing")


def test_deleting_a_conversation_drops_the_kv_blocks_only_it_used(api, server):
    # titled here: no title is written in the background, whose blocks would reach the disk tier while it is counted
    shared = {"system_prompt": SYSTEM, "settings": {"max_tokens": 40, "temperature": 1.0}}
    kept, deleted = (api.post("/api/conversations", json={**shared, "title": f"Rivers {i}"}).json()["id"]
                     for i in range(2))
    for cid, seed in ((kept, 1), (deleted, 2)):  # the same prompt, then replies of their own
        send(api, cid, "Tell me about rivers.", settings={**shared["settings"], "seed": seed})
    before = disk_blocks(server)
    assert api.delete(f"/api/conversations/{deleted}").status_code == 204
    after = disk_blocks(server)
    assert 0 < before - after <= 40 // 16 + 2  # its reply's blocks, not the prompt's that `kept` shares
    events = send(api, kept, "And lakes?", settings={"max_tokens": 2, "temperature": 0.0})
    done = replies(events)[0]
    assert done["stats"]["cached_tokens"] >= done["stats"]["prompt_tokens"] - 16 - 20
