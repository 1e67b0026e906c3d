"""Driving the web UI as a user does, for the browser tests and the screenshot script."""

import time
from collections.abc import Callable, Iterator
from contextlib import contextmanager

import httpx
from playwright.sync_api import Browser, Locator, Page, Playwright, expect

from support import Server

CHROMIUM = "/usr/bin/chromium"  # Debian's; Playwright's own browser download needs the network
REPLY_TIMEOUT_MS = 60_000
FAST = {"temperature": 0.0, "max_tokens": 12}  # short, reproducible replies
BACKGROUNDS = {"light": "rgb(255, 255, 255)", "dark": "rgb(22, 24, 29)"}  # the page's, by color scheme


def launch_chromium(playwright: Playwright) -> Browser:
    return playwright.chromium.launch(executable_path=CHROMIUM)


@contextmanager
def new_page(browser: Browser, width: int = 1280, height: int = 800, color_scheme: str = "light") -> Iterator[Page]:
    """A page of its own browser context (no login cookie yet) that must raise no uncaught error; no animations."""
    context = browser.new_context(viewport={"width": width, "height": height}, color_scheme=color_scheme,
                                  reduced_motion="reduce")
    page = context.new_page()
    errors = []
    page.on("pageerror", lambda error: errors.append(error))
    try:
        yield page
    finally:
        context.close()
    assert not errors, f"uncaught errors in the page: {errors}"


def assert_fits(page: Page) -> None:
    """The page does not scroll sideways."""
    width, viewport = page.evaluate("[document.documentElement.scrollWidth, window.innerWidth]")
    assert width <= viewport, f"the page is {width} px wide in a {viewport} px window"


def expect_within_width(page: Page, locator: Locator) -> None:
    box = locator.bounding_box()
    assert 0 <= box["x"] and box["x"] + box["width"] <= page.viewport_size["width"], box


def wait_until(condition: Callable[[], bool], timeout: float = 10.0) -> None:
    """Poll a condition outside the page (what the server stored)."""
    deadline = time.monotonic() + timeout
    while not condition():
        assert time.monotonic() < deadline, "the condition did not hold in time"
        time.sleep(0.05)


class ChatPage:
    def __init__(self, page: Page, server: Server, api: httpx.Client):
        self.page, self.server, self.api = page, server, api

    def login_url(self) -> str:
        response = self.api.post("/api/auth/login-code")
        assert response.status_code == 201, response.text
        return response.json()["url"]

    def sign_in(self) -> "ChatPage":
        self.page.goto(self.login_url())
        expect(self.page.locator("#app")).to_be_visible()
        return self

    # --- chats ---

    def create_chat(self, **settings) -> str:
        """A chat made through the API with the given sampling settings (FAST by default), opened in the page;
        its first message names it."""
        response = self.api.post("/api/conversations", json={"settings": {**FAST, **settings}})
        assert response.status_code == 201, response.text
        conversation_id = response.json()["id"]
        self.open(conversation_id)
        return conversation_id

    def open(self, conversation_id: str) -> None:
        self.page.goto(f"{self.server.url}/#{conversation_id}")
        expect(self.page.locator("#app")).to_be_visible()
        expect(self.page.locator(f'#chats li.current[data-id="{conversation_id}"]')).to_have_count(1)

    @property
    def conversation_id(self) -> str:
        return self.page.evaluate("decodeURIComponent(location.hash.slice(1))")

    def stored(self) -> dict:
        """The open chat as the server has it: {conversation, messages}."""
        return self.api.get(f"/api/conversations/{self.conversation_id}").json()

    # --- what a narrow screen folds away: the chat list into a drawer, the header's buttons into a menu ---

    def show_sidebar(self) -> None:
        """The chat list, through its drawer where it is one."""
        if self.page.locator("#open-sidebar").is_visible():
            self.page.click("#open-sidebar")
        expect(self.page.locator("#sidebar")).to_be_in_viewport(ratio=1)

    def show_tool(self, tool_id: str) -> Locator:
        """One of the header's buttons (settings, toggle-branches, export-markdown, export-json), through the menu
        where they are in one."""
        if self.page.locator("#open-menu").is_visible():
            self.page.click("#open-menu")
        tool = self.page.locator(f"#{tool_id}")
        expect(tool).to_be_in_viewport(ratio=1)
        return tool

    def use_tool(self, tool_id: str) -> None:
        self.show_tool(tool_id).click()

    # --- writing ---

    def send(self, text: str, replies: int = 1) -> None:
        self.page.fill("#replies", str(replies))
        self.page.fill("#message", text)
        self.page.press("#message", "Enter")

    def wait_replies(self) -> None:
        """Until the replies being written are finished and saved."""
        expect(self.page.locator("#send")).to_be_visible(timeout=REPLY_TIMEOUT_MS)
        expect(self.page.locator(".message.streaming")).to_have_count(0)

    # --- what is shown ---

    @property
    def messages(self) -> Locator:
        """The messages of the shown branch (fork cards excluded)."""
        return self.page.locator("#thread > .message")

    @property
    def cards(self) -> Locator:
        return self.page.locator("#thread .fork .card")

    def shown_ids(self) -> list[str]:
        return self.messages.evaluate_all("nodes => nodes.map(n => n.dataset.id)")

    def message(self, message_id: str) -> Locator:
        return self.page.locator(f'#thread > .message[data-id="{message_id}"]')
