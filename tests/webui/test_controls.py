"""Settings, keyboard, copy buttons and themes."""

import pytest
from playwright.sync_api import expect
from webui_page import BACKGROUNDS, FAST, REPLY_TIMEOUT_MS, wait_until

from support import stream_api

pytestmark = pytest.mark.slow  # headless chromium against a real `localchat serve`: left out of `./dev test --fast`


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
    for keys in ["Enter", "Shift+Enter", "Esc", "Alt+A", "Alt+N", "Alt+R", "Ctrl+K"]:
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


def test_code_blocks_say_their_language_and_copy_their_code(chat_at_both_sizes, api):
    chat = chat_at_both_sizes
    chat.page.context.grant_permissions(["clipboard-read", "clipboard-write"], origin=chat.server.url)
    conversation = api.post("/api/conversations", json={"settings": {**FAST, "max_tokens": 4}}).json()
    stream_api(api, f"/api/conversations/{conversation['id']}/messages", {"content": "Code, please."})
    chat.open(conversation["id"])
    page = chat.page
    # code blocks rendered as a reply's Markdown is: one per fence, labelled with its language ("code": none given)
    page.evaluate("""async () => {
        const { renderMarkdown } = await import('/static/markdown.js');
        document.querySelector('#thread .message.assistant .content').replaceChildren(renderMarkdown(
            'Run:\\n```python\\nprint("hi")\\n```\\nor\\n~~~typescript\\nlet x = 1;\\n~~~\\n```\\nplain\\n```'));
    }""")
    blocks = page.locator("#thread .code-block")
    expect(blocks.locator(".code-language")).to_have_text(["python", "typescript", "code"])
    expect(blocks.first.locator(".tok-kw")).to_have_text("print")
    for block, code in zip(blocks.all(), ['print("hi")', "let x = 1;", "plain"], strict=True):
        copy = block.locator("button.copy-code")
        copy.scroll_into_view_if_needed()
        expect(copy).to_be_in_viewport(ratio=1)
        copy.click()
        expect(copy).to_have_text("Copied")  # for a moment
        assert page.evaluate("navigator.clipboard.readText()") == code
        expect(copy).to_have_text("Copy")


def test_theme_follows_the_system_setting(chat):
    background = "getComputedStyle(document.body).backgroundColor"
    chat.page.emulate_media(color_scheme="light")
    light = chat.page.evaluate(background)
    chat.page.emulate_media(color_scheme="dark")
    dark = chat.page.evaluate(background)
    assert (light, dark) == (BACKGROUNDS["light"], BACKGROUNDS["dark"])


def test_the_inputs_take_their_limits_from_the_server(chat, api):
    limits = api.get("/api/limits").json()["sampling"]
    chat.create_chat()
    page = chat.page
    expect(page.locator("#replies")).to_have_attribute("max", str(limits["n"]["max"]))
    chat.page.click("#settings")
    dialog = page.locator("#settings-dialog")
    for name in ["temperature", "top_p", "top_k", "min_p", "repetition_penalty", "presence_penalty",
                 "frequency_penalty", "max_tokens"]:
        field = dialog.locator(f'input[name="{name}"]')
        low, high = field.get_attribute("min"), field.get_attribute("max")
        assert float(low) == limits[name]["min"], name
        assert (high and float(high)) == limits[name]["max"], name

    # a value the server refuses all the same: its message shows in the dialog, which stays open
    dialog.locator('input[name="temperature"]').fill("0.005")
    dialog.locator('button[value="save"]').click()
    expect(dialog.locator(".dialog-error")).to_have_text(
        "settings: temperature must be 0 (greedy) or at least 0.01, got 0.005")
    expect(dialog).to_be_visible()
    dialog.locator('input[name="temperature"]').fill("0.5")
    dialog.locator('button[value="save"]').click()
    expect(dialog).to_be_hidden()
    assert chat.stored()["conversation"]["settings"]["temperature"] == 0.5


def test_the_branch_tree_stays_open_or_closed_across_reloads(chat, api):
    conversation = api.post("/api/conversations", json={"settings": FAST}).json()
    stream_api(api, f"/api/conversations/{conversation['id']}/messages", {"content": "Hi.", "reply": False})
    chat.open(conversation["id"])
    page, tree = chat.page, chat.page.locator("#branches")
    expect(tree).to_be_hidden()
    page.click("#toggle-branches")
    expect(tree).to_be_visible()
    page.reload()
    expect(tree).to_be_visible()
    expect(page.locator("#toggle-branches")).to_have_attribute("aria-pressed", "true")
    page.click("#toggle-branches")
    expect(tree).to_be_hidden()
    page.reload()
    expect(page.locator("#app")).to_be_visible()
    expect(tree).to_be_hidden()
    expect(page.locator("#toggle-branches")).to_have_attribute("aria-pressed", "false")


MESSAGE_TOOLS = ["#toggle-branches", "#export-markdown", "#export-json"]  # what a chat's messages are needed for


def test_an_empty_chat_has_no_branches_or_export(chat, api):
    page = chat.page
    conversation = api.post("/api/conversations", json={"settings": {**FAST, "max_tokens": 2}}).json()
    chat.open(conversation["id"])  # written, but without a message
    for tool in MESSAGE_TOOLS:
        expect(page.locator(tool)).to_be_hidden()
    expect(page.locator("#branches")).to_be_hidden()
    expect(page.locator("#settings")).to_be_visible()
    page.keyboard.press("Alt+b")  # nor does its key show a tree
    expect(page.locator("#branches")).to_be_hidden()

    chat.send("Hi.")
    chat.wait_replies()
    for tool in MESSAGE_TOOLS:
        expect(page.locator(tool)).to_be_visible()
    page.click("#toggle-branches")
    expect(page.locator("#branches .node")).to_have_count(2)

    page.click("#new-chat")  # the branch tree, still wanted open, shows again with the chat's first message
    expect(page.locator("#chat-title")).to_have_text("New chat")
    for tool in MESSAGE_TOOLS:
        expect(page.locator(tool)).to_be_hidden()
    expect(page.locator("#branches")).to_be_hidden()


def test_the_fork_box_keeps_its_number_for_each_chat(chat, api):
    page = chat.page
    fork = page.get_by_label("Fork")  # the Fork N of the terminal: N replies side by side
    expect(fork).to_have_value("1")
    assert chat.conversation_id == ""  # a new chat, written with its first message
    other = api.post("/api/conversations", json={"title": "another chat"}).json()  # listed once the replies end
    chat.send("Hi.", replies=2)
    expect(chat.cards).to_have_count(2, timeout=REPLY_TIMEOUT_MS)
    page.keyboard.press("Escape")  # (a new chat's replies are long: stopped)
    chat.wait_replies()
    forked = chat.conversation_id
    expect(fork).to_have_value("2")  # after sending, for the chat's next message

    chat.show_sidebar()
    page.locator(f'#chats li[data-id="{other["id"]}"] .title').click()
    expect(page.locator("#chat-title")).to_have_text("another chat")
    expect(fork).to_have_value("1")  # a chat not forked yet
    fork.fill("3")
    page.locator(f'#chats li[data-id="{forked}"] .title').click()
    expect(page.locator(f'#chats li.current[data-id="{forked}"]')).to_have_count(1)
    expect(fork).to_have_value("2")
    page.locator(f'#chats li[data-id="{other["id"]}"] .title').click()
    expect(fork).to_have_value("3")
