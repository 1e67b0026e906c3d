"""JSON mode, JSON Schema and tool calls through /v1/chat/completions, with the official `openai` client against a real
`localchat serve`: replies constrained by grammars (engine/frontend/structured_output.py) are valid at temperature 1,
whole and streamed, forked (n=4), and tool calls make a round trip."""

import json
import re
from concurrent.futures import ThreadPoolExecutor
from typing import Annotated, Literal

import jsonschema_rs
import openai
import pytest
from pydantic import BaseModel, Field

pytestmark = pytest.mark.slow  # a real `localchat serve`: left out of `./dev test --fast`

MODEL = "SmolLM2-135M-Instruct"


@pytest.fixture(scope="module")
def client(server) -> openai.OpenAI:
    return openai.OpenAI(base_url=f"{server.url}/v1", api_key=server.token, max_retries=0, timeout=300)


class Address(BaseModel):
    city: str = Field(max_length=24)
    zip_code: str = Field(pattern=r"^[0-9]{5}$")


class Person(BaseModel):  # nested objects through $ref ($defs), an enum, bounded numbers and arrays, an optional
    name: str = Field(max_length=24)
    age: int = Field(ge=0, le=120)
    role: Literal["admin", "user", "guest"]
    home: Address
    tags: list[Annotated[str, Field(max_length=12)]] = Field(min_length=1, max_length=3)
    nickname: str | None = Field(default=None, max_length=16)


def short(max_length: int = 20) -> dict:
    return {"type": "string", "maxLength": max_length}


SCHEMAS = {
    "person": Person.model_json_schema(),  # strings bounded: a 135M model at temperature 1 may never end one
    "point": {"type": "object", "properties": {"x": {"type": "number", "minimum": -10, "maximum": 10},
                                               "y": {"type": "number", "minimum": -10, "maximum": 10}},
              "required": ["x", "y"], "additionalProperties": False},
    "colour": {"type": "object", "properties": {"colour": {"enum": ["red", "green", "blue"]}}, "required": ["colour"]},
    "scores": {"type": "object", "properties": {"scores": {"type": "array", "minItems": 2, "maxItems": 4,
                                                           "items": {"type": "integer", "minimum": 0, "maximum": 100}}},
               "required": ["scores"]},
    "optional": {"type": "object", "properties": {"title": short(), "subtitle": short(), "year": {
        "type": "integer", "minimum": 1900, "maximum": 2100}}, "required": ["title"]},
    "nested": {"type": "object", "properties": {"outer": {"type": "object", "properties": {"inner": {
        "type": "object", "properties": {"flag": {"type": "boolean"}, "label": short(8)},
        "required": ["flag", "label"]}}, "required": ["inner"]}}, "required": ["outer"]},
    "refs": {"$defs": {"item": {"type": "object", "properties": {"id": {"type": "integer", "minimum": 1,
                                                                        "maximum": 99}, "name": short(12)},
                                "required": ["id", "name"]}},
             "type": "object", "properties": {"first": {"$ref": "#/$defs/item"}, "second": {"$ref": "#/$defs/item"}},
             "required": ["first", "second"]},
    "matrix": {"type": "object", "properties": {"rows": {"type": "array", "minItems": 1, "maxItems": 3, "items": {
        "type": "array", "minItems": 2, "maxItems": 2, "items": {"type": "number", "minimum": 0, "maximum": 1}}}},
               "required": ["rows"]},
    "status": {"type": "object", "properties": {"ok": {"type": "boolean"}, "code": {"enum": [200, 404, 500]},
                                                "detail": {"anyOf": [short(), {"type": "null"}]}},
               "required": ["ok", "code", "detail"]},
    "list": {"type": "array", "minItems": 1, "maxItems": 3, "items": short(10)},
}
WEATHER = {"type": "function", "function": {
    "name": "get_weather", "description": "The current weather in a city",
    "parameters": {"type": "object", "properties": {"city": {"type": "string", "maxLength": 30},
                                                    "unit": {"enum": ["celsius", "fahrenheit"]}},
                   "required": ["city", "unit"], "additionalProperties": False}}}


def ask(client: openai.OpenAI, **fields):
    return client.chat.completions.create(model=MODEL, **{"max_tokens": 400, **fields})


def test_parse_returns_a_pydantic_object_whole_and_streamed(client):
    messages = [{"role": "user", "content": "Make up a person as JSON."}]
    whole = client.chat.completions.parse(model=MODEL, messages=messages, response_format=Person, temperature=1.0,
                                          seed=1, max_tokens=400)
    assert whole.choices[0].finish_reason == "stop"
    assert isinstance(whole.choices[0].message.parsed, Person)

    with client.chat.completions.stream(model=MODEL, messages=messages, response_format=Person, temperature=1.0,
                                        seed=2, max_tokens=400) as stream:
        chunks = [event for event in stream if event.type == "content.delta"]
        final = stream.get_final_completion()
    assert len(chunks) > 5  # streamed as it was written
    assert isinstance(final.choices[0].message.parsed, Person)


class City(BaseModel):
    name: str = Field(max_length=40)
    country: str = Field(max_length=40)
    population_millions: float


def test_parse_with_a_float_field_at_temperature_zero_ends_its_number(client):
    """The embedded model at temperature 0 writes "population_millions": 3111111... for as long as a number may go:
    the grammar bounds a number's digits (engine/structured_output.py), so the reply ends and parses."""
    reply = client.chat.completions.parse(model=MODEL, messages=[{"role": "user", "content": "Describe Paris."}],
                                          response_format=City, temperature=0, max_tokens=400)
    city = reply.choices[0].message.parsed
    assert reply.choices[0].finish_reason == "stop" and isinstance(city, City), reply.choices[0].message.content
    number = re.search(r'"population_millions": ([^,}]*)', reply.choices[0].message.content).group(1)
    assert re.fullmatch(r"-?[0-9]{1,15}(\.[0-9]{1,9})?", number), number  # within the grammar's bounds


