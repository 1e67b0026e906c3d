"""A thinking model in the web UI (tests/conftest.py's thinking_server: every reply of tiny-r1-thinking starts
inside its thinking, which lasts until its budget or until it is told to answer): the thinking streams in a
collapsed block above the answer ("Thinking… 12 tokens", then "Thought for 0.4 s"), which opens to read it; "Answer
now" (and Alt+A) ends it, Esc stops the whole reply; each reply of a fork or a branch keeps its own; the settings
dialog sets whether it thinks and for how long."""

import re
from collections.abc import Iterator

import httpx
import pytest
from playwright.sync_api import Locator, expect
from webui_page import REPLY_TIMEOUT_MS, ChatPage, assert_fits, expect_within_width, new_page, wait_until

from support import stream_api

pytestmark = pytest.mark.slow  # headless chromium against a real `localchat serve`: left out of `./dev test --fast`

SIZES = {"phone": (390, 844), "desktop": (1440, 900)}
# a reply that thinks until it is told to answer (no budget): the page shows it thinking some 25 tokens in, and it
# would think on for most of the model's 2,048-token context (400 tokens once ended before the click, on a machine
# where the tiny model writes several hundred a second)
LONG_THINKING = {"temperature": 1.0, "seed": 3, "max_tokens": 2000, "thinking_token_budget": None}
BUDGET = 6  # a reply that thinks 6 tokens, then answers
SHORT_THINKING = {"temperature": 1.0, "seed": 5, "max_tokens": 24, "thinking_token_budget": BUDGET}
THINKING = re.compile(r"^Thinking… \d+ tokens$")
THOUGHT = re.compile(r"^Thought for \d+(\.\d)? s · \d+ tokens$")


@pytest.fixture
def thinking_api(thinking_server) -> Iterator[httpx.Client]:
    with thinking_server.client() as client:
        yield client


@pytest.fixture
def thinking_chat(page, thinking_server, thinking_api) -> ChatPage:
    """The signed-in web UI of the thinking model's server."""
    return ChatPage(page, thinking_server, thinking_api).sign_in()


def thinking_block(message: Locator) -> Locator:
    return message.locator("details.thinking")


def reasoning_shown(message: Locator) -> str:
    return message.locator(".reasoning").evaluate("e => e.textContent")


def stored_reply(chat: ChatPage, message_id: str) -> dict:
    return next(m for m in chat.stored()["messages"] if m["id"] == message_id)


def expect_thought(message: Locator, stored: dict) -> None:
    """The reply's block is closed and says how long it thought; opened, it shows the stored thinking."""
    block = thinking_block(message)
    expect(block).not_to_have_attribute("open", "")
    expect(block.locator("summary")).to_have_text(THOUGHT)
    expect(block.locator("summary")).to_contain_text(f"· {stored['stats']['reasoning_tokens']} tokens")
    expect(block.locator(".reasoning")).to_be_hidden()
    block.locator("summary").click()
    expect(block).to_have_attribute("open", "")
    expect(block.locator(".reasoning")).to_be_visible()
    assert reasoning_shown(message) == stored["reasoning_content"]


def start_thinking(chat: ChatPage, replies: int = 1) -> Locator:
    """Sends a message whose replies think until told to answer; the shown reply once it thinks."""
    chat.create_chat(**LONG_THINKING)
    chat.send("Why is the sky blue?", replies)
    reply = chat.page.locator("#thread .message.assistant").first
    expect(thinking_block(reply).locator("summary")).to_have_text(THINKING, timeout=REPLY_TIMEOUT_MS)
    return reply


@pytest.mark.parametrize("size", SIZES)
def test_answer_now_ends_the_thinking_and_the_answer_follows(browser, thinking_server, thinking_api, size):
    with new_page(browser, *SIZES[size]) as page:
        chat = ChatPage(page, thinking_server, thinking_api).sign_in()
        reply = start_thinking(chat)
        block = thinking_block(reply)
        expect(block).to_have_class(re.compile(r"\bactive\b"))
        expect(block).not_to_have_attribute("open", "")  # collapsed while it streams
        answer_now = page.locator("#answer-now")
        expect(answer_now).to_be_in_viewport(ratio=1)
        expect(page.locator("#stop")).to_be_in_viewport(ratio=1)
        assert_fits(page)
        page.screenshot(path=f"/tmp/webui-thinking-streaming-{size}.png")

        with page.expect_response(re.compile(r"/end-thinking$")) as ended:
            answer_now.click()
        assert ended.value.json() == {"ended": [reply.get_attribute("data-id")]}
        expect(reply.locator(".content")).not_to_be_empty(timeout=REPLY_TIMEOUT_MS)  # the answer follows
        expect(answer_now).to_be_hidden()
        expect(block.locator("summary")).to_have_text(re.compile(r"^Thought for "))
        page.keyboard.press("Escape")  # the answer has begun: the rest of its 2,000 tokens proves nothing more
        chat.wait_replies()
        stored = stored_reply(chat, reply.get_attribute("data-id"))
        assert stored["reasoning_content"] and stored["content"].strip()
        assert stored["stats"]["reasoning_tokens"] > 0 and stored["stats"]["thinking_s"] is not None
        expect_thought(reply, stored)
        assert_fits(page)


