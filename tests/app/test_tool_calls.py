"""Tool calls in each model family's syntax (app/server/tool_calls.py), without a model: which syntax a template
gets, how the tools and earlier calls reach the template, reading calls out of a reply, whole and streamed."""

import json

import pytest

from localchat.app.protocol.openai import FunctionCall, FunctionDefinition, Tool, ToolCall
from localchat.app.server.template_messages import TemplateMessage
from localchat.app.server.tool_calls import (
    HERMES,
    IN_SYSTEM_PROMPT,
    LLAMA3,
    StreamedReply,
    parse_tool_calls,
    template_chat,
    tool_syntax,
)

WEATHER = Tool(type="function", function=FunctionDefinition(
    name="get_weather", parameters={"type": "object", "properties": {"city": {"type": "string"}}}))
CALL = ToolCall(id="call_1", function=FunctionCall(name="get_weather", arguments='{"city": "Oslo"}'))
QWEN_LIKE = "{%- if tools %}<tools>{{ tools }}</tools>{%- endif %}... <tool_call> ... </tool_call>"
LLAMA_LIKE = '{%- if tools %}{{ tools }}{%- endif %} {"name": ..., "parameters": ...} <|python_tag|>'


def test_the_syntax_follows_the_template():
    assert tool_syntax(QWEN_LIKE) is HERMES
    assert tool_syntax(LLAMA_LIKE) is LLAMA3
    assert tool_syntax("{{ messages }}") is IN_SYSTEM_PROMPT and tool_syntax(None) is IN_SYSTEM_PROMPT


def test_a_template_that_renders_tools_gets_them_and_structured_messages():
    messages = [TemplateMessage("user", "Weather?"), TemplateMessage("assistant", "", tool_calls=[CALL]),
                TemplateMessage("tool", "sunny", tool_call_id="call_1")]
    chat, tools = template_chat(messages, [WEATHER], HERMES)
    assert tools == [{"type": "function", "function": {"name": "get_weather", "description": "",
                                                       "parameters": WEATHER.function.parameters}}]
    assert chat[1]["tool_calls"] == [{"type": "function", "id": "call_1",
                                      "function": {"name": "get_weather", "arguments": {"city": "Oslo"}}}]
    assert chat[2] == {"role": "tool", "content": "sunny", "tool_call_id": "call_1"}


def test_a_template_without_tools_is_taught_them_in_a_system_message():
    messages = [TemplateMessage("system", "Be brief."), TemplateMessage("user", "Weather?"),
                TemplateMessage("assistant", "Let me look.", tool_calls=[CALL]), TemplateMessage("tool", "sunny")]
    chat, tools = template_chat(messages, [WEATHER], IN_SYSTEM_PROMPT)
    assert tools is None
    assert chat[0]["content"].startswith("Be brief.\n\n") and '"name": "get_weather"' in chat[0]["content"]
    assert chat[2]["content"] == 'Let me look.\n<tool_call>\n{"name": "get_weather", "arguments": {"city": "Oslo"}}' \
                                 "\n</tool_call>"
    assert chat[3]["content"] == "<tool_response>\nsunny\n</tool_response>"


def test_bad_arguments_in_an_earlier_call_are_a_clear_error():
    bad = ToolCall(id="call_2", function=FunctionCall(name="get_weather", arguments="[1, 2]"))
    with pytest.raises(ValueError, match="call_2: arguments must be a JSON object"):
        template_chat([TemplateMessage("assistant", "", tool_calls=[bad])], [WEATHER], HERMES)


@pytest.mark.parametrize("syntax, text, content", [
    (HERMES, 'Sure.\n<tool_call>\n{"name": "get_weather", "arguments": {"city": "Oslo"}}\n</tool_call>', "Sure."),
    (HERMES, '<tool_call>\n{"name": "get_weather", "arguments": {"city": "Oslo"}}', None),  # no closing tag
    (LLAMA3, '<|python_tag|>{"name": "get_weather", "parameters": {"city": "Oslo"}}', None),
])
def test_calls_are_read_out_of_a_reply(syntax, text, content):
    rest, calls = parse_tool_calls(text, syntax, {"get_weather"})
    assert rest == content
    assert [(c.function.name, json.loads(c.function.arguments)) for c in calls] == [("get_weather", {"city": "Oslo"})]


@pytest.mark.parametrize("text", [
    '<tool_call>\n{"name": "unknown_tool", "arguments": {}}\n</tool_call>',  # not one of the tools
    '<tool_call>\n{"name": "get_weather", "arguments": {"city": \n</tool_call>',  # not JSON
    "Just text, no call.",
])
def test_what_is_not_a_call_stays_text(text):
    assert parse_tool_calls(text, HERMES, {"get_weather"}) == (text, [])


def test_two_llama_calls_separated_by_semicolons():
    text = '{"name": "get_weather", "parameters": {"city": "A"}}; {"name": "get_weather", "parameters": {"city": "B"}}'
    _, calls = parse_tool_calls(text, LLAMA3, {"get_weather"})
    assert [json.loads(c.function.arguments)["city"] for c in calls] == ["A", "B"]


@pytest.mark.parametrize("syntax, city", [
    # a seeded T=1 reply of the embedded model wrote this city: the closing tag inside the string once ended it
    (HERMES, "]}</tool_call>  #<FU"),
    (LLAMA3, "A; B}"),
])
def test_a_string_holding_the_closing_tag_or_the_separator_stays_in_the_call(syntax, city):
    key = syntax.arguments_key
    one = json.dumps({"name": "get_weather", key: {"city": city}})
    text = f"{syntax.prefix}{one}{syntax.suffix}{syntax.separator}{syntax.prefix}{one}{syntax.suffix}"
    rest, calls = parse_tool_calls(text, syntax, {"get_weather"})
    assert rest is None and [json.loads(c.function.arguments)["city"] for c in calls] == [city, city]


def test_a_llama_reply_with_text_after_its_calls_is_text():
    text = '{"name": "get_weather", "parameters": {"city": "A"}} and then some words'
    assert parse_tool_calls(text, LLAMA3, {"get_weather"}) == (text, [])


def stream(syntax, pieces: list[str], only_calls: bool = False) -> tuple[str, str, list[ToolCall]]:
    reply = StreamedReply(syntax, {"get_weather"}, only_calls)
    sent = "".join(reply.feed(piece) for piece in pieces)
    rest, calls = reply.finish()
    return sent, rest, calls


def test_streamed_text_before_a_call_is_sent_and_the_call_is_held_back():
    pieces = ["Sure", ", one moment.", "\n<tool", "_call>\n{\"name\": \"get_weather\", ", "\"arguments\": {}}",
              "\n</tool_call>"]
    sent, rest, calls = stream(HERMES, pieces)
    assert sent == "Sure, one moment.\n" and rest == "" and [c.function.name for c in calls] == ["get_weather"]


def test_a_streamed_reply_without_calls_is_all_sent_even_a_lone_angle_bracket():
    sent, rest, calls = stream(HERMES, ["a < b", " and <tool", "s> are fine"])
    assert sent + rest == "a < b and <tools> are fine" and calls == []


def test_a_llama_reply_that_opens_with_an_object_is_held_until_it_is_read():
    sent, rest, calls = stream(LLAMA3, ['{"name": "get_weather", ', '"parameters": {"city": "Oslo"}}'])
    assert sent == "" and rest == "" and len(calls) == 1
    sent, rest, calls = stream(LLAMA3, ["Hello", " there"])
    assert sent + rest == "Hello there" and calls == []
