"""Light and dark themes at 1440x900 and 390x844: the Theme list (System, Light, Dark) overrides the system's
setting and is remembered across reloads; body text and muted text read at 4.5:1 or more against their backgrounds
in both themes."""

import pytest
from playwright.sync_api import expect
from webui_page import BACKGROUNDS, SIZES, ChatPage, colors, contrast, new_page

pytestmark = pytest.mark.slow  # headless chromium against a real `localchat serve`: left out of `./dev test --fast`

BACKGROUND = "getComputedStyle(document.body).backgroundColor"


def choose_theme(chat: ChatPage, theme: str) -> None:
    chat.show_sidebar()
    chat.page.select_option("#theme", theme)
    chat.page.keyboard.press("Escape")  # closes the drawer where it is one


@pytest.mark.parametrize("size", SIZES)
def test_the_chosen_theme_overrides_the_system_and_is_remembered(browser, server, api, size):
    with new_page(browser, *SIZES[size], color_scheme="dark") as page:
        chat = ChatPage(page, server, api).sign_in()
        assert page.evaluate(BACKGROUND) == BACKGROUNDS["dark"]  # the system's, at first
        expect(page.locator("#theme")).to_have_value("system")
        choose_theme(chat, "light")
        assert page.evaluate(BACKGROUND) == BACKGROUNDS["light"]
        page.reload()
        expect(page.locator("#app")).to_be_visible()
        assert page.evaluate(BACKGROUND) == BACKGROUNDS["light"]
        expect(page.locator("#theme")).to_have_value("light")

        page.emulate_media(color_scheme="light")  # dark chosen on a light system
        choose_theme(chat, "dark")
        page.reload()
        expect(page.locator("#app")).to_be_visible()
        assert page.evaluate(BACKGROUND) == BACKGROUNDS["dark"]
        choose_theme(chat, "system")  # back to the system's
        assert page.evaluate(BACKGROUND) == BACKGROUNDS["light"]
        page.emulate_media(color_scheme="dark")
        assert page.evaluate(BACKGROUND) == BACKGROUNDS["dark"]


@pytest.mark.parametrize("theme", ["light", "dark"])
def test_text_reads_at_4_5_to_1_in_both_themes(chat_at_both_sizes, theme):
    chat = chat_at_both_sizes
    page = chat.page
    choose_theme(chat, theme)
    assert page.evaluate(BACKGROUND) == BACKGROUNDS[theme]
    text = {"body text": page.locator("body"), "the chat's title": page.locator("#chat-title"),
            "muted text": page.locator("#empty-chat li").first, "a note": page.locator("#empty-chat .model-advice"),
            "a chip": page.locator("#chat-summary .chip-name").first,
            "a placeholder": page.locator("#message")}
    for name, locator in text.items():
        color, background = colors(locator)
        if name == "a placeholder":
            color = locator.evaluate("e => getComputedStyle(e, '::placeholder').color")
        assert contrast(color, background) >= 4.5, (name, color, background, contrast(color, background))
