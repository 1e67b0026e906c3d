"""The one place where settings become engine parameters (app/server/sampling.py), without a model: a conversation's
settings and a /v1 request that asks for the same give the same SamplingParams and grammar; what each API leaves
out; the tools and their reader; settings that cannot work; and the fields a remote server is sent."""

import msgspec
import pytest

from localchat.app.protocol.conversations import SAMPLING_FIELDS, SamplingSettings
from localchat.app.protocol.ollama import Options
from localchat.app.protocol.openai import ChatCompletionRequest, CompletionRequest, FunctionDefinition, Tool
from localchat.app.sampling_defaults import UNKNOWN_MODEL, sampling_defaults
from localchat.app.server.sampling import (
    chat_sampling,
    completion_sampling,
    ollama_sampling,
    openai_fields,
    reply_sampling,
)
from localchat.app.server.tool_calls import HERMES, LLAMA3
from localchat.engine.frontend.structured_output import StructuredOutput
from localchat.engine.loading.recommended_sampling import RecommendedSampling
from localchat.engine.sampling_params import SamplingParams

WEATHER = Tool(type="function", function=FunctionDefinition(
    name="get_weather", parameters={"type": "object", "properties": {"city": {"type": "string"}}}))
TIME = Tool(type="function", function=FunctionDefinition(name="get_time"))
SETTINGS = dict(temperature=0.3, top_p=0.9, top_k=40, min_p=0.05, repetition_penalty=1.1, presence_penalty=0.2,
                frequency_penalty=0.1, max_tokens=64, seed=7, stop=["\n\n"])
HELLO = [{"role": "user", "content": "Hello"}]


def chat_request(**fields) -> ChatCompletionRequest:
    """A request as the server decodes it from a body."""
    return msgspec.convert({"messages": HELLO, **fields}, ChatCompletionRequest)


@pytest.mark.parametrize("syntax", [HERMES, LLAMA3])
@pytest.mark.parametrize("shape, fields", [
    ({}, {}),
    ({"json_mode": True}, {"response_format": {"type": "json_object"}}),
    ({"tools": [WEATHER, TIME], "tool_choice": "required"},
     {"tools": [WEATHER, TIME], "tool_choice": "required", "parallel_tool_calls": False}),
    ({"tools": [WEATHER], "tool_choice": "auto"}, {"tools": [WEATHER]}),
    ({"tools": [WEATHER], "tool_choice": "none", "json_mode": True},
     {"tools": [WEATHER], "tool_choice": "none", "response_format": {"type": "json_object"}}),
])
def test_a_conversation_and_a_v1_request_that_ask_the_same_get_the_same(syntax, shape, fields):
    settings = SamplingSettings(**SETTINGS, **shape)
    reply = reply_sampling(settings, 3, syntax)
    chat = chat_sampling(chat_request(n=3, **SETTINGS, **msgspec.to_builtins(fields)), syntax)
    assert reply.params == chat.params
    assert (reply.calls is None) == (chat.calls is None) == (shape.get("tool_choice") in (None, "none"))
    if reply.calls:
        assert reply.calls.names == chat.calls.names and reply.calls.syntax is chat.calls.syntax is syntax
        assert reply.calls.only_calls == chat.calls.only_calls == (shape["tool_choice"] == "required")


def test_a_required_call_is_the_grammar_in_the_models_syntax():
    params = reply_sampling(SamplingSettings(tools=[WEATHER], tool_choice="required"), 1, LLAMA3).params
    assert params.structured.calls[0].begin == '{"name": "get_weather", "parameters": '
    assert params.structured.separator is None  # a conversation's reply is one call


QWEN3 = sampling_defaults(RecommendedSampling("Qwen 3's model card", temperature=0.6, top_p=0.95, top_k=20,
                                              min_p=0.0))


