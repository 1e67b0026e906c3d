"""Driving the web UI as a user does, for the browser tests and the screenshot script."""

import re
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


# the sizes issue 32 compared the web UI at: a laptop and a phone
SIZES = {"desktop": (1440, 900), "phone": (390, 844)}
TOUCH_TARGET_PX = 44  # the least width and height of what a finger taps (WCAG 2.5.5, Apple's and Google's guides)

# Every visible control under `root`, measured: a checkbox by its label (the line a tap on which ticks it). Links in
# a reply's text are left out, as WCAG's target size rule leaves out links inside a sentence.
MEASURE_TARGETS = """([root, minimum]) => {
    const controls = 'a[href], button, input:not([type="hidden"]), select, textarea, summary, ' +
        '[tabindex]:not([tabindex="-1"])';
    const measured = [], small = [];
    for (const control of document.querySelector(root).querySelectorAll(controls)) {
        if (!control.checkVisibility({ checkOpacity: true, checkVisibilityCSS: true })) continue;
        if (control.matches('.content a')) continue;
        const target = ['checkbox', 'radio'].includes(control.type) ? control.closest('label') ?? control : control;
        const box = target.getBoundingClientRect();
        const name = `${control.tagName.toLowerCase()}${control.id ? '#' + control.id : ''}.${control.className}` +
            ` "${(control.name || control.textContent || control.placeholder || '').trim().slice(0, 20)}"`;
        measured.push(name);
        if (box.width < minimum || box.height < minimum) small.push(`${name}: ${box.width}x${box.height}`);
    }
    return { measured, small };
}"""


def touch_targets(page: Page, root: str = "body") -> tuple[list[str], list[str]]:
    """The visible controls under `root`, and those of them smaller than TOUCH_TARGET_PX either way (with their
    size)."""
    result = page.evaluate(MEASURE_TARGETS, [root, TOUCH_TARGET_PX])
    return result["measured"], result["small"]


def luminance(css_color: str) -> float:
    """The relative luminance (WCAG 2) of a computed colour, "rgb(r, g, b)"."""
    numbers = re.findall(r"[\d.]+", css_color)
    assert css_color.startswith("rgb(") and len(numbers) == 3, f"not an opaque colour: {css_color}"
    channels = [float(c) / 255 for c in numbers]
    linear = [c / 12.92 if c <= 0.04045 else ((c + 0.055) / 1.055) ** 2.4 for c in channels]
    return 0.2126 * linear[0] + 0.7152 * linear[1] + 0.0722 * linear[2]


def contrast(color: str, background: str) -> float:
    """The contrast ratio (WCAG 2) of two opaque computed colours: 1 to 21."""
    light, dark = sorted([luminance(color), luminance(background)], reverse=True)
    return (light + 0.05) / (dark + 0.05)


def colors(locator: Locator) -> tuple[str, str]:
    """An element's computed text colour and background colour (the background of the nearest element that has one:
    what its text is seen on)."""
    return locator.evaluate("""e => {
        let back = e;
        while (back && getComputedStyle(back).backgroundColor === 'rgba(0, 0, 0, 0)') back = back.parentElement;
        return [getComputedStyle(e).color, getComputedStyle(back ?? document.body).backgroundColor];
    }""")


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

    def create_chat(self, system_prompt: str = "", **settings) -> str:
        """A chat made through the API with the given sampling settings (FAST by default) and system prompt (none
        by default, not the model's default one: the template's own, which the tests' token counts assume), opened in
        the page; its first message names it."""
        response = self.api.post("/api/conversations",
                                 json={"system_prompt": system_prompt, "settings": {**FAST, **settings}})
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
