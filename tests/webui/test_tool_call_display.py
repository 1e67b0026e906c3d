"""A chat with a tool call and its result, shown by the web UI; its tools and JSON mode set in the settings
dialog."""

import json

import pytest
from playwright.sync_api import expect
from webui_page import wait_until

from support import stream_api

pytestmark = pytest.mark.slow  # headless chromium against a real `localchat serve`: left out of `./dev test --fast`

WEATHER = {"type": "function", "function": {"name": "get_weather", "description": "", "parameters": {
    "type": "object", "properties": {"city": {"type": "string", "maxLength": 20}}, "required": ["city"]}}}


def test_tools_set_in_settings_then_a_call_and_its_result_are_shown(chat, api):
    conversation_id = chat.create_chat(temperature=1.0, seed=4, max_tokens=80)
    chat.use_tool("settings")
    dialog = chat.page.locator("#settings-dialog")
    dialog.locator('textarea[name="tools"]').fill("[not json")
    dialog.locator('button[value="save"]').click()
    expect(dialog.locator(".dialog-error")).to_contain_text("Tools: not JSON")
    dialog.locator('textarea[name="tools"]').fill(json.dumps([WEATHER]))
    dialog.locator('select[name="tool_choice"]').select_option("required")
    dialog.locator('button[value="save"]').click()
    expect(dialog).to_be_hidden()
    wait_until(lambda: chat.stored()["conversation"]["settings"]["tool_choice"] == "required")
    assert chat.stored()["conversation"]["settings"]["tools"][0]["function"]["name"] == "get_weather"

    chat.send("Weather in Lima?")
    chat.wait_replies()
    call_message = chat.stored()["messages"][-1]
    [call] = call_message["tool_calls"]
    reply = chat.message(call_message["id"])
    expect(reply.locator(".content")).to_contain_text("Calls get_weather")
    expect(reply.locator(".content pre code")).to_contain_text(call["function"]["arguments"])

    api.patch(f"/api/conversations/{conversation_id}", json={"settings": {
        **chat.stored()["conversation"]["settings"], "tool_choice": "auto", "max_tokens": 8}})
    stream_api(api, f"/api/conversations/{conversation_id}/messages", {
        "content": json.dumps({"sky": "clear"}), "parent_id": call_message["id"], "tool_call_id": call["id"]})
    chat.page.reload()
    result = chat.page.locator("#thread > .message.tool")
    expect(result.locator(".role")).to_have_text("Tool result")
    expect(result.locator(".content")).to_contain_text('{"sky": "clear"}')
    expect(result.locator(".edit")).to_have_count(0)  # a result is not edited like a user message
