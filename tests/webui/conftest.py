"""Fixtures of the browser tests: one headless Chromium for each test module, against the session's shared
`localchat serve` (tests/conftest.py); each test gets a fresh browser context (no cookie) and signs in through a
one-time login URL."""

from collections.abc import Iterator

import pytest
from playwright.sync_api import Browser, Page, sync_playwright
from webui_page import SIZES, ChatPage, launch_chromium, new_page


@pytest.fixture(scope="module")
def browser() -> Iterator[Browser]:
    """Per module, not per session: Playwright's sync API keeps an event loop running in this thread while it is
    open, and a test worker runs the asyncio tests of other modules (the terminal UI's) between browser modules."""
    with sync_playwright() as playwright:
        browser = launch_chromium(playwright)
        yield browser
        browser.close()


@pytest.fixture
def page(browser) -> Iterator[Page]:
    """A page of its own browser context: no login cookie yet."""
    with new_page(browser) as page:
        yield page


@pytest.fixture
def chat(page, server, api) -> ChatPage:
    """The signed-in web UI."""
    return ChatPage(page, server, api).sign_in()


@pytest.fixture(params=SIZES)
def chat_at_both_sizes(request, browser, server, api) -> Iterator[ChatPage]:
    """The signed-in web UI on a laptop's screen (1440x900), then on a phone's (390x844)."""
    with new_page(browser, *SIZES[request.param]) as page:
        yield ChatPage(page, server, api).sign_in()
