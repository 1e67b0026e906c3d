"""The web UI on a phone (390x844): the chat list and the branch tree are drawers, the header's buttons a menu; each
closes on Escape, on a tap outside it and on a choice in it. A whole chat is had there, every control in sight when
it is used."""

from collections.abc import Iterator

import pytest
from playwright.sync_api import Locator, expect
from webui_page import FAST, REPLY_TIMEOUT_MS, ChatPage, assert_fits, expect_within_width, new_page, wait_until

from support import stream_api

pytestmark = pytest.mark.slow  # headless chromium against a real `localchat serve`: left out of `./dev test --fast`

PHONE = (390, 844)


@pytest.fixture
def phone(browser, server, api) -> Iterator[ChatPage]:
    with new_page(browser, *PHONE) as page:
        yield ChatPage(page, server, api).sign_in()


def use(control: Locator) -> None:
    """Click a control once it is wholly on screen, as a thumb would."""
    control.scroll_into_view_if_needed()
    expect(control).to_be_in_viewport(ratio=1)
    control.click()


def test_drawers_and_menu_close_on_escape_a_tap_outside_or_a_choice(phone, api):
    first, second = (api.post("/api/conversations", json={"title": title, "settings": {**FAST, "max_tokens": 4}})
                     .json()["id"] for title in ["first", "second"])
    stream_api(api, f"/api/conversations/{second}/messages", {"content": "Hi."})
    page = phone.page
    phone.open(first)
    sidebar = page.locator("#sidebar")
    expect(sidebar).to_be_hidden()
    page.click("#open-sidebar")
    expect(sidebar).to_be_in_viewport(ratio=1)
    page.keyboard.press("Escape")
    expect(sidebar).to_be_hidden()
    page.keyboard.press("Control+k")  # searching opens it too
    expect(page.locator("#search")).to_be_focused()
    expect(sidebar).to_be_in_viewport(ratio=1)
    page.keyboard.press("Escape")
    expect(sidebar).to_be_hidden()
    page.click("#open-sidebar")
    page.mouse.click(PHONE[0] - 10, PHONE[1] // 2)  # on the scrim, right of the drawer
    expect(sidebar).to_be_hidden()
    page.click("#open-sidebar")
    page.locator(f'#chats li[data-id="{second}"] .title').click()
    expect(sidebar).to_be_hidden()
    expect(phone.messages).to_have_count(2)
    assert phone.conversation_id == second

    menu = page.locator("#chat-tools")
    page.click("#open-menu")
    expect(menu).to_be_in_viewport(ratio=1)
    page.keyboard.press("Escape")
    expect(menu).to_be_hidden()
    page.click("#open-menu")
    page.mouse.click(PHONE[0] // 2, PHONE[1] // 2)
    expect(menu).to_be_hidden()
    page.click("#open-menu")
    page.click("#toggle-branches")
    expect(menu).to_be_hidden()

    tree = page.locator("#branches")
    expect(tree).to_be_in_viewport(ratio=1)
    page.mouse.click(10, PHONE[1] // 2)  # on the scrim, left of the drawer
    expect(tree).to_be_hidden()
    phone.use_tool("toggle-branches")
    page.keyboard.press("Escape")
    expect(tree).to_be_hidden()
    phone.use_tool("toggle-branches")
    tree.locator(".node.user button").click()
    expect(tree).to_be_hidden()
    wait_until(lambda: phone.stored()["conversation"]["active_leaf"] is not None)
    assert_fits(page)


def test_a_chat_on_a_phone(phone):
    page = phone.page
    phone.create_chat(max_tokens=3000, ignore_eos=True)  # still streaming when the page is checked, on any machine
    page.fill("#message", "Tell me a long story about a fruit.")
    use(page.locator("#send"))
    expect(page.locator("#thread .message.assistant.streaming")).to_have_count(1, timeout=REPLY_TIMEOUT_MS)
    expect(page.locator("#stop")).to_be_in_viewport(ratio=1)
    assert_fits(page)
    use(page.locator("#stop"))
    phone.wait_replies()

    phone.create_chat(temperature=0.9, max_tokens=64, seed=1)
    page.fill("#message", "Tell me a long story about a fruit.")
    use(page.locator("#send"))
    phone.wait_replies()
    assert_fits(page)

    use(phone.messages.nth(1).locator("button.regenerate"))
    phone.wait_replies()
    second = phone.messages.nth(1)
    expect(second.locator(".switcher .position")).to_have_text("2/2")
    use(second.locator("button.previous"))
    expect(phone.messages.nth(1).locator(".switcher .position")).to_have_text("1/2")

    fork = page.get_by_label("Fork")
    use(fork)
    fork.fill("3")
    page.fill("#message", "Why that one?")
    use(page.locator("#send"))
    expect(phone.cards).to_have_count(3, timeout=REPLY_TIMEOUT_MS)
    expect(fork).to_have_value("3")  # kept for the chat's next message
    phone.wait_replies()
    expect(phone.cards.last.locator("button.pick")).to_be_in_viewport(ratio=1)  # the fork's end is in sight
    assert_fits(page)
    picked = phone.cards.first.get_attribute("data-id")
    use(phone.cards.first.locator("button.pick"))
    expect(phone.cards).to_have_count(0)
    assert phone.shown_ids()[-1] == picked

    phone.use_tool("settings")
    dialog = page.locator("#settings-dialog")
    temperature = dialog.locator('input[name="temperature"]')
    use(temperature)
    temperature.fill("0.5")
    use(dialog.locator('button[value="save"]'))
    expect(dialog).to_be_hidden()
    assert phone.stored()["conversation"]["settings"]["temperature"] == 0.5
    assert_fits(page)


LONG_NAME = "quarterly-report-of-the-northern-region-2026-final-version.md"


def test_document_chips_and_the_message_box_fit_a_phone(phone, api):
    """The chips of a chat's documents, of a message's and of those attached wrap within the screen (a long name cut
    with an ellipsis, its chip whole), and the message box's hint is one line."""
    page = phone.page
    start, carried = (api.post("/api/documents", files={"file": (name, b"Sales rose 12% this quarter. " * 20)})
                      .json()["id"] for name in [LONG_NAME, "notes-" + LONG_NAME])
    conversation = api.post("/api/conversations", json={"settings": {**FAST, "max_tokens": 4},
                                                        "documents": [start]}).json()
    stream_api(api, f"/api/conversations/{conversation['id']}/messages",
               {"content": "Summarize.", "documents": [carried], "reply": False})
    phone.open(conversation["id"])
    page.set_input_files("#attach-input", files=[{"name": f"{n}-{LONG_NAME}", "mimeType": "text/plain",
                                                  "buffer": b"Notes."} for n in range(3)])
    expect(page.locator("#attachments .document-chip")).to_have_count(3)
    expect(page.get_by_text("uploading…")).to_have_count(0)
    chips = page.locator(".document-chip")
    expect(chips).to_have_count(5)
    for chip in chips.all():
        chip.scroll_into_view_if_needed()
        expect_within_width(page, chip)
        assert chip.evaluate("c => c.scrollWidth <= c.clientWidth"), "the chip's content overflows it"
        name = chip.locator(".document-name")
        expect(name).to_have_css("text-overflow", "ellipsis")
        expect_within_width(page, name)
    assert_fits(page)

    message = page.locator("#message")
    expect(message).to_have_attribute("placeholder", "Message")
    one_line = message.evaluate("""m => {
        const style = getComputedStyle(m);
        const measure = document.createElement("canvas").getContext("2d");
        measure.font = style.font;
        return measure.measureText(m.placeholder).width
            <= m.clientWidth - parseFloat(style.paddingLeft) - parseFloat(style.paddingRight);
    }""")
    assert one_line, "the placeholder wraps"
    page.set_viewport_size({"width": 1440, "height": 900})  # a laptop's wider box has room for the whole hint
    expect(message).to_have_attribute("placeholder", "Message (Enter sends)")
