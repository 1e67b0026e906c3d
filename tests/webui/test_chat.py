"""Chatting in the browser against a real engine: streaming, stop, the branches of a tree, reload."""

import json
import re

import pytest
from playwright.sync_api import expect
from webui_page import FAST, REPLY_TIMEOUT_MS, wait_until

from support import stream_in_background

pytestmark = pytest.mark.slow  # headless chromium against a real `localchat serve`: left out of `./dev test --fast`


def children(messages: list[dict], parent_id: str | None) -> list[dict]:
    return [m for m in messages if m["parent_id"] == parent_id]


def test_a_reply_streams_and_only_it_re_renders(chat):
    chat.create_chat(max_tokens=24)
    chat.send("Tell me about the sea.")
    streaming = chat.page.locator("#thread .message.assistant.streaming")
    expect(streaming).to_have_count(1, timeout=REPLY_TIMEOUT_MS)
    # from the first delta on, watch every DOM change in the thread until the reply is done
    chat.page.evaluate("""() => new Promise(resolve => {
        const watch = () => {
            const reply = document.querySelector('#thread .message.assistant.streaming');
            if (!reply || !reply.querySelector('.content').textContent) return requestAnimationFrame(watch);
            window.changes = {inside: 0, outside: 0};
            new MutationObserver(records => records.forEach(r =>
                reply.contains(r.target) ? window.changes.inside++ : window.changes.outside++))
                .observe(document.getElementById('thread'), {subtree: true, childList: true, characterData: true,
                                                              attributes: true});
            resolve();
        };
        watch();
    })""")
    chat.wait_replies()
    changes = chat.page.evaluate("window.changes")
    assert changes["inside"] > 0 and changes["outside"] == 0, changes

    user, reply = chat.stored()["messages"]
    assert chat.shown_ids() == [user["id"], reply["id"]]
    shown = chat.message(reply["id"])
    expect(shown.locator(".content")).to_have_text(re.compile(re.escape(reply["content"].split("\n")[0].strip())))
    # under it one quiet line; the figures in its tooltip, and under it once it is clicked (tapped)
    stats = reply["stats"]
    line = shown.locator(".stats-line")
    ending = " · cut at max tokens" if reply["finish_reason"] == "length" else ""
    expect(line).to_have_text(f"{stats['completion_tokens']} tokens · {round(stats['tokens_per_s'])} tok/s{ending}")
    details = shown.locator(".stats-details")
    expect(details).to_be_hidden()
    line.click()
    expect(details).to_be_visible()
    shown_stats = details.inner_text()
    assert line.get_attribute("title") == shown_stats
    ttft, rate, tokens, cached, prompt, temperature = re.fullmatch(
        r"([\d.]+) s to first token · ([\d.]+) tokens/s · (?:\d+% of drafts kept · )?(\d+) tokens · (\d+)/(\d+) "
        r"prompt tokens cached · temperature ([\d.]+)", shown_stats).groups()
    assert abs(float(ttft) - stats["time_to_first_token_s"]) <= 0.006
    assert abs(float(rate) - stats["tokens_per_s"]) <= 0.06
    assert (int(tokens), int(cached), int(prompt)) == (stats["completion_tokens"], stats["cached_tokens"],
                                                       stats["prompt_tokens"])
    assert float(temperature) == stats["temperature"]
    line.click()
    expect(details).to_be_hidden()
    # the chat is named (its first words, then the model's title in the background), and the sidebar shows it
    named = chat.api.post(f"/api/conversations/{chat.conversation_id}/title").json()["title"]
    assert named
    expect(chat.page.locator("#chats li.current .title")).to_have_text(named)


def test_escape_stops_a_reply_and_keeps_what_it_wrote(chat):
    chat.create_chat(max_tokens=3000, ignore_eos=True)  # still writing at the Escape, on any machine
    chat.send("Write a long story about a dragon who learns to cook.")
    reply = chat.page.locator("#thread .message.assistant")
    expect(reply.locator(".content")).not_to_have_text("", timeout=REPLY_TIMEOUT_MS)
    chat.page.keyboard.press("Escape")
    chat.wait_replies()
    expect(reply).to_have_class(re.compile(r"\bstopped\b"))
    expect(reply.locator(".stats-line")).to_contain_text("stopped")
    stored = [m for m in chat.stored()["messages"] if m["role"] == "assistant"]
    assert len(stored) == 1 and stored[0]["stopped"] and stored[0]["finish_reason"] == "abort"
    assert stored[0]["stats"]["completion_tokens"] < 3000


