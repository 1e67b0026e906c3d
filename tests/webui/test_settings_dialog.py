"""The Settings dialog at 1440x900 and 390x844: a checkbox sits beside its label on one line from the left, Save and
Cancel stay in sight however far the dialog scrolls, and a new chat not yet written has Settings too: its system
prompt answers the first message."""

import pytest
from playwright.sync_api import expect
from webui_page import REPLY_TIMEOUT_MS

pytestmark = pytest.mark.slow  # headless chromium against a real `localchat serve`: left out of `./dev test --fast`


def test_a_checkbox_sits_beside_its_label(chat_at_both_sizes):
    chat = chat_at_both_sizes
    chat.create_chat()
    chat.use_tool("settings")
    label = chat.page.locator("#settings-dialog label.check", has_text="Replies are JSON objects")
    box = label.locator('input[name="json_mode"]').bounding_box()
    line = label.bounding_box()
    text = label.evaluate("""l => {
        const range = document.createRange();
        range.selectNodeContents(l);
        range.setStartAfter(l.querySelector('input'));
        const r = range.getBoundingClientRect();
        return { x: r.x, y: r.y, height: r.height };
    }""")
    assert box["width"] <= 24 and box["height"] <= 24, box  # a checkbox's size, not the dialog's width
    assert box["x"] - line["x"] <= 1, (box, line)  # at the line's left
    assert 0 <= text["x"] - (box["x"] + box["width"]) <= 16, (box, text)  # its label right beside it
    assert abs((text["y"] + text["height"] / 2) - (box["y"] + box["height"] / 2)) <= 4, (box, text)  # one line
    label.click()  # the label's line ticks it
    expect(label.locator("input")).to_be_checked()


def test_save_and_cancel_stay_in_sight(chat_at_both_sizes):
    chat = chat_at_both_sizes
    chat.create_chat()
    chat.use_tool("settings")
    dialog = chat.page.locator("#settings-dialog")
    save, cancel = dialog.locator('button[value="save"]'), dialog.locator('button[value="cancel"]')
    for scrolled in ["top", "bottom"]:
        dialog.evaluate(f"d => {{ d.scrollTop = {'0' if scrolled == 'top' else 'd.scrollHeight'}; }}")
        for button in [save, cancel]:
            expect(button).to_be_in_viewport(ratio=1)
            assert button.evaluate("""b => {
                const r = b.getBoundingClientRect();
                return document.elementFromPoint(r.x + r.width / 2, r.y + r.height / 2) === b;
            }"""), f"{button} is covered when the dialog is scrolled to its {scrolled}"
    if chat.page.viewport_size["width"] < 600:  # on a phone the dialog is taller than the screen
        assert dialog.evaluate("d => d.scrollHeight > d.clientHeight")
    dialog.locator('textarea[name="tools"]').scroll_into_view_if_needed()  # a field scrolled to is not under them
    tools, footer = dialog.locator('textarea[name="tools"]').bounding_box(), save.bounding_box()
    assert tools["y"] + tools["height"] <= footer["y"], (tools, footer)
    save.click()
    expect(dialog).to_be_hidden()


def test_a_new_chat_has_settings_and_its_first_message_gets_them(chat_at_both_sizes, api):
    chat = chat_at_both_sizes
    page = chat.page
    assert chat.conversation_id == ""  # a new chat, not yet written
    expect(page.locator("#toggle-branches")).to_be_hidden()  # nothing to show yet
    chat.use_tool("settings")
    dialog = page.locator("#settings-dialog")
    defaults = api.get("/api/conversation-defaults").json()  # what it shows: what a new chat gets
    expect(dialog.locator('textarea[name="system_prompt"]')).to_have_value(defaults["system_prompt"])
    expect(dialog.locator('input[name="top_p"]')).to_have_value(str(defaults["settings"]["top_p"]))
    dialog.locator('textarea[name="system_prompt"]').fill("You are a pirate. Answer like one.")
    dialog.locator('input[name="temperature"]').fill("0")
    dialog.locator('input[name="max_tokens"]').fill("6")
    dialog.locator('button[value="save"]').click()
    expect(dialog).to_be_hidden()
    expect(page.locator("#chats li.current")).to_have_count(1)
    saved = chat.conversation_id
    assert saved

    chat.send("Hello, who are you?")
    expect(chat.messages).to_have_count(2, timeout=REPLY_TIMEOUT_MS)
    chat.wait_replies()
    assert chat.conversation_id == saved
    stored = api.get(f"/api/conversations/{saved}").json()
    assert stored["conversation"]["system_prompt"] == "You are a pirate. Answer like one."
    assert (stored["conversation"]["settings"]["temperature"], stored["conversation"]["settings"]["max_tokens"]) \
        == (0.0, 6)
    assert [m["role"] for m in stored["messages"]] == ["user", "assistant"]
    assert stored["messages"][1]["stats"]["completion_tokens"] <= 6
