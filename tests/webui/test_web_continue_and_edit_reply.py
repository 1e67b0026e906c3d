"""Continue a reply cut at max tokens, and edit a reply into a branch to go on from, in the browser at a laptop's and
a phone's width (issue 56)."""

import pytest
from playwright.sync_api import expect

pytestmark = pytest.mark.slow  # headless chromium against a real `localchat serve`: left out of `./dev test --fast`

STORY = "Tell me a story about a fox."


def test_continue_goes_on_in_the_same_reply_from_the_cache(chat_at_both_sizes):
    chat = chat_at_both_sizes
    chat.create_chat()  # greedy, 12 tokens a reply
    chat.send(STORY)
    chat.wait_replies()
    reply = chat.messages.nth(1)
    expect(reply.locator(".stats-line")).to_contain_text("cut at max tokens")
    before = chat.stored()["messages"][1]["content"]
    assert reply.locator("button.continue").is_visible()
    assert not chat.messages.nth(0).locator("button.continue").count()  # yours: nothing to go on with

    reply.locator("button.continue").click()
    chat.wait_replies()
    messages = chat.stored()["messages"]
    assert len(messages) == 2  # the same reply, longer
    grown = messages[1]
    assert grown["content"].startswith(before) and len(grown["content"]) > len(before)
    stats = grown["stats"]
    assert stats["cached_tokens"] == stats["prompt_tokens"] - 1  # the reply so far came from the cache
    expect(reply.locator(".content")).to_contain_text(grown["content"].split()[-1])
    expect(chat.messages).to_have_count(2)
    expect(reply.locator(".stats-details")).to_contain_text(
        f"{stats['cached_tokens']}/{stats['prompt_tokens']} prompt tokens cached")


def test_a_reply_edited_is_saved_beside_it_and_can_go_on(chat_at_both_sizes):
    chat = chat_at_both_sizes
    chat.create_chat()
    chat.send(STORY)
    chat.wait_replies()
    reply = chat.messages.nth(1)
    original = chat.stored()["messages"][1]
    reply.locator("button.edit").click()
    editor = reply.locator("textarea.edit-input")
    expect(editor).to_have_value(original["content"])
    editor.fill("Once upon a time, a fox")
    reply.locator("button.send-edit", has_text="Save as a new branch").click()

    edited = chat.messages.nth(1)
    expect(edited.locator(".switcher .position")).to_have_text("2/2")
    expect(edited.locator(".content")).to_have_text("Once upon a time, a fox")
    expect(edited.locator(".stats-line")).to_have_text("edited")
    stored = [m for m in chat.stored()["messages"] if m["role"] == "assistant"]
    assert [m["finish_reason"] for m in stored] == [original["finish_reason"], "edited"]
    assert stored[1]["parent_id"] == original["parent_id"] and chat.stored()["conversation"]["active_leaf"] == \
        stored[1]["id"]

    edited.locator("button.continue").click()  # the model goes on from the user's text
    chat.wait_replies()
    grown = [m for m in chat.stored()["messages"] if m["role"] == "assistant"][1]
    assert grown["content"].startswith("Once upon a time, a fox") and len(grown["content"]) > 23