@pytest.mark.parametrize("defaults", [UNKNOWN_MODEL, QWEN3])
def test_what_a_request_leaves_out_is_the_models_default_through_every_api(defaults):
    values = {name: getattr(defaults, name) for name in SAMPLING_FIELDS}
    assert chat_sampling(chat_request(), HERMES, defaults=defaults).params == SamplingParams(max_tokens=None,
                                                                                            **values)
    # a completion is the text as the model writes it: a thinking model's markers are not taken out
    assert completion_sampling(CompletionRequest(prompt="Once"), defaults).params == SamplingParams(
        max_tokens=16, separate_reasoning=False, **values)
    ollama = ollama_sampling(None, None, [], HERMES, 32, None, True, defaults).params
    assert ollama == SamplingParams(max_tokens=32, **values)
    assert reply_sampling(SamplingSettings(max_tokens=32), 1, defaults=defaults).params == ollama


def test_a_value_a_request_names_wins_over_the_models_default():
    chat = chat_sampling(chat_request(temperature=1.3, top_k=5), HERMES, defaults=QWEN3).params
    assert (chat.temperature, chat.top_k, chat.top_p, chat.min_p) == (1.3, 5, 0.95, 0.0)
    ollama = ollama_sampling(msgspec.convert({"temperature": 1.3, "top_k": 5}, Options), None, [], HERMES, 8, None,
                             True, QWEN3).params
    assert (ollama.temperature, ollama.top_k, ollama.top_p) == (1.3, 5, 0.95)
    reply = reply_sampling(SamplingSettings(temperature=1.3, top_k=5), 1, defaults=QWEN3).params
    assert (reply.temperature, reply.top_k, reply.top_p) == (1.3, 5, 0.95)


def test_the_v1_only_fields_reach_the_params():
    params = chat_sampling(chat_request(max_tokens=9, max_completion_tokens=5, logprobs=True, top_logprobs=2,
                                        ignore_eos=True, stop="END"), HERMES).params
    assert (params.max_tokens, params.logprobs, params.ignore_eos, params.stop) == (5, 2, True, ["END"])
    named = chat_sampling(chat_request(tools=[msgspec.to_builtins(WEATHER), msgspec.to_builtins(TIME)],
                                       tool_choice={"type": "function", "function": {"name": "get_time"}}), HERMES)
    assert [c.begin for c in named.params.structured.calls] == ['<tool_call>\n{"name": "get_time", "arguments": ']
    assert named.calls.only_calls
    schema = {"type": "object", "properties": {"a": {"type": "integer"}}}
    formatted = chat_sampling(chat_request(response_format={"type": "json_schema", "json_schema": {
        "name": "a", "schema": schema}}), HERMES)
    assert formatted.params.structured == StructuredOutput.json_schema(schema, strict=True)


@pytest.mark.parametrize("settings, fields, message", [
    ({"tool_choice": "required"}, {"tool_choice": "required"}, 'tool_choice "required" needs tools'),
    ({"tools": [WEATHER, WEATHER]}, {"tools": [WEATHER, WEATHER]}, "two functions have the same name"),
    ({"tools": [WEATHER], "tool_choice": "required", "json_mode": True},
     {"tools": [WEATHER], "tool_choice": "required", "response_format": {"type": "json_object"}},
     "and a required tool call cannot both shape the reply"),
    ({"temperature": 0.001}, {"temperature": 0.001}, "temperature must be 0 (greedy) or at least"),
])
def test_settings_that_cannot_work_are_refused_alike(settings, fields, message):
    with pytest.raises(ValueError) as from_settings:
        reply_sampling(SamplingSettings(**settings), 1)
    with pytest.raises(ValueError) as from_request:
        chat_sampling(chat_request(**msgspec.to_builtins(fields)), HERMES)
    assert message in str(from_settings.value) and message in str(from_request.value)
    if "json_mode" in settings:  # each names the field it was sent in
        assert "json_mode" in str(from_settings.value) and "response_format" in str(from_request.value)


def test_a_remote_server_is_sent_the_same_settings_back():
    params = reply_sampling(SamplingSettings(**SETTINGS), 2).params
    assert openai_fields(params) == {"n": 2, **SETTINGS}
    plain = openai_fields(reply_sampling(SamplingSettings(), 1, defaults=QWEN3).params)
    assert plain == {"n": 1, "max_tokens": 512, "temperature": 0.6, "top_p": 0.95, "presence_penalty": 0.0,
                     "frequency_penalty": 0.0, "top_k": 20}  # the extensions only where they change something
