"""The chat list and search: new, rename, delete, newest first; search over message text opens the hit."""

import random
import re
import string

import pytest
from playwright.sync_api import expect
from webui_page import FAST, REPLY_TIMEOUT_MS, ChatPage, colors, contrast, wait_until

from support import stream_api

pytestmark = pytest.mark.slow  # headless chromium against a real `localchat serve`: left out of `./dev test --fast`


def chat_ids(chat) -> list[str]:
    return chat.page.locator("#chats li.chat").evaluate_all("items => items.map(i => i.dataset.id)")


def test_new_rename_delete_newest_first(chat, api):
    older = api.post("/api/conversations", json={"title": "older"}).json()
    newer = api.post("/api/conversations", json={"title": "newer"}).json()
    chat.page.reload()
    expect(chat.page.locator(f'#chats li[data-id="{older["id"]}"]')).to_have_count(1)
    ids = chat_ids(chat)
    assert ids.index(newer["id"]) < ids.index(older["id"])

    chat.page.click("#new-chat")
    expect(chat.page.locator("#chats li.chat").first).to_have_class("chat current")
    created = chat.conversation_id
    assert chat_ids(chat)[0] == created and api.get(f"/api/conversations/{created}").status_code == 200

    current = chat.page.locator("#chats li.current")
    current.locator("button.rename").click()
    chat.page.fill("#chats .rename-input", "Renamed <b>chat</b>")
    chat.page.press("#chats .rename-input", "Enter")
    expect(current.locator(".title")).to_have_text("Renamed <b>chat</b>")
    expect(chat.page.locator("#chat-title")).to_have_text("Renamed <b>chat</b>")
    assert api.get(f"/api/conversations/{created}").json()["conversation"]["title"] == "Renamed <b>chat</b>"

    older_item = chat.page.locator(f'#chats li[data-id="{older["id"]}"]')
    older_item.hover()  # a chat's buttons show on hover (or focus)
    older_item.locator("button.delete").click()
    expect(chat.page.locator("#confirm-dialog")).to_be_visible()
    chat.page.click('#confirm-dialog button[value="ok"]')
    expect(older_item).to_have_count(0)
    assert api.get(f"/api/conversations/{older['id']}").status_code == 404
    assert chat.conversation_id == created  # the open chat stays open


def test_a_chat_created_while_the_list_is_asked_for_stays_in_it(chat, api):
    """A list the server sent before a chat was created (asked for at a rename, a reply's end) arrives after it: the
    new chat stays in the list, current (the list is asked again)."""
    named = api.post("/api/conversations", json={"title": "to rename"}).json()
    chat.open(named["id"])
    held = []  # the first chat list asked for: fetched from the server now, given to the page later

    def hold_first_list(route):
        if route.request.method == "GET" and not held:
            held.append((route, route.fetch()))
        else:
            route.continue_()

    chat.page.route("**/api/conversations", hold_first_list)
    current = chat.page.locator("#chats li.current")
    current.locator("button.rename").click()
    chat.page.fill("#chats .rename-input", "renamed")
    chat.page.press("#chats .rename-input", "Enter")
    while not held:  # (the route's handler runs while the page waits)
        chat.page.wait_for_timeout(20)
    chat.page.click("#new-chat")
    expect(chat.page.locator("#chat-title")).to_have_text("New chat")
    created = chat.conversation_id
    route, response = held[0]
    route.fulfill(response=response)  # the list from before the new chat
    expect(chat.page.locator(f'#chats li.current[data-id="{created}"]')).to_have_count(1)
    expect(chat.page.locator(f'#chats li[data-id="{named["id"]}"] .title')).to_have_text("renamed")
    assert chat_ids(chat)[0] == created