def test_a_hundred_replies_over_ten_schemas_at_temperature_one_all_validate(client):
    jobs = [(name, seed) for name in SCHEMAS for seed in range(10)]

    def one(job):
        name, seed = job
        reply = ask(client, messages=[{"role": "user", "content": f"Give an example {name} as JSON."}],
                    temperature=1.0, seed=seed, response_format={"type": "json_schema", "json_schema": {
                        "name": name, "schema": SCHEMAS[name], "strict": True}})
        return name, reply.choices[0]

    with ThreadPoolExecutor(16) as pool:
        results = list(pool.map(one, jobs))
    assert len(results) == 100
    for name, choice in results:
        assert choice.finish_reason == "stop", (name, choice.message.content)
        jsonschema_rs.validate(SCHEMAS[name], json.loads(choice.message.content))


def test_json_object_mode_and_four_forked_replies_each_valid(client):
    # at T=1 the 135M model can write one string value for all 400 tokens; T=1 is covered by the schema tests
    # (a string value may run past max_tokens whatever the grammar: of four seeds, those that close are objects)
    choices = [ask(client, messages=[{"role": "user", "content": "Describe a cat as JSON."}],
                   response_format={"type": "json_object"}, temperature=0.7, seed=seed).choices[0]
               for seed in range(1, 5)]
    closed = [json.loads(c.message.content) for c in choices if c.finish_reason == "stop"]
    assert closed and all(isinstance(obj, dict) for obj in closed)

    # a seed whose four replies close within 400 tokens at T=1
    forked = ask(client, messages=[{"role": "user", "content": "Give a point as JSON."}], n=4, temperature=1.0,
                 seed=6, response_format={"type": "json_schema", "json_schema": {"name": "point",
                                                                                 "schema": SCHEMAS["point"]}})
    objects = [json.loads(c.message.content) for c in forked.choices]
    assert len(objects) == 4 and all(c.finish_reason == "stop" for c in forked.choices)
    for obj in objects:
        jsonschema_rs.validate(SCHEMAS["point"], obj)
    assert len({json.dumps(o) for o in objects}) > 1  # each fork went its own way


def test_a_reply_cut_by_max_tokens_says_length(client):
    reply = ask(client, messages=[{"role": "user", "content": "A person."}], max_tokens=4,
                response_format={"type": "json_schema", "json_schema": {"name": "p", "schema": SCHEMAS["person"]}})
    assert reply.choices[0].finish_reason == "length"


def test_a_tool_round_trip(client):
    messages = [{"role": "user", "content": "What is the weather in Paris?"}]
    first = ask(client, messages=messages, tools=[WEATHER], tool_choice="required", parallel_tool_calls=False,
                temperature=1.0, seed=5)
    choice = first.choices[0]
    assert choice.finish_reason == "tool_calls" and choice.message.content is None
    [call] = choice.message.tool_calls
    assert call.type == "function" and call.function.name == "get_weather" and call.id.startswith("call_")
    jsonschema_rs.validate(WEATHER["function"]["parameters"], json.loads(call.function.arguments))

    messages += [choice.message.model_dump(exclude_none=True),
                 {"role": "tool", "tool_call_id": call.id, "content": json.dumps({"temperature": 21, "sky": "sunny"})}]
    final = ask(client, messages=messages, tools=[WEATHER], temperature=0, max_tokens=40)
    assert final.choices[0].message.content and not final.choices[0].message.tool_calls


def test_tool_calls_stream_as_openai_deltas(client):
    stream = ask(client, messages=[{"role": "user", "content": "Weather in Oslo?"}], tools=[WEATHER], stream=True,
                 tool_choice={"type": "function", "function": {"name": "get_weather"}}, temperature=1.0, seed=6)
    chunks = [c for c in stream if c.choices]
    calls = [d for c in chunks for d in c.choices[0].delta.tool_calls or []]
    assert [c.choices[0].finish_reason for c in chunks][-1] == "tool_calls"
    assert len(calls) == 1 and calls[0].index == 0 and calls[0].function.name == "get_weather"
    jsonschema_rs.validate(WEATHER["function"]["parameters"], json.loads(calls[0].function.arguments))
    assert not any(c.choices[0].delta.content for c in chunks)  # the call's text is not sent as content


@pytest.mark.parametrize("fields, message", [
    ({"tool_choice": {"type": "function", "function": {"name": "nope"}}, "tools": [WEATHER]}, "not among the tools"),
    ({"tool_choice": "required"}, "needs tools"),
    ({"tools": [WEATHER, WEATHER]}, "same name"),
    ({"tools": [WEATHER], "tool_choice": "required", "response_format": {"type": "json_object"}}, "cannot both"),
    ({"response_format": {"type": "json_schema", "json_schema": {"name": "x", "schema": {"type": "nonsense"}}}},
     "schema"),
    ({"response_format": {"type": "xml"}}, "response_format"),
    ({"logit_bias": {"1": 3}}, "`logit_bias` is not supported"),
])
def test_requests_that_cannot_be_met_are_refused_with_the_reason(client, fields, message):
    with pytest.raises(openai.BadRequestError, match=message):
        ask(client, messages=[{"role": "user", "content": "Hi"}], **fields)
