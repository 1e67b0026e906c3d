"""On a phone (390x844) every control is a target a finger hits: at least 44x44 CSS px (its label's line for a
checkbox), on the main screen of a branched chat, in its menu, in the chat list's and the branch tree's drawers and in
the Settings dialog. The branch tree's drawer has a close button, and Escape closes it."""

from collections.abc import Iterator

import pytest
from playwright.sync_api import expect
from webui_page import FAST, SIZES, ChatPage, new_page, touch_targets

from support import stream_api

pytestmark = pytest.mark.slow  # headless chromium against a real `localchat serve`: left out of `./dev test --fast`


@pytest.fixture(scope="module")
def branched_chat(server) -> str:
    """A chat whose reply was regenerated (its switcher shows 2/2), made once for these tests."""
    with server.client() as api:
        conversation = api.post("/api/conversations", json={"settings": {**FAST, "max_tokens": 8}}).json()
        messages = f"/api/conversations/{conversation['id']}/messages"
        reply = stream_api(api, messages, {"content": "Name a colour."})[-1]["message"]
        stream_api(api, f"{messages}/{reply['id']}/regenerate", {})
    return conversation["id"]


@pytest.fixture
def phone(browser, server, api, branched_chat) -> Iterator[ChatPage]:
    with new_page(browser, *SIZES["phone"]) as page:
        chat = ChatPage(page, server, api).sign_in()
        chat.open(branched_chat)
        yield chat


def expect_big_enough(page, root: str, expected: list[str]) -> None:
    """Every visible control under `root` is at least 44x44 px, and among those measured are the `expected` (a part
    of each one's description: so that a control hidden by mistake does not pass unmeasured)."""
    measured, small = touch_targets(page, root)
    assert not small, f"smaller than 44x44 px under {root}: {small}"
    for control in expected:
        assert any(control in name for name in measured), (control, measured)


def test_every_control_of_a_branched_chat_is_a_touch_target(phone):
    page = phone.page
    # a reply with a code block too (rendered as a reply's Markdown is), for its copy button
    page.evaluate("""async () => {
        const { renderMarkdown } = await import('/static/markdown.js');
        document.querySelector('#thread .message.assistant .content').append(renderMarkdown('```sh\\nls\\n```'));
    }""")
    expect(phone.messages.nth(1).locator(".switcher .position")).to_have_text("2/2")
    expect_big_enough(page, "body", [
        "button#open-sidebar", "button#open-menu", "button.previous", "button.next", "button.copy-message",
        "button.regenerate", "button.edit", "button.copy-code", "button.chip", "button#attach", "textarea#message",
        "input#replies", "button#send"])

    page.click("#open-menu")
    expect(page.locator("#chat-tools")).to_be_visible()
    expect_big_enough(page, "#chat-tools", ["button#settings", "button#toggle-branches", "a#export-markdown",
                                            "a#export-json"])
    page.keyboard.press("Escape")

    phone.show_sidebar()
    expect_big_enough(page, "#sidebar", ["button#new-chat", "input#search", "button.open-chat", "button.rename",
                                         "button.delete", "select#model", "select#theme", "button#help"])
    page.keyboard.press("Escape")

    phone.use_tool("toggle-branches")
    expect(page.locator("#branches .node")).to_have_count(3)
    expect_big_enough(page, "#branches", ["button#close-branches", "You", "AI"])
    page.keyboard.press("Escape")

    phone.use_tool("settings")
    expect(page.locator("#settings-dialog")).to_be_visible()
    expect_big_enough(page, "#settings-dialog", [
        'textarea. "system_prompt"', 'input. "temperature"', 'input. "json_mode"', 'select. "context_overflow"',
        '"Save"', '"Cancel"'])


def test_the_branch_drawer_closes_by_its_button_and_by_escape(phone):
    page, tree = phone.page, phone.page.locator("#branches")
    phone.use_tool("toggle-branches")
    expect(tree).to_be_in_viewport(ratio=1)
    close = tree.locator("#close-branches")
    expect(close).to_be_in_viewport(ratio=1)
    expect(close).to_have_accessible_name("Close the branch tree")
    close.click()
    expect(tree).to_be_hidden()
    expect(page.locator("#scrim")).to_be_hidden()

    phone.use_tool("toggle-branches")
    expect(tree).to_be_in_viewport(ratio=1)
    page.keyboard.press("Escape")
    expect(tree).to_be_hidden()
    expect(page.locator("#send")).to_be_in_viewport(ratio=1)


def test_the_branch_panel_closes_by_its_button_on_a_laptop(browser, server, api, branched_chat):
    with new_page(browser, *SIZES["desktop"]) as page:
        chat = ChatPage(page, server, api).sign_in()
        chat.open(branched_chat)
        page.click("#toggle-branches")
        tree = page.locator("#branches")
        expect(tree.locator(".node")).to_have_count(3)
        tree.locator("#close-branches").click()
        expect(tree).to_be_hidden()
        expect(page.locator("#toggle-branches")).to_have_attribute("aria-pressed", "false")
