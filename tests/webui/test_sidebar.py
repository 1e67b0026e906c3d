"""The chat list and search: new, rename, delete, newest first; search over message text opens the hit."""

import pytest
from playwright.sync_api import expect
from webui_page import FAST, REPLY_TIMEOUT_MS, ChatPage, wait_until

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
