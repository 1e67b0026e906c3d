"""The chat's model and settings at a glance, at 1440x900 and 390x844: chips above the composer say the model the
engine runs, the temperature, the most tokens of a reply, and whether a system prompt, JSON mode and tools are set;
they follow Settings when it is saved; a settings chip opens Settings, the model's chip the Model list."""

import json

import pytest
from playwright.sync_api import expect

pytestmark = pytest.mark.slow  # headless chromium against a real `localchat serve`: left out of `./dev test --fast`

TOOL = {"type": "function", "function": {"name": "get_weather", "parameters": {"type": "object", "properties": {}}}}


def test_the_chips_show_the_chats_settings_and_follow_settings(chat_at_both_sizes, api):
    chat = chat_at_both_sizes
    page = chat.page
    chips = page.locator("#chat-summary .chip")
    model = api.get("/health").json()["model"]
    defaults = api.get("/api/conversation-defaults").json()  # a new chat, not yet written, gets them
    expect(chips).to_have_text([model, f"Temperature{defaults['settings']['temperature']}",
                                f"Max{defaults['settings']['max_tokens']} tokens"]
                               + (["System promptset"] if defaults["system_prompt"] else []))

    conversation = api.post("/api/conversations", json={"system_prompt": "", "settings": {"temperature": 0.3,
                                                                                          "max_tokens": 12}}).json()
    chat.open(conversation["id"])
    expect(chips).to_have_text([model, "Temperature0.3", "Max12 tokens"])
    for chip in chips.all():  # (on a phone they are one line, which scrolls sideways)
        chip.scroll_into_view_if_needed()
        expect(chip).to_be_in_viewport(ratio=1)

    chips.filter(has_text="Temperature").click()
    dialog = page.locator("#settings-dialog")
    expect(dialog).to_be_visible()
    dialog.locator('textarea[name="system_prompt"]').fill("Be brief.")
    dialog.locator('input[name="temperature"]').fill("0.8")
    dialog.locator("label.check", has_text="Replies are JSON objects").click()
    dialog.locator('textarea[name="tools"]').fill(json.dumps([TOOL]))
    dialog.locator('button[value="save"]').click()
    expect(dialog).to_be_hidden()
    expect(chips).to_have_text([model, "Temperature0.8", "Max12 tokens", "System promptset", "JSONon", "Tools1"])
    expect(chips.filter(has_text="System prompt")).to_have_attribute("title", "Be brief.")
    expect(chips.filter(has_text="Tools")).to_have_attribute("title", "get_weather")
    settings = chat.stored()["conversation"]["settings"]
    assert (settings["temperature"], settings["json_mode"], len(settings["tools"])) == (0.8, True, 1)

    page.reload()  # what the server keeps
    expect(chips).to_have_text([model, "Temperature0.8", "Max12 tokens", "System promptset", "JSONon", "Tools1"])
    chips.filter(has_text="JSON").click()
    expect(dialog).to_be_visible()
    expect(dialog.locator('input[name="json_mode"]')).to_be_checked()
    dialog.locator('button[value="cancel"]').click()

    chips.first.click()  # the model's chip: the Model list, in the chat list's drawer on a phone
    expect(page.locator("#model")).to_be_focused()
    expect(page.locator("#model")).to_be_in_viewport(ratio=1)