def test_search_opens_the_hit_in_its_branch(chat, api):
    conversation = api.post("/api/conversations", json={"settings": {**FAST, "max_tokens": 4}}).json()
    messages = f"/api/conversations/{conversation['id']}/messages"
    first = stream_api(api, messages, {"content": "Tell me about zebracorns."})[0]["message"]
    stream_api(api, f"{messages}/{first['id']}/edit", {"content": "Tell me about unicorns."})
    chat.open(conversation["id"])
    expect(chat.page.locator("#thread > .message.user .content")).to_have_text("Tell me about unicorns.")

    chat.page.keyboard.press("Control+k")
    expect(chat.page.locator("#search")).to_be_focused()
    chat.page.keyboard.type("zebracorns")
    hit = chat.page.locator("#chats li.hit").filter(has_text="You: Tell me about zebracorns")
    expect(hit).to_have_count(1)  # (the reply may say it too)
    expect(hit.locator("mark")).to_have_text("zebracorns")  # the match highlighted, no brackets around it
    hit.locator("button").click()
    expect(chat.page.locator("#thread > .message.user .content")).to_have_text("Tell me about zebracorns.")
    assert chat.shown_ids()[0] == first["id"]
    reply = chat.shown_ids()[1]
    wait_until(lambda: chat.stored()["conversation"]["active_leaf"] == reply)

    chat.page.fill("#search", "")
    chat.page.fill("#search", "nothingmatchesthis")
    expect(chat.page.locator("#chats li.empty")).to_have_text("No messages match")
    chat.page.press("#search", "Escape")
    expect(chat.page.locator("#chats li.current")).to_have_count(1)


def test_signing_in_opens_a_new_chat_unless_the_address_names_one(page, server, api):
    older = api.post("/api/conversations", json={"settings": {**FAST, "max_tokens": 4}}).json()  # made elsewhere,
    stream_api(api, f"/api/conversations/{older['id']}/messages", {"content": "Hi."})  # the newest chat
    chat = ChatPage(page, server, api).sign_in()
    expect(page.locator("#chat-title")).to_have_text("New chat")
    expect(page.locator("#chats li.chat")).not_to_have_count(0)
    expect(page.locator("#chats li.current")).to_have_count(0)
    expect(chat.messages).to_have_count(0)
    assert chat.conversation_id == ""

    page.fill("#message", "Hello.")  # the first message makes the chat
    page.press("#message", "Enter")
    expect(page.locator("#thread .message.assistant")).to_have_count(1, timeout=REPLY_TIMEOUT_MS)
    page.keyboard.press("Escape")  # (a new chat's replies are long: stopped)
    chat.wait_replies()
    assert chat.conversation_id not in ("", older["id"])
    assert [m["content"] for m in chat.stored()["messages"]][0] == "Hello."
    assert len(api.get(f"/api/conversations/{older['id']}").json()["messages"]) == 2

    page.goto(f"{chat.login_url()}#{older['id']}")  # a login link that names a chat opens it
    expect(page.locator(f'#chats li.current[data-id="{older["id"]}"]')).to_have_count(1)
    expect(chat.messages).to_have_count(2)


SHARED_START = "What is a KV cache, in "  # chats named by their first messages often start alike
TITLES = [SHARED_START + "two sentences for a newcomer", SHARED_START + "one word"]


@pytest.mark.parametrize("theme", ["light", "dark"])
def test_each_search_hit_shows_its_own_chats_title(chat_at_both_sizes, api, theme):
    word = "quetzal" + "".join(random.choices(string.ascii_lowercase, k=8))  # in this test's messages alone
    ids = {}
    for title in TITLES:
        conversation = api.post("/api/conversations", json={"title": title}).json()
        ids[title] = conversation["id"]
        stream_api(api, f"/api/conversations/{conversation['id']}/messages",
                   {"content": f"{word} {title}", "reply": False})
    page = chat_at_both_sizes.page
    chat_at_both_sizes.show_sidebar()
    page.select_option("#theme", theme)
    page.fill("#search", word)
    hits = page.locator("#chats li.hit")
    expect(hits).to_have_count(2)
    for title in TITLES:
        hit = hits.filter(has=page.get_by_title(title, exact=True))
        expect(hit).to_have_count(1)
        shown = hit.locator(".title")
        expect(shown).to_have_text(title)
        expect(shown).to_be_in_viewport(ratio=1)
        assert shown.evaluate("e => e.scrollHeight <= e.clientHeight"), f"{title!r} is cut"  # the whole of it shows
        mark = hit.locator("mark")
        expect(mark).to_have_text(word)
        color, background = colors(mark)
        assert contrast(color, background) >= 4.5, (theme, color, background)
        page_background = page.evaluate("getComputedStyle(document.body).backgroundColor")
        assert background != page_background  # the match stands out
    hits.filter(has_text=TITLES[1]).locator("button").click()
    expect(page.locator("#chat-title")).to_have_text(TITLES[1])
    assert chat_at_both_sizes.conversation_id == ids[TITLES[1]]


