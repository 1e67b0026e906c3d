"""Chat titles in the browser (issue 56): after a chat's first reply the model's title replaces the first message's
words, in the list and the header; reopening the page opens the chat it showed last, not a new one."""

import pytest
from playwright.sync_api import expect
from webui_page import FAST, wait_until

from support import stream_api

pytestmark = pytest.mark.slow  # headless chromium against a real `localchat serve`: left out of `./dev test --fast`

QUESTION = "What is the capital of France?"


def test_the_model_names_a_chat_after_its_first_reply(chat_at_both_sizes, api):
    chat = chat_at_both_sizes
    page = chat.page
    expect(page.locator("#chat-title")).to_have_text("New chat")
    chat.send(QUESTION)
    chat.wait_replies()
    wait_until(lambda: chat.conversation_id, 30)  # the page's address names the chat
    cid = chat.conversation_id
    wait_until(lambda: api.get(f"/api/conversations/{cid}").json()["conversation"]["title"] != QUESTION, 60)
    title = api.get(f"/api/conversations/{cid}").json()["conversation"]["title"]
    assert "\n" not in title and '"' not in title and len(title) <= 48
    expect(page.locator("#chat-title")).to_have_text(title)
    expect(page.locator(f'#chats li[data-id="{cid}"] .title')).to_have_text(title)


def test_reopening_the_page_opens_the_chat_it_showed_last(chat_at_both_sizes, api):
    chat = chat_at_both_sizes
    first, second = (api.post("/api/conversations", json={"title": title, "settings": {**FAST, "max_tokens": 4}}).json()
                     for title in ("Greetings", "Salutations"))  # named by the user: the model leaves them be
    for conversation, text in [(first, "Hi."), (second, "Hello.")]:
        stream_api(api, f"/api/conversations/{conversation['id']}/messages", {"content": text})
    chat.open(first["id"])  # not the newest chat
    chat.page.goto(f"{chat.server.url}/")  # the page again, without a chat in its address
    expect(chat.page.locator(f'#chats li.current[data-id="{first["id"]}"]')).to_have_count(1)
    expect(chat.page.locator("#chat-title")).to_have_text("Greetings")
    expect(chat.messages).to_have_count(2)
    assert chat.conversation_id == first["id"]

    api.delete(f"/api/conversations/{first['id']}")  # a chat deleted meanwhile: a new chat, as at a first visit
    chat.page.reload()
    expect(chat.page.locator("#chat-title")).to_have_text("New chat")
    expect(chat.page.locator("#chats li.current")).to_have_count(0)
