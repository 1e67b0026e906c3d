"""Tools with a chat template that renders them (Qwen 2.5's way, tests/data/hermes_tools.jinja), against a real
engine running `tiny-hermes` (random weights: its replies are noise, but a required call is grammar-made): the tools
and the structured calls and results reach the template, exactly as transformers renders them, through /v1 and
through a conversation."""

import json
import time

import openai
import pytest
from transformers import AutoTokenizer

from localchat.engine.loading.model_catalog import EMBEDDED_NAME
from support import TOOLS_MODEL_NAME, stream_api

pytestmark = pytest.mark.slow

WEATHER = {"type": "function", "function": {"name": "get_weather", "description": "The weather in a city",
                                            "parameters": {"type": "object", "properties": {
                                                "city": {"type": "string", "maxLength": 12}}, "required": ["city"]}}}


@pytest.fixture(scope="module")
def hermes(two_model_server):
    """The server running tiny-hermes, its openai client and its tokenizer; the embedded model again afterwards."""
    with two_model_server.client() as api:
        name = next(m["name"] for m in api.get("/api/models").json()["models"] if m["served_name"] == TOOLS_MODEL_NAME)
        assert api.post("/api/models/current", json={"model": name}).status_code == 202
        wait_loaded(api)
        assert api.get("/health").json()["model"] == TOOLS_MODEL_NAME
        client = openai.OpenAI(base_url=f"{two_model_server.url}/v1", api_key=two_model_server.token, max_retries=0)
        yield api, client, AutoTokenizer.from_pretrained(name)
        api.post("/api/models/current", json={"model": EMBEDDED_NAME})
        wait_loaded(api)


def wait_loaded(api) -> None:
    while api.get("/health").json()["status"] == "loading":
        time.sleep(0.05)


def rendered_tokens(tokenizer, messages: list[dict], tools: list[dict]) -> int:
    ids = tokenizer.apply_chat_template(messages, tools=tools, add_generation_prompt=True, tokenize=True)
    return len(ids["input_ids"] if hasattr(ids, "keys") else ids)


def test_a_call_and_its_result_reach_the_template_as_structured_messages(hermes):
    api, client, tokenizer = hermes
    question = [{"role": "user", "content": "Weather in Oslo?"}]
    first = client.chat.completions.create(model=TOOLS_MODEL_NAME, messages=question, tools=[WEATHER],
                                           tool_choice="required", parallel_tool_calls=False, max_tokens=60, seed=1)
    assert first.usage.prompt_tokens == rendered_tokens(tokenizer, question, [WEATHER])  # the tools were rendered
    assert first.choices[0].finish_reason == "tool_calls"
    [call] = first.choices[0].message.tool_calls
    assert call.function.name == "get_weather" and "city" in json.loads(call.function.arguments)

    history = question + [first.choices[0].message.model_dump(exclude_none=True),
                          {"role": "tool", "tool_call_id": call.id, "content": "sunny"}]
    final = client.chat.completions.create(model=TOOLS_MODEL_NAME, messages=history, tools=[WEATHER], max_tokens=4,
                                           temperature=0)
    expected = [*question, {"role": "assistant", "content": None, "tool_calls": [{"type": "function", "id": call.id,
                "function": {"name": "get_weather", "arguments": json.loads(call.function.arguments)}}]},
                {"role": "tool", "tool_call_id": call.id, "content": "sunny"}]
    assert final.usage.prompt_tokens == rendered_tokens(tokenizer, expected, [WEATHER])


def test_a_conversation_with_tools_prompts_as_the_template_renders(hermes):
    api, _, tokenizer = hermes
    settings = {"temperature": 1.0, "seed": 2, "max_tokens": 60, "tools": [WEATHER], "tool_choice": "required"}
    conversation = api.post("/api/conversations", json={"settings": settings, "system_prompt": ""}).json()
    path = f"/api/conversations/{conversation['id']}/messages"
    call_message = stream_api(api, path, {"content": "Weather in Rome?"})[-1]["message"]
    [call] = call_message["tool_calls"]
    assert call_message["stats"]["prompt_tokens"] == rendered_tokens(
        tokenizer, [{"role": "user", "content": "Weather in Rome?"}], [WEATHER])

    api.patch(f"/api/conversations/{conversation['id']}", json={"settings": {**settings, "tool_choice": "auto",
                                                                             "max_tokens": 4}})
    reply = stream_api(api, path, {"content": "cloudy", "parent_id": call_message["id"],
                                   "tool_call_id": call["id"]})[-1]["message"]
    expected = [{"role": "user", "content": "Weather in Rome?"},
                {"role": "assistant", "content": "", "tool_calls": [{"type": "function", "id": call["id"], "function": {
                    "name": "get_weather", "arguments": json.loads(call["function"]["arguments"])}}]},
                {"role": "tool", "tool_call_id": call["id"], "content": "cloudy"}]
    # the prompt is the branch's segments (the call's tokens as generated, which a grammar may split otherwise than
    # the tokenizer would) and the reply's header: as text, the template's own rendering
    tree = api.get(f"/api/conversations/{conversation['id']}", params={"token_ids": "true"}).json()["messages"]
    segments = {m["id"]: m["token_ids"] for m in tree}
    header = tokenizer.encode("<|im_start|>assistant\n", add_special_tokens=False)
    prompt = segments[call_message["parent_id"]] + segments[call_message["id"]] + segments[reply["parent_id"]] + header
    assert reply["stats"]["prompt_tokens"] == len(prompt)
    assert tokenizer.decode(prompt) == tokenizer.apply_chat_template(expected, tools=[WEATHER], tokenize=False,
                                                                     add_generation_prompt=True)