def test_branches_regenerate_edit_fork_and_reload(chat):
    chat.create_chat(temperature=0.9, max_tokens=8)
    page = chat.page
    chat.send("Name a fruit.")
    chat.wait_replies()
    first_user, first_reply = chat.stored()["messages"]

    # regenerate: a sibling reply, shown, with the switcher at 2/2
    chat.message(first_reply["id"]).locator("button.regenerate").click()
    chat.wait_replies()
    replies = children(chat.stored()["messages"], first_user["id"])
    assert len(replies) == 2
    second_reply = replies[1]
    assert chat.shown_ids() == [first_user["id"], second_reply["id"]]
    expect(chat.message(second_reply["id"]).locator(".switcher .position")).to_have_text("2/2")

    # the switcher goes back to the first reply, and the server remembers that branch
    chat.message(second_reply["id"]).locator("button.previous").click()
    expect(chat.message(first_reply["id"]).locator(".switcher .position")).to_have_text("1/2")
    assert chat.shown_ids() == [first_user["id"], first_reply["id"]]
    wait_until(lambda: chat.stored()["conversation"]["active_leaf"] == first_reply["id"])

    # edit-and-resend: a new user message beside the first, with its own reply
    chat.message(first_user["id"]).locator("button.edit").click()
    page.fill(".editor textarea", "Name a vegetable.")
    page.click(".editor .send-edit")
    chat.wait_replies()
    roots = children(chat.stored()["messages"], None)
    assert [m["content"] for m in roots] == ["Name a fruit.", "Name a vegetable."]
    edited = roots[1]
    edited_reply = children(chat.stored()["messages"], edited["id"])[0]
    assert chat.shown_ids() == [edited["id"], edited_reply["id"]]
    expect(chat.message(edited["id"]).locator(".switcher .position")).to_have_text("2/2")
    expect(chat.message(edited["id"]).locator(".content")).to_have_text("Name a vegetable.")

    # fork three replies: side by side as cards while they stream, saying how they were sampled; pick the second one
    # at the model's fork temperature at least (the chat's 0.9 where that is higher), said from the replies' start on
    least = chat.api.get("/api/conversation-defaults").json()["sampling"]["fork_temperature"]
    sampled = page.locator("#thread .fork .fork-sampling")
    chat.send("Why that one?", replies=3)
    expect(chat.cards).to_have_count(3, timeout=REPLY_TIMEOUT_MS)
    expect(sampled).to_have_text(f"3 replies, sampled at temperature {max(0.9, least):g}")
    expect(sampled).to_have_attribute("title", re.compile(rf"at temperature {least:g} at least"))
    expect(page.get_by_label("Fork")).to_have_value("3")  # the Fork box keeps its number for the chat's next message
    chat.wait_replies()
    for card in chat.cards.all():  # once written, the cards' buttons are in sight, not under the message box
        expect(card.locator("button.pick")).to_be_in_viewport(ratio=1)
    question = children(chat.stored()["messages"], edited_reply["id"])[0]
    fork = children(chat.stored()["messages"], question["id"])
    forked = [m["id"] for m in fork]
    assert len(forked) == 3
    # as the replies' stats say too (a reply sampled again for being the same as a sibling: hotter, issue 56)
    assert {m["stats"]["temperature"] for m in fork if not m["stats"]["resampled"]} == {max(0.9, least)}
    assert all(m["stats"]["temperature"] > max(0.9, least) for m in fork if m["stats"]["resampled"])
    expect(sampled).to_have_text(f"3 replies, sampled at temperature {max(0.9, least):g}")
    for reply in fork:  # a reply sampled again for being the same as a sibling says so
        line = page.locator(f'#thread .fork .card[data-id="{reply["id"]}"] .stats-line')
        if reply["stats"]["resampled"]:
            expect(line).to_contain_text(f"wider (temperature {reply['stats']['temperature']}")
        else:
            expect(line).not_to_contain_text("sampled again")
    cards = chat.cards.evaluate_all("cards => cards.map(c => c.dataset.id)")
    assert sorted(cards) == sorted(forked)
    picked = cards[1]
    chat.cards.nth(1).locator("button.pick").click()
    expect(chat.cards).to_have_count(0)
    assert chat.shown_ids() == [edited["id"], edited_reply["id"], question["id"], picked]
    picked_position = f"{forked.index(picked) + 1}/3"  # siblings in the order they were saved
    expect(chat.message(picked).locator(".switcher .position")).to_have_text(picked_position)
    wait_until(lambda: chat.stored()["conversation"]["active_leaf"] == picked)

    # continue the picked branch
    chat.send("Thanks.", replies=1)
    chat.wait_replies()
    messages = chat.stored()["messages"]
    thanks = next(m for m in messages if m["content"] == "Thanks.")
    assert thanks["parent_id"] == picked
    path = chat.shown_ids()
    assert path[:5] == [edited["id"], edited_reply["id"], question["id"], picked, thanks["id"]] and len(path) == 6
    assert chat.stored()["conversation"]["active_leaf"] == path[-1]

    # the branch tree shows every message and highlights the shown branch
    page.click("#toggle-branches")
    tree = page.locator("#branches")
    expect(tree.locator(".node")).to_have_count(len(messages))
    assert tree.locator(".node.active").evaluate_all("nodes => nodes.map(n => n.dataset.id)") == path

    # reload: the same tree and the same branch
    page.reload()
    expect(chat.messages).to_have_count(len(path))
    assert chat.shown_ids() == path
    expect(chat.message(edited["id"]).locator(".switcher .position")).to_have_text("2/2")
    expect(chat.message(picked).locator(".switcher .position")).to_have_text(picked_position)

    # export: the shown branch as Markdown, the whole tree as JSON (once the model has named the chat)
    named = chat.api.post(f"/api/conversations/{chat.conversation_id}/title").json()["title"]
    with page.expect_download() as download:
        page.click("#export-markdown")
    markdown = open(download.value.path(), encoding="utf-8").read()
    stored = {m["id"]: m for m in chat.stored()["messages"]}
    position = 0
    for message_id in path:  # each message of the branch, in order
        position = markdown.index(stored[message_id]["content"], position)
    title, body = markdown.split("\n", 1)
    # the chat's title (its first words, or the model's) heads it; the other branch is left out
    assert title == f"# {named}" and "Name a fruit." not in body
    with page.expect_download() as download:
        page.click("#export-json")
    exported = json.loads(open(download.value.path(), encoding="utf-8").read())
    assert {m["id"] for m in exported["messages"]} == set(stored)

    # clicking a message of another branch in the tree (still open after the reload) shows that branch, down its
    # newest replies
    expect(tree).to_be_visible()
    tree.locator(f'.node[data-id="{first_user["id"]}"] button').click()
    expect(chat.message(first_user["id"])).to_be_visible()
    assert chat.shown_ids() == [first_user["id"], second_reply["id"]]
    wait_until(lambda: chat.stored()["conversation"]["active_leaf"] == second_reply["id"])


