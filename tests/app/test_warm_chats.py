"""Chats whose warmth you can see and keep, on a real `localchat serve` with a small KV cache: the warmth the list
reports is what the next turn then costs, a pinned chat survives the pressure that evicts an unpinned one of the
same age, the pin budget is refused beyond and reported, and a pinned chat comes back warm after a restart."""

import time
from pathlib import Path

import pytest

from support import Server, make_home, running_server, stream_api

pytestmark = pytest.mark.slow  # real `localchat serve` processes

KV_BLOCKS = 96  # 1,536 tokens: two chats of ~400 tokens and one long prompt do not fit together
PIN_LIMIT_TOKENS = KV_BLOCKS // 2 * 16  # the pin budget: half the cache
SHORT = {"max_tokens": 8, "temperature": 0.0}


def system_prompt(name: str, rules: int = 24) -> str:
    return f"You are chat {name}. " + " ".join(f"Rule {i}: be kind, be brief, and answer in plain English."
                                                for i in range(rules))


def new_chat(api, name: str, rules: int = 24) -> tuple[str, dict]:
    """A chat with a long system prompt and one exchange: (its id, its reply). Named here, so that no title is written
    in the background: a title's request computes the chat's history again, between a warmth read and the turn."""
    cid = api.post("/api/conversations", json={"title": f"Chat {name}", "system_prompt": system_prompt(name, rules),
                                               "settings": SHORT}).json()
    return cid["id"], next_turn(api, cid["id"], None, f"Hello, chat {name}. What is a cat?")


def next_turn(api, cid: str, parent_id: str | None, content: str) -> dict:
    events = stream_api(api, f"/api/conversations/{cid}/messages", {"content": content, "parent_id": parent_id})
    (reply,) = [e["message"] for e in events if e["type"] == "done"]
    return reply


def warmth(api, cid: str) -> dict:
    return next(c for c in api.get("/api/conversations").json() if c["id"] == cid)["warmth"]


@pytest.fixture(scope="module")
def small_cache(tmp_path_factory):
    """A server of its own with a small KV cache and no disk tier (what leaves memory is cold)."""
    with running_server(tmp_path_factory.mktemp("warm-chats"), kv_blocks=KV_BLOCKS,
                        args=["--kv-disk-gb", "0"]) as server:
        yield server


def test_the_warmth_a_chat_reports_is_what_its_next_turn_costs(small_cache):
    with small_cache.client() as api:
        cid, reply = new_chat(api, "W")
        before = warmth(api, cid)
        assert before["state"] == "resident" and before["pinned"] is False
        assert before["tokens"] == before["resident_tokens"] + before["cold_tokens"]
        # never computed: the reply's last token and what the template closes it with (<|im_end|>\n after a reply cut
        # at max_tokens)
        assert before["cold_tokens"] <= 3
        assert before["summary"].startswith("warm")
        following = next_turn(api, cid, reply["id"], "And a dog?")
        assert following["stats"]["cached_tokens"] == before["resident_tokens"]


def test_a_pinned_chat_survives_the_pressure_that_evicts_an_unpinned_one_of_the_same_age(small_cache):
    with small_cache.client() as api:
        older, older_reply = new_chat(api, "A")
        newer, newer_reply = new_chat(api, "B")  # the same shape, freed after A: without a pin, A goes first
        pinned = api.post(f"/api/conversations/{older}/pin")
        assert pinned.status_code == 200 and pinned.json()["pinned"] is True
        pressure = api.post("/v1/chat/completions", json={"max_tokens": 4, "messages": [
            {"role": "user", "content": "Count the words: " + "one two three four five six seven " * 130}]})
        assert pressure.status_code == 200, pressure.text
        kept, evicted = warmth(api, older), warmth(api, newer)
        assert kept["state"] == "resident" and kept["pinned"] is True
        assert evicted["state"] == "cold" and evicted["resident_tokens"] < evicted["tokens"] // 2
        assert next_turn(api, older, older_reply["id"], "Why?")["stats"]["cached_tokens"] == kept["resident_tokens"]
        evicted = warmth(api, newer)  # the older chat's turn took blocks too
        assert next_turn(api, newer, newer_reply["id"], "Why?")["stats"]["cached_tokens"] == \
            evicted["resident_tokens"]
        api.delete(f"/api/conversations/{older}/pin")


def test_the_pin_budget_is_reported_and_a_pin_beyond_it_refused(small_cache):
    with small_cache.client() as api:
        first, _ = new_chat(api, "P")
        assert api.post(f"/api/conversations/{first}/pin").status_code == 200
        pins = api.get("/health").json()["pins"]
        assert pins["limit_tokens"] == PIN_LIMIT_TOKENS and 0 < pins["tokens"] <= PIN_LIMIT_TOKENS
        assert pins["bytes"] * pins["limit_tokens"] == pins["limit_bytes"] * pins["tokens"]
        big, _ = new_chat(api, "Q", rules=30)
        refused = api.post(f"/api/conversations/{big}/pin")
        assert refused.status_code == 409
        assert "unpin another chat first" in refused.json()["error"]["message"]
        assert not next(c for c in api.get("/api/conversations").json() if c["id"] == big)["pinned"]
        status = small_cache.run_cli("status")
        assert "warm chats:" in status.stdout and "  pinned " in status.stdout
        assert f"pinned chats keep {pins['tokens']:,} of {PIN_LIMIT_TOKENS:,} tokens" in status.stdout
        unpinned = api.delete(f"/api/conversations/{first}/pin")
        assert unpinned.status_code == 200 and unpinned.json()["pinned"] is False
        assert api.get("/health").json()["pins"]["tokens"] == 0
        assert api.post(f"/api/conversations/{big}/pin").status_code == 200
        api.delete(f"/api/conversations/{big}/pin")


def test_a_pinned_chat_comes_back_warm_after_a_restart(tmp_path):
    """The disk tier keeps both chats; after a restart the pinned one is read back into memory (its full blocks)
    before anyone asks for it, the other stays on disk until its next turn reads it."""
    home = make_home(Path(tmp_path) / "restart")
    args = ["--kv-blocks", str(KV_BLOCKS)]
    with running_server(home, kv_blocks=KV_BLOCKS) as server, server.client() as api:
        pinned, pinned_reply = new_chat(api, "R")
        other, other_reply = new_chat(api, "S")
        assert api.post(f"/api/conversations/{pinned}/pin").status_code == 200
    server = Server(home, args=args).start()
    try:
        with server.client() as api:
            deadline = time.monotonic() + 60
            while (kept := warmth(api, pinned))["state"] != "resident" and time.monotonic() < deadline:
                time.sleep(0.2)  # the pinned chats are pinned again (and read back) once the model is ready
            assert kept["state"] == "resident" and kept["pinned"] and kept["cold_tokens"] <= 16
            on_disk = warmth(api, other)
            assert on_disk["state"] == "on_disk" and on_disk["resident_tokens"] == 0 and on_disk["on_disk_tokens"] > 0
            assert next_turn(api, pinned, pinned_reply["id"], "Why?")["stats"]["cached_tokens"] == \
                kept["resident_tokens"]
            assert next_turn(api, other, other_reply["id"], "Why?")["stats"]["cached_tokens"] == \
                on_disk["on_disk_tokens"]
    finally:
        server.stop()
