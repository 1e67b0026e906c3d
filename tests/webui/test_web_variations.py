"""Forks that vary on purpose and chats whose warmth you see and keep, in the browser at a laptop's and a phone's width
(issue 57): the Fork box's panel (a field per reply, presets), the cards labelled with what each reply was asked, the
chat list's warmth and its pin button."""

import re

import pytest
from playwright.sync_api import expect
from webui_page import assert_fits, wait_until

pytestmark = pytest.mark.slow  # headless chromium against a real `localchat serve`: left out of `./dev test --fast`


def open_panel(chat, replies: int):
    """The Fork box set to `replies`, and its panel opened: its fields."""
    page = chat.page
    page.fill("#replies", str(replies))
    page.dispatch_event("#replies", "input")
    panel = page.locator("#fork-panel")
    expect(panel).to_be_visible()
    if not panel.locator("details").evaluate("details => details.open"):
        panel.locator("summary").click()
    fields = panel.locator("input.variation")
    expect(fields).to_have_count(replies)
    return fields


def test_the_fork_panel_asks_each_reply_its_own_way_and_the_cards_say_how(chat_at_both_sizes):
    chat = chat_at_both_sizes
    chat.create_chat()
    page = chat.page
    page.fill("#replies", "1")
    page.dispatch_event("#replies", "input")
    expect(page.locator("#fork-panel")).to_be_hidden()  # one reply: nothing to vary
    fields = open_panel(chat, 3)
    fields.nth(0).fill("Answer in one word.")
    fields.nth(2).fill("Answer in French.")
    expect(page.locator("#fork-panel summary")).to_have_text("Ask each reply its own way · 2 of 3 asked")
    assert_fits(page)
    page.fill("#message", f"Name a fruit for a {page.viewport_size['width']} px screen.")  # a prompt not yet cached
    page.press("#message", "Enter")
    chat.wait_replies()
    expect(chat.cards).to_have_count(3)
    # sent: the panel folds to its line (the replies get the room), its fields kept for the next message
    assert not page.locator("#fork-panel details").evaluate("details => details.open")
    expect(page.locator("#fork-panel summary")).to_have_text("Ask each reply its own way · 2 of 3 asked")
    expect(chat.page.locator(".fork-hint")).to_contain_text("3 replies, each asked its own way")
    for at, label in enumerate(["asked: Answer in one word.", "asked: as the others", "asked: Answer in French."]):
        expect(chat.cards.nth(at).locator("header .variation")).to_have_text(label)
    stored = [m for m in chat.stored()["messages"] if m["role"] == "assistant"]
    assert [m.get("variation") for m in stored] == [{"instruction": "Answer in one word."}, {},
                                                   {"instruction": "Answer in French."}]
    # the history, computed once for all three: the one asked nothing more finds all of it (its prompt is the history
    # and the reply's header); the others too, and the start of their turns where those begin alike
    history = stored[1]["stats"]["prompt_tokens"] - 4
    assert stored[1]["stats"]["cached_tokens"] == history
    assert all(history <= m["stats"]["cached_tokens"] < m["stats"]["prompt_tokens"] for m in stored)
    assert_fits(page)
    chat.cards.nth(2).locator("button.pick").click()
    expect(chat.cards).to_have_count(0)
    expect(chat.messages.nth(1).locator("header .variation")).to_have_text("asked: Answer in French.")


def test_a_preset_fills_the_fields_and_the_fields_shown_can_be_saved_as_one(chat):
    chat.create_chat()
    fields = open_panel(chat, 2)
    page = chat.page
    page.locator("#fork-panel button.preset", has_text="shorter / longer / as a list").click()
    expect(fields).to_have_count(3)
    assert [fields.nth(i).input_value() for i in range(3)] == ["Shorter.", "Longer.", "As a list."]
    assert page.input_value("#replies") == "3"
    fields.nth(2).fill("In French.")
    page.locator("#fork-panel button.save-preset").click()
    expect(page.locator("#fork-panel button.preset", has_text="shorter / longer / in french")).to_have_count(1)
    page.reload()  # a page loaded again: kept in this browser
    expect(page).to_have_title(re.compile(r" · localchat$"))  # the chat shown, its Fork box at 1 again
    open_panel(chat, 2)
    expect(page.locator("#fork-panel button.preset", has_text="shorter / longer / in french")).to_have_count(1)
    page.locator("#fork-keep").check()
    page.locator("#fork-panel button.preset", has_text="shorter / longer / in french").click()
    page.fill("#message", "Tell me about tea.")
    page.press("#message", "Enter")
    chat.wait_replies()
    stored = [m for m in chat.stored()["messages"] if m["role"] == "assistant"]
    assert [m["variation"] for m in stored] == [{"instruction": i, "keep": True}
                                               for i in ("Shorter.", "Longer.", "In French.")]


def test_the_chat_list_shows_warmth_and_pins_a_chat(chat_at_both_sizes):
    chat = chat_at_both_sizes
    conversation_id = chat.create_chat()
    chat.send("What is a cat?")
    chat.wait_replies()
    wait_until(lambda: chat.stored()["conversation"]["title"] != "What is a cat?")  # the model named the chat
    expect(chat.page.locator("#chat-title")).to_have_text(chat.stored()["conversation"]["title"])
    chat.show_sidebar()
    item = chat.page.locator(f'#chats li[data-id="{conversation_id}"]')
    expect(item.locator(".chat-warmth")).to_have_text("● warm · instant")  # kept when the chat was named
    assert "tokens of history" in item.locator(".chat-warmth").get_attribute("title")
    item.locator("button.pin").click()
    expect(item).to_have_class("chat current pinned")
    expect(item.locator("button.pin")).to_have_attribute("aria-pressed", "true")
    assert chat.api.get("/api/conversations").json()[0]["pinned"] is True
    item.locator("button.pin").click()
    expect(item.locator("button.pin")).to_have_attribute("aria-pressed", "false")
    assert not next(c for c in chat.api.get("/api/conversations").json() if c["id"] == conversation_id)["pinned"]
    assert_fits(chat.page)
