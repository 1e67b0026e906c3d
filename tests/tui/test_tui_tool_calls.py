"""A chat with a tool call and its result, shown by the terminal UI: the call as a code block under the reply,
the result as a message of its own."""

import json

import msgspec
import pytest
from tui_pilot import chat_screen, wait_until

from localchat.app.protocol.conversations import SamplingSettings
from localchat.app.protocol.openai import Tool
from localchat.tui.app import LocalChatApp

pytestmark = pytest.mark.slow  # a real engine process: left out of `./dev test --fast`

WEATHER = {"type": "function", "function": {"name": "get_weather", "parameters": {
    "type": "object", "properties": {"city": {"type": "string", "maxLength": 20}}, "required": ["city"]}}}


@pytest.mark.asyncio
async def test_a_tool_call_and_its_result_are_shown_readably(client, tmp_path):
    settings = SamplingSettings(temperature=1.0, seed=2, max_tokens=80, tool_choice="required",
                                tools=[msgspec.convert(WEATHER, Tool)])
    conversation = await client.create_conversation(settings=settings)
    events = [e async for e in client.send(conversation.id, "Weather in Rome?")]
    call_message = events[-1].message
    [call] = call_message.tool_calls
    await client.update_conversation(conversation.id, settings=msgspec.structs.replace(settings, tool_choice="auto",
                                                                                          max_tokens=8))
    async for _ in client.send(conversation.id, json.dumps({"sky": "clear"}), parent_id=call_message.id,
                               tool_call_id=call.id):
        pass

    async with LocalChatApp(client=client, config_file=tmp_path / "tui.toml").run_test(size=(100, 40)) as pilot:
        screen = await chat_screen(pilot, conversation.id)
        views = await wait_until(pilot, lambda: len(screen.view.views) == 4 and screen.view.views)
        assert [v.title for v in views] == ["You", "Assistant", "Tool result", "Assistant"]
        assert "Calls `get_weather`" in views[1].body.source and call.function.arguments in views[1].body.source
        assert '{"sky": "clear"}' in views[2].body.source
