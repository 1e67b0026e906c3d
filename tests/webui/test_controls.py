"""Settings, keyboard, copy buttons and themes."""

from playwright.sync_api import expect
from support import stream_api

from webui_page import FAST, wait_until


def test_settings_dialog_saves_system_prompt_and_sampling(chat):
    chat.create_chat()
    chat.page.click("#settings")
    dialog = chat.page.locator("#settings-dialog")
    expect(dialog).to_be_visible()
    expect(dialog.locator('input[name="max_tokens"]')).to_have_value(str(FAST["max_tokens"]))
    dialog.locator('textarea[name="system_prompt"]').fill("You are a terse assistant.")
    dialog.locator('input[name="temperature"]').fill("0.3")
    dialog.locator('input[name="top_k"]').fill("40")
    dialog.locator('input[name="seed"]').fill("7")
    dialog.locator('textarea[name="stop"]').fill("END\nSTOP")
    dialog.locator('button[value="save"]').click()
    expect(dialog).to_be_hidden()
    wait_until(lambda: chat.stored()["conversation"]["system_prompt"] == "You are a terse assistant.")
    conversation = chat.stored()["conversation"]
    settings = conversation["settings"]
    assert (settings["temperature"], settings["top_k"], settings["seed"], settings["stop"]) == (0.3, 40, 7,
                                                                                            ["END", "STOP"])
    assert settings["max_tokens"] == FAST["max_tokens"]

    chat.page.click("#settings")  # shows what was saved; Cancel changes nothing
    expect(dialog.locator('textarea[name="system_prompt"]')).to_have_value("You are a terse assistant.")
    dialog.locator('input[name="seed"]').fill("")
    dialog.locator('button[value="cancel"]').click()
    assert chat.stored()["conversation"]["settings"]["seed"] == 7


def test_keyboard_help_new_chat_newline_and_regenerate(chat, api):
    conversation = api.post("/api/conversations", json={"settings": {**FAST, "max_tokens": 4}}).json()
    stream_api(api, f"/api/conversations/{conversation['id']}/messages", {"content": "Hi."})
    chat.open(conversation["id"])
    page = chat.page

    page.keyboard.press("Control+/")
    help_dialog = page.locator("#help-dialog")
    expect(help_dialog).to_be_visible()
    for keys in ["Enter", "Shift+Enter", "Esc", "Alt+N", "Alt+R", "Ctrl+K"]:
        expect(help_dialog.locator("kbd", has_text=keys).first).to_be_visible()
    page.keyboard.press("Escape")
    expect(help_dialog).to_be_hidden()

    page.click("#message")  # Alt+R regenerates the last reply: a sibling, shown as 2/2
    page.keyboard.press("Alt+r")
    chat.wait_replies()
    expect(chat.messages.nth(1).locator(".switcher .position")).to_have_text("2/2")
    assert sum(m["role"] == "assistant" for m in chat.stored()["messages"]) == 2

    page.click("#message")  # Shift+Enter is a new line, not a send
    page.keyboard.type("one")
    page.keyboard.press("Shift+Enter")
    page.keyboard.type("two")
    expect(page.locator("#message")).to_have_value("one\ntwo")
    assert len(chat.stored()["messages"]) == 3

    page.keyboard.press("Alt+n")
    expect(page.locator("#chats li.current .title")).to_have_text("New chat")
    assert chat.conversation_id != conversation["id"]


def test_copy_buttons(chat, api):
    chat.page.context.grant_permissions(["clipboard-read", "clipboard-write"], origin=chat.server.url)
    conversation = api.post("/api/conversations", json={"settings": {**FAST, "max_tokens": 4}}).json()
    stream_api(api, f"/api/conversations/{conversation['id']}/messages", {"content": "Copy\nme."})
    chat.open(conversation["id"])
    page = chat.page
    page.locator("#thread .message.user button.copy-message").click()
    expect(page.locator("#thread .message.user button.copy-message")).to_have_text("Copied")
    assert page.evaluate("navigator.clipboard.readText()") == "Copy\nme."

    # a code block's button copies the code alone (the block rendered as a reply's Markdown is)
    page.evaluate("""async () => {
        const { renderMarkdown } = await import('/static/markdown.js');
        document.querySelector('#thread .message.assistant .content')
            .replaceChildren(renderMarkdown('Run:\\n```python\\nprint("hi")\\n```'));
    }""")
    page.locator("#thread .code-block button.copy-code").click()
    expect(page.locator("#thread .code-block .tok-kw")).to_have_text("print")
    assert page.evaluate("navigator.clipboard.readText()") == 'print("hi")'


def test_theme_follows_the_system_setting(chat):
    background = "getComputedStyle(document.body).backgroundColor"
    chat.page.emulate_media(color_scheme="light")
    light = chat.page.evaluate(background)
    chat.page.emulate_media(color_scheme="dark")
    dark = chat.page.evaluate(background)
    assert light == "rgb(255, 255, 255)" and dark == "rgb(22, 24, 29)"