def test_alt_a_ends_the_thinking_of_each_forked_reply_and_each_card_keeps_its_own(thinking_chat):
    chat, page = thinking_chat, thinking_chat.page
    start_thinking(chat, replies=2)
    expect(page.locator("#answer-now")).to_be_visible()
    page.keyboard.press("Alt+a")
    for card in chat.cards.all():
        expect(card.locator(".content")).not_to_be_empty(timeout=REPLY_TIMEOUT_MS)
    page.keyboard.press("Escape")  # both answers have begun: the rest of their 2,000 tokens proves nothing more
    chat.wait_replies()
    expect(page.locator("#answer-now")).to_be_hidden()
    expect(chat.cards).to_have_count(2)
    for card in chat.cards.all():
        stored = stored_reply(chat, card.get_attribute("data-id"))
        assert stored["content"].strip(), "the reply answered"
        expect(card.locator(".content")).not_to_be_empty()
        expect_thought(card, stored)
    first, second = (reasoning_shown(card) for card in chat.cards.all())
    assert first != second


def test_esc_stops_the_whole_reply_while_it_thinks(thinking_chat):
    chat, page = thinking_chat, thinking_chat.page
    reply = start_thinking(chat)
    page.keyboard.press("Escape")
    chat.wait_replies()
    stored = stored_reply(chat, reply.get_attribute("data-id"))
    assert stored["stopped"] and stored["content"] == "" and stored["reasoning_content"]
    expect(page.locator("#answer-now")).to_be_hidden()
    expect(reply.locator(".stats")).to_contain_text("stopped")
    expect_thought(reply, stored)


def test_a_stored_chat_shows_each_branch_with_its_own_thinking(thinking_chat):
    chat, page = thinking_chat, thinking_chat.page
    chat.create_chat(**SHORT_THINKING)
    chat.send("Name a colour.")
    chat.wait_replies()
    first = chat.messages.nth(1)
    first_id = first.get_attribute("data-id")
    stored = stored_reply(chat, first_id)
    assert stored["stats"]["reasoning_tokens"] == BUDGET
    expect(first.locator(".content")).not_to_be_empty()
    expect_thought(first, stored)

    first.locator("button.regenerate").click()
    chat.wait_replies()
    second = chat.messages.nth(1)
    expect(second.locator(".switcher .position")).to_have_text("2/2")
    second_id = second.get_attribute("data-id")
    expect_thought(second, stored_reply(chat, second_id))

    page.reload()  # opened again: every block comes from the stored messages, closed
    expect(chat.messages.nth(1)).to_have_attribute("data-id", second_id)
    expect_thought(chat.messages.nth(1), stored_reply(chat, second_id))
    chat.messages.nth(1).locator("button.previous").click()
    expect(chat.messages.nth(1)).to_have_attribute("data-id", first_id)
    expect_thought(chat.messages.nth(1), stored)


def test_settings_set_whether_it_thinks_and_its_budget(thinking_chat):
    chat, page = thinking_chat, thinking_chat.page
    chat.create_chat()
    chat.use_tool("settings")
    dialog = page.locator("#settings-dialog")
    think = dialog.get_by_label("Think before answering")
    budget = dialog.locator('input[name="thinking_token_budget"]')
    expect(think).to_be_checked()
    expect(budget).to_have_value("")  # the server's default
    budget.fill(str(BUDGET))
    dialog.locator('button[value="save"]').click()
    expect(dialog).to_be_hidden()
    wait_until(lambda: chat.stored()["conversation"]["settings"]["thinking_token_budget"] == BUDGET)

    chat.use_tool("settings")
    expect(budget).to_have_value(str(BUDGET))
    think.uncheck()
    expect(budget).to_be_disabled()
    dialog.locator('button[value="save"]').click()
    expect(dialog).to_be_hidden()
    wait_until(lambda: chat.stored()["conversation"]["settings"]["enable_thinking"] is False)
    assert chat.stored()["conversation"]["settings"]["thinking_token_budget"] == BUDGET


@pytest.fixture(scope="module")
def branched_thinking_chat(thinking_server) -> str:
    """A chat of two thinking replies (a regenerated one: its switcher shows 2/2), made once for the layout test."""
    with thinking_server.client() as api:
        conversation = api.post("/api/conversations", json={"title": "Thinking about the sky",
                                                             "settings": SHORT_THINKING}).json()
        messages = f"/api/conversations/{conversation['id']}/messages"
        reply = stream_api(api, messages, {"content": "Why is the sky blue?"})[-1]["message"]
        stream_api(api, f"{messages}/{reply['id']}/regenerate", {})
    return conversation["id"]


@pytest.mark.parametrize("color_scheme", ["light", "dark"])
@pytest.mark.parametrize("size", SIZES)
def test_the_thinking_block_and_settings_fit(browser, thinking_server, thinking_api, branched_thinking_chat, size,
                                             color_scheme):
    with new_page(browser, *SIZES[size], color_scheme=color_scheme) as page:
        chat = ChatPage(page, thinking_server, thinking_api).sign_in()
        chat.open(branched_thinking_chat)
        reply = chat.messages.nth(1)
        thinking_block(reply).locator("summary").click()
        expect(reply.locator(".reasoning")).to_be_visible()
        for part in [thinking_block(reply).locator("summary"), reply.locator(".stats-line"),
                     reply.locator(".reasoning"), reply.locator(".content")]:
            expect_within_width(page, part)
        assert_fits(page)
        page.mouse.move(0, SIZES[size][1] - 1)  # no hover effects
        page.screenshot(path=f"/tmp/webui-thinking-{size}-{color_scheme}.png")

        chat.use_tool("settings")
        dialog = page.locator("#settings-dialog")
        thinking = dialog.locator("fieldset.thinking-settings")
        thinking.scroll_into_view_if_needed()
        expect(thinking).to_be_in_viewport(ratio=1)
        assert dialog.evaluate("d => d.scrollWidth <= d.clientWidth")
        page.screenshot(path=f"/tmp/webui-thinking-settings-{size}-{color_scheme}.png")