def test_a_reply_written_elsewhere_shows_as_being_written_until_it_ends(chat, api):
    until_the_stop = {**FAST, "max_tokens": 3000, "ignore_eos": True}  # on any machine
    conversation = api.post("/api/conversations", json={"settings": until_the_stop}).json()
    messages = f"/api/conversations/{conversation['id']}/messages"
    listener, events, writing = stream_in_background(api, messages, {"content": "Write a long story about a cat."})
    try:
        assert writing.wait(REPLY_TIMEOUT_MS / 1000)
        chat.open(conversation["id"])  # a tree in which the reply is saved so far, without a finish reason
        reply = chat.messages.nth(1)
        expect(reply.locator(".stats")).to_have_text("writing…")
        expect(reply).to_have_class(re.compile(r"\bstreaming\b"))
        expect(reply.locator("button.regenerate")).to_be_disabled()
        shown = len(reply.locator(".content").inner_text())
        wait_until(lambda: len(reply.locator(".content").inner_text()) > shown, timeout=15)  # it follows the reply
    finally:
        assert api.post(f"/api/conversations/{conversation['id']}/stop", json={}).json()["stopped"]
        listener.join()
    expect(reply.locator(".stats")).to_contain_text("stopped")
    expect(reply).not_to_have_class(re.compile(r"\bstreaming\b"))
    stored = next(m for m in chat.stored()["messages"] if m["role"] == "assistant")
    expect(reply.locator(".content")).to_have_text(re.compile(re.escape(stored["content"].split("\n")[0].strip())))


def test_the_stats_line_says_how_a_reply_ended(page, server):
    page.goto(server.url + "/")
    lines = page.evaluate("""async () => {
        const { statsLine } = await import('/static/reply_stats.js');
        const endings = [{ finish_reason: "stop" }, { finish_reason: "length" },
                         { finish_reason: "abort", stopped: true }, { finish_reason: "interrupted", stopped: true },
                         {}];
        return endings.map((ending) => statsLine({ role: "assistant", content: "", ...ending }));
    }""")
    assert lines == ["", "cut at max tokens", "stopped", "interrupted", "writing…"]


def test_a_reply_says_its_figures_in_one_short_line_and_the_rest_in_its_details(page, server):
    page.goto(server.url + "/")
    line, details = page.evaluate("""async () => {
        const { statsDetails, statsLine } = await import('/static/reply_stats.js');
        const reply = { role: "assistant", content: "", finish_reason: "stop", stats: {
            time_to_first_token_s: 0.123, tokens_per_s: 180.46, draft_tokens: 50, accepted_draft_tokens: 32,
            completion_tokens: 48, cached_tokens: 10, prompt_tokens: 30, temperature: 0.7, resampled: 2 } };
        return [statsLine(reply), statsDetails(reply)];
    }""")
    assert line == "48 tokens · 180 tok/s · sampled again 2 times: same as another reply"
    assert details == ("0.12 s to first token · 180.5 tokens/s · 64% of drafts kept · 48 tokens · 10/30 prompt tokens "
                       "cached · temperature 0.7")
