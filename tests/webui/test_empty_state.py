"""A new chat's empty state, at 1440x900 and 390x844: what to do (type, the keys, attach documents) and the model in
use, with a kind word that the built-in model is a small one and that a larger GGUF model is chosen in the Model list;
it goes once the first message is sent."""

import pytest
from playwright.sync_api import expect
from webui_page import REPLY_TIMEOUT_MS

pytestmark = pytest.mark.slow  # headless chromium against a real `localchat serve`: left out of `./dev test --fast`


def test_a_new_chat_says_what_to_do_and_which_model_answers(chat_at_both_sizes, api):
    chat = chat_at_both_sizes
    page = chat.page
    model = api.get("/health").json()["model"]
    empty = page.locator("#empty-chat")
    expect(empty).to_be_visible()
    expect(empty.locator("h2")).to_have_text(f"Chat with {model}")
    expect(empty.locator("h2")).to_be_in_viewport(ratio=1)
    for words in ["Type a message", "Enter", "Shift+Enter", "Attach documents", "drop files", "Settings", "Ctrl+K"]:
        expect(empty.locator("li").filter(has_text=words)).to_have_count(1)
    advice = empty.locator(".model-advice")
    expect(advice).to_contain_text(f"{model} is the small model built into localchat")
    expect(advice).to_contain_text("gets things wrong")
    expect(advice).to_contain_text("A larger GGUF model, chosen in the Model list")
    expect(advice).to_be_in_viewport(ratio=1)

    chat.page.fill("#message", "Hi.")
    chat.page.press("#message", "Enter")
    expect(chat.messages).to_have_count(2, timeout=REPLY_TIMEOUT_MS)
    expect(empty).to_be_hidden()
    page.keyboard.press("Escape")  # (a new chat's replies are long: stopped)
    chat.wait_replies()
    expect(empty).to_be_hidden()

    page.keyboard.press("Alt+n")  # a new chat shows it again
    expect(page.locator("#chats li.current .title")).to_have_text("New chat")
    expect(empty.locator("h2")).to_have_text(f"Chat with {model}")