def test_a_title_too_long_for_two_lines_is_cut_with_its_whole_in_the_tooltip(chat, api):
    title = "A chat about " + "very " * 30 + "long titles"
    conversation = api.post("/api/conversations", json={"title": title}).json()
    word = "ornithopter" + "".join(random.choices(string.ascii_lowercase, k=8))
    stream_api(api, f"/api/conversations/{conversation['id']}/messages", {"content": word, "reply": False})
    chat.page.fill("#search", word)
    shown = chat.page.locator("#chats li.hit .title")
    expect(shown).to_have_text(title)
    expect(shown).to_have_attribute("title", title)
    assert shown.evaluate("e => e.scrollHeight > e.clientHeight"), "not cut"
    lines = shown.evaluate("e => Math.round(e.clientHeight / parseFloat(getComputedStyle(e).lineHeight))")
    assert lines == 2


def test_chats_named_alike_tell_apart_by_when_and_how_many_messages(chat, api):
    title = "Name a fruit."
    ids = []
    for messages in [1, 2]:
        conversation = api.post("/api/conversations", json={"title": title}).json()
        ids.append(conversation["id"])
        for _ in range(messages):
            stream_api(api, f"/api/conversations/{conversation['id']}/messages", {"content": title, "reply": False})
    chat.page.reload()
    for conversation_id, count in zip(ids, ["1 message", "2 messages"]):
        item = chat.page.locator(f'#chats li[data-id="{conversation_id}"]')
        expect(item.locator(".title")).to_have_text(title)
        about = item.locator(".chat-about")
        expect(about).to_have_text(re.compile(rf"today \d{{1,2}}:\d{{2}}( [AP]M)? · {count}"))
        expect(about).to_be_in_viewport(ratio=1)
        assert about.evaluate("e => e.scrollWidth <= e.clientWidth"), "the line is cut"
        expect(about).to_have_attribute("title", re.compile(r"^Last active "))


def test_a_chats_time_says_today_yesterday_or_its_date(page, server):
    page.goto(server.url + "/")
    said = page.evaluate("""async () => {
        const { chatAbout, chatTime } = await import('/static/sidebar.js');
        const now = new Date(2026, 11, 5, 10, 30);
        const at = (...parts) => new Date(...parts).getTime() / 1000;
        const time = (seconds) => new Date(seconds * 1000)
            .toLocaleTimeString([], { hour: "2-digit", minute: "2-digit" });
        return {
            today: [chatTime(at(2026, 11, 5, 0, 5), now), time(at(2026, 11, 5, 0, 5))],
            yesterday: [chatTime(at(2026, 11, 4, 23, 59), now), time(at(2026, 11, 4, 23, 59))],
            thisYear: chatTime(at(2026, 2, 1, 12, 0), now),
            lastYear: chatTime(at(2025, 11, 31, 12, 0), now),
            empty: chatAbout({ updated_at: at(2026, 11, 5, 9, 0), message_count: 0 }, now),
        };
    }""")
    assert said["today"][0] == f"today {said['today'][1]}"
    assert said["yesterday"][0] == f"yesterday {said['yesterday'][1]}"
    assert said["thisYear"] in ("Mar 1", "1 Mar") and said["lastYear"] in ("Dec 31, 2025", "31 Dec 2025")
    assert said["empty"].endswith(" · no messages")
