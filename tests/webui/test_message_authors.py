"""Who wrote what, at 1440x900 and 390x844: your messages are tinted bubbles on the right, the assistant's replies
span the column under an avatar and its name."""

import pytest
from playwright.sync_api import expect
from webui_page import FAST

from support import stream_api

pytestmark = pytest.mark.slow  # headless chromium against a real `localchat serve`: left out of `./dev test --fast`


def test_your_messages_and_the_replies_look_apart(chat_at_both_sizes, api):
    chat = chat_at_both_sizes
    conversation = api.post("/api/conversations", json={"settings": {**FAST, "max_tokens": 24}}).json()
    stream_api(api, f"/api/conversations/{conversation['id']}/messages", {"content": "Hi."})
    chat.open(conversation["id"])
    page = chat.page
    thread = page.locator("#thread").bounding_box()
    user, reply = chat.messages.nth(0), chat.messages.nth(1)
    expect(reply.locator(".content")).not_to_have_text("")

    bubble = user.locator(".content").bounding_box()
    assert abs((bubble["x"] + bubble["width"]) - (thread["x"] + thread["width"])) <= 1, (bubble, thread)  # right
    assert bubble["x"] > thread["x"] + thread["width"] * 0.5, (bubble, thread)  # a short message: a small bubble
    page_background = page.evaluate("getComputedStyle(document.body).backgroundColor")
    assert user.locator(".content").evaluate("e => getComputedStyle(e).backgroundColor") != page_background  # tinted

    expect(reply.locator(".role")).to_have_text("Assistant")
    avatar = reply.locator(".role").evaluate("e => getComputedStyle(e, '::before').content")
    assert avatar == '"AI"'
    text = reply.locator(".content").bounding_box()
    assert text["x"] + text["width"] >= thread["x"] + thread["width"] - 1, (text, thread)  # the whole column
    assert text["width"] >= thread["width"] * 0.9, (text, thread)
    assert reply.locator(".content").evaluate("e => getComputedStyle(e).backgroundColor") == "rgba(0, 0, 0, 0)"
