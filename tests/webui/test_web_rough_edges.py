"""A newcomer's rough edges in the browser (issue 56): Esc closes the branch tree on a laptop, as its button's tooltip
says (and still stops a reply being written); on a phone the branch drawer does not open by itself because a laptop
left it open, and the row of chips shows that it scrolls."""

from collections.abc import Iterator

import pytest
from playwright.sync_api import expect
from webui_page import FAST, SIZES, ChatPage, new_page

from support import stream_api

pytestmark = pytest.mark.slow  # headless chromium against a real `localchat serve`: left out of `./dev test --fast`


def page_at(browser, server, api, size: str) -> Iterator[ChatPage]:
    with new_page(browser, *SIZES[size]) as page:
        yield ChatPage(page, server, api).sign_in()


@pytest.fixture
def desktop(browser, server, api) -> Iterator[ChatPage]:
    yield from page_at(browser, server, api, "desktop")


@pytest.fixture
def phone(browser, server, api) -> Iterator[ChatPage]:
    yield from page_at(browser, server, api, "phone")


def chat_with_a_reply(api) -> str:
    cid = api.post("/api/conversations", json={"settings": {**FAST, "max_tokens": 4}}).json()["id"]
    stream_api(api, f"/api/conversations/{cid}/messages", {"content": "Hi."})
    return cid


def test_escape_closes_the_branch_tree_on_a_laptop_and_still_stops_a_reply(desktop, api):
    desktop.open(chat_with_a_reply(api))
    page, tree = desktop.page, desktop.page.locator("#branches")
    page.click("#toggle-branches")
    expect(tree).to_be_visible()
    assert page.locator("#close-branches").get_attribute("title") == "Close the branch tree (Esc)"
    page.keyboard.press("Escape")
    expect(tree).to_be_hidden()
    assert page.evaluate("localStorage.getItem('localchat.branches')") == "closed"

    page.click("#toggle-branches")  # open while a long reply is written: Esc stops the reply first
    expect(tree).to_be_visible()
    api.patch(f"/api/conversations/{desktop.conversation_id}", json={"settings": {"max_tokens": 2000,
                                                                                 "ignore_eos": True}})
    desktop.send("Tell me a long story.")
    expect(page.locator("#thread .message.assistant.streaming .content")).not_to_be_empty()  # being written
    page.keyboard.press("Escape")
    desktop.wait_replies()
    assert desktop.stored()["messages"][-1]["stopped"]
    expect(tree).to_be_visible()
    page.keyboard.press("Escape")  # then the tree
    expect(tree).to_be_hidden()


def test_on_a_phone_the_branch_drawer_opens_only_when_asked_and_the_chips_show_they_scroll(phone, api):
    page = phone.page
    page.evaluate("localStorage.setItem('localchat.branches', 'open')")  # as a laptop left it
    phone.open(chat_with_a_reply(api))
    phone.send("And again?")
    phone.wait_replies()
    expect(page.locator("#branches")).to_be_hidden()  # the chat stays in sight
    expect(page.locator("#scrim")).to_be_hidden()

    chips = page.locator("#chat-summary")
    assert chips.evaluate("row => row.scrollWidth > row.clientWidth")  # more chips than the phone's width
    expect(chips).to_have_class("more-right")
    assert chips.evaluate("row => getComputedStyle(row).maskImage") != "none"  # it fades where it goes on
    chips.evaluate("row => row.scrollTo({ left: row.scrollWidth })")
    expect(chips).to_have_class("more-left")

    phone.use_tool("toggle-branches")  # asked for: it opens
    expect(page.locator("#branches")).to_be_in_viewport(ratio=1)
