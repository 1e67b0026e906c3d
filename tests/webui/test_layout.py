"""The web UI at phone, tablet and desktop sizes, light and dark: the page never scrolls sideways, and every control
is inside the window when it is used (on a narrow screen the chat list is a drawer and the header's buttons a menu).
"""

import pytest
from playwright.sync_api import Locator, expect
from webui_page import BACKGROUNDS, FAST, ChatPage, assert_fits, new_page

from support import stream_api

pytestmark = pytest.mark.slow  # headless chromium against a real `localchat serve`: left out of `./dev test --fast`

SIZES = {"phone": (390, 844), "tablet": (768, 1024), "desktop": (1440, 900)}
LONG_TITLE = "A chat about " + "very " * 20 + "long titles"
TOOLS = ["settings", "toggle-branches", "export-markdown", "export-json"]


@pytest.fixture(scope="module")
def long_chat(server) -> str:
    """A chat with a long title and a regenerated reply (its switcher shows 2/2), made once for these tests."""
    with server.client() as api:
        conversation = api.post("/api/conversations",
                                json={"title": LONG_TITLE, "settings": {**FAST, "max_tokens": 8}}).json()
        messages = f"/api/conversations/{conversation['id']}/messages"
        reply = stream_api(api, messages, {"content": "Write a haiku about the sea."})[-1]["message"]
        stream_api(api, f"{messages}/{reply['id']}/regenerate", {})
    return conversation["id"]


def expect_cut_with_ellipsis(title: Locator, text: str) -> None:
    expect(title).to_have_text(text)
    expect(title).to_have_attribute("title", text)
    expect(title).to_have_css("text-overflow", "ellipsis")
    assert title.evaluate("e => e.scrollWidth > e.clientWidth"), "the title is not cut"


def expect_inside(inner: Locator, outer: Locator) -> None:
    """`inner`'s box lies within `outer`'s."""
    box, frame = inner.bounding_box(), outer.bounding_box()
    assert (frame["x"] <= box["x"] and box["x"] + box["width"] <= frame["x"] + frame["width"]
            and frame["y"] <= box["y"] and box["y"] + box["height"] <= frame["y"] + frame["height"]), (box, frame)


@pytest.mark.parametrize("color_scheme", ["light", "dark"])
@pytest.mark.parametrize("size", SIZES)
def test_every_control_fits(browser, server, api, long_chat, size, color_scheme):
    with new_page(browser, *SIZES[size], color_scheme=color_scheme) as page:
        chat = ChatPage(page, server, api).sign_in()
        chat.open(long_chat)
        assert page.evaluate("getComputedStyle(document.body).backgroundColor") == BACKGROUNDS[color_scheme]
        assert_fits(page)
        for control in ["#chat-title", "#message", "#replies", "#send"]:
            expect(page.locator(control)).to_be_in_viewport(ratio=1)
        expect_cut_with_ellipsis(page.locator("#chat-title"), LONG_TITLE)
        reply = chat.messages.nth(1)
        reply.scroll_into_view_if_needed()
        for control in ["button.previous", ".position", "button.copy-message", "button.regenerate"]:
            reply.locator(control).scroll_into_view_if_needed()  # (the actions are under the text)
            expect(reply.locator(control)).to_be_in_viewport(ratio=1)
        for tool in TOOLS:
            chat.show_tool(tool)
            page.keyboard.press("Escape")  # closes the menu where there is one

        chat.show_sidebar()
        current = page.locator("#chats li.current")
        for control in [page.locator("#new-chat"), page.locator("#search"), current.locator(".title"),
                        current.locator("button.rename"), current.locator("button.delete"), page.locator("#model"),
                        page.locator("#help")]:
            expect(control).to_be_in_viewport(ratio=1)
        expect_cut_with_ellipsis(current.locator(".title"), LONG_TITLE)
        assert_fits(page)
        page.keyboard.press("Escape")  # closes the drawer where it is one
        expect(page.locator("#send")).to_be_in_viewport(ratio=1)

        chat.use_tool("settings")
        dialog = page.locator("#settings-dialog")
        # a thinking model's settings are hidden: the shared server's model does not think
        fields = dialog.locator(":is(input, textarea, select, button):visible")
        # 9 numbers, system prompt, context policy, stop strings, JSON mode, tools, tool choice, 2 buttons
        assert fields.count() == 17
        for field in fields.all():  # each whole inside the dialog, where the dialog scrolls to it
            field.scroll_into_view_if_needed()
            expect(field).to_be_in_viewport(ratio=1)
            expect_inside(field, dialog)
        assert dialog.evaluate("d => d.scrollWidth <= d.clientWidth")
        dialog.locator('button[value="cancel"]').click()
        expect(dialog).to_be_hidden()

        chat.use_tool("toggle-branches")
        branches = page.locator("#branches")
        expect(branches.locator(".node")).to_have_count(3)
        expect(branches).to_be_in_viewport(ratio=1)
        for node in branches.locator(".node button").all():
            expect(node).to_be_in_viewport(ratio=1)
        assert_fits(page)
