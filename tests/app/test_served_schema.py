"""The served OpenAPI schema tells the truth (issue 46): every $ref resolves, it validates as OpenAPI 3.1, and it is as
strict as the server where a field's type or a rule between fields decides (a request it allows is taken, one the
server refuses it refuses too), and it documents the routes that always refuse. And the body's small refusals: an empty
document, NaN named by its field, a number without fraction taken for an integer, the nesting limit of a body."""

import json

import jsonschema_rs
import pytest
from openapi_spec_validator import validate

from localchat.app.server.config import MAX_JSON_DEPTH
from localchat.engine.frontend.structured_output import MAX_SCHEMA_DEPTH

pytestmark = pytest.mark.slow  # the shared `localchat serve`: left out of `./dev test --fast`

CHAT, COMPLETIONS = "/v1/chat/completions", "/v1/completions"
OLLAMA_MODEL = "SmolLM2-135M-Instruct:latest"
HI = [{"role": "user", "content": "Hi"}]
WEATHER = {"type": "function", "function": {"name": "get_weather", "parameters": {
    "type": "object", "properties": {"city": {"type": "string", "maxLength": 20}}, "required": ["city"]}}}


@pytest.fixture(scope="module")
def schema(server):
    with server.client() as api:
        return api.get("/api/openapi/openapi.json").json()


def references(value):
    if isinstance(value, dict):
        if isinstance(value.get("$ref"), str):
            yield value["$ref"]
        for item in value.values():
            yield from references(item)
    elif isinstance(value, list):
        for item in value:
            yield from references(item)


def resolved(schema: dict, ref: str):
    assert ref.startswith("#/"), ref
    value = schema
    for part in ref[2:].split("/"):
        value = value[part.replace("~1", "/").replace("~0", "~")]
    return value


def test_every_reference_resolves_and_the_schema_is_valid_openapi_3_1(schema):
    refs = list(references(schema))
    assert len(refs) > 100
    for ref in set(refs):
        resolved(schema, ref)  # a KeyError names the dangling one
    for name in ("openai_Tool", "openai_ToolCall", "ollama_Message", "openai_FunctionDefinition",
                 "ollama_FunctionCall"):  # the components that two modules name alike, each referred to
        assert f"#/components/schemas/{name}" in refs, name
    assert schema["openapi"].startswith("3.1")
    validate(schema)  # openapi-spec-validator: raises on an invalid OpenAPI 3.1 document


def body_validator(schema: dict, path: str, method: str = "post"):
    """A validator of the request body of an operation, with the schema's components to resolve its $refs."""
    body = schema["paths"][path][method]["requestBody"]["content"]["application/json"]["schema"]
    return jsonschema_rs.validator_for({**body, "components": schema["components"]})


# Requests the server refuses for what a field's type or a rule between fields states: the schema refuses them too
REFUSED = [
    (CHAT, {"messages": []}),
    (CHAT, {"messages": [{"role": "user", "content": "Hi"}], "top_logprobs": 2}),
    (COMPLETIONS, {"prompt": ""}),
    (COMPLETIONS, {"prompt": []}),
    (COMPLETIONS, {"prompt": [[]]}),
    (COMPLETIONS, {"prompt": [""]}),
    (COMPLETIONS, {"prompt": "Hi", "echo": True, "logprobs": 1}),
    ("/api/conversations/{conversation_id}/messages", {"content": ""}),
    ("/api/conversations/{conversation_id}/messages", {"content": " \n"}),
    ("/api/embed", {}),
    ("/api/embeddings", {"prompt": "Hi"}),
    # the rules of tools (issue 53: Schemathesis found each taken by the schema and refused by the server)
    ("/api/conversations", {"settings": {"tool_choice": "required"}}),
    ("/api/conversations", {"settings": {"tool_choice": "required", "tools": [WEATHER], "json_mode": True}}),
    ("/api/conversations", {"settings": {"tools": [{"type": "function", "function": {"name": ""}}]}}),
    (CHAT, {"messages": HI, "tool_choice": "required"}),
    (CHAT, {"messages": HI, "tool_choice": {"type": "function", "function": {"name": "get_weather"}}}),
    (CHAT, {"messages": HI, "tools": [WEATHER], "tool_choice": "required", "response_format": {"type": "json_object"}}),
    ("/api/generate", {"model": OLLAMA_MODEL, "prompt": "Hi", "keep_alive": "forever"}),
    ("/api/chat", {"model": OLLAMA_MODEL, "messages": HI, "keep_alive": "5 minutes"}),
]


@pytest.mark.parametrize("path, body", REFUSED)
def test_what_the_server_refuses_the_schema_refuses(schema, api, path, body):
    assert not body_validator(schema, path).is_valid(body)
    if "{conversation_id}" in path:
        path = path.format(conversation_id=api.post("/api/conversations", json={}).json()["id"])
    response = api.post(path, json=body)
    assert response.status_code == 400, response.text


# Requests the schema allows that the server takes (a reply of one token each)
TAKEN = [
    (CHAT, {"messages": [{"role": "user", "content": "Hi"}], "top_logprobs": 2, "logprobs": True, "max_tokens": 1}),
    (CHAT, {"messages": [{"role": "user", "content": "Hi"}], "top_logprobs": None, "max_tokens": 1}),
    (COMPLETIONS, {"prompt": "Hi", "echo": True, "max_tokens": 1}),
    (COMPLETIONS, {"prompt": [[1, 2]], "logprobs": 1, "max_tokens": 1}),
    (COMPLETIONS, {"prompt": "Hi", "max_tokens": 1.0}),  # an integer as JSON Schema counts one
    ("/api/generate", {"model": OLLAMA_MODEL, "prompt": "Hi", "stream": False,
                       "options": {"seed": -31974.0, "num_predict": 1}}),
    ("/api/conversations", {"settings": {"tool_choice": "required", "tools": [WEATHER]}}),
    ("/api/conversations", {"settings": {"tool_choice": "auto", "json_mode": True}}),
    (CHAT, {"messages": HI, "tools": [WEATHER], "tool_choice": "required", "max_tokens": 1}),
    ("/api/generate", {"model": OLLAMA_MODEL, "prompt": "Hi", "stream": False, "keep_alive": "-1m",
                       "options": {"num_predict": 1}}),  # negative: loaded for good, as the shared server is
    ("/api/chat", {"model": OLLAMA_MODEL, "messages": HI, "stream": False, "keep_alive": "-1",
                   "options": {"num_predict": 1}}),
]


@pytest.mark.parametrize("path, body", TAKEN)
def test_what_the_schema_allows_here_the_server_takes(schema, api, path, body):
    assert body_validator(schema, path).is_valid(body)
    response = api.post(path, json=body)
    assert response.status_code in (200, 201), response.text


def test_a_conversations_settings_follow_the_same_rules_when_changed(schema, api):
    cid = api.post("/api/conversations", json={}).json()["id"]
    update = body_validator(schema, "/api/conversations/{conversation_id}", "patch")
    required = {"tool_choice": "required"}
    for settings, status in [(required, 400), ({**required, "tools": [WEATHER]}, 200)]:
        assert update.is_valid({"settings": settings}) == (status == 200)
        assert api.patch(f"/api/conversations/{cid}", json={"settings": settings}).status_code == status
    send = schema["components"]["schemas"]["SendMessage"]["properties"]
    # stated where no schema can check them: a parent that does not exist is a 404, a call not the parent's a 400
    assert "404" in json.dumps(send["parent_id"]) and "400" in json.dumps(send["tool_call_id"])


def test_a_fraction_is_still_refused_for_an_integer_field(api):
    response = api.post(COMPLETIONS, json={"prompt": "Hi", "max_tokens": 1.5})
    assert response.status_code == 400
    assert response.json()["error"]["message"] == "max_tokens: Expected `int | null`, got `float`"
    ollama = api.post("/api/generate", json={"model": OLLAMA_MODEL, "prompt": "Hi", "options": {"seed": 0.5}})
    assert ollama.status_code == 400 and "options.seed" in ollama.json()["error"]


def test_the_routes_that_always_refuse_say_so(schema, api):
    for path, method in [("/api/pull", "post"), ("/api/push", "post"), ("/api/create", "post"),
                         ("/api/copy", "post"), ("/api/delete", "delete"), ("/api/embed", "post"),
                         ("/api/embeddings", "post")]:
        responses = schema["paths"][path][method]["responses"]
        assert not [status for status in responses if status.startswith("2")], (path, list(responses))
        assert responses["400"]["description"].startswith("always"), path
    refused = api.post("/api/embed", json={"model": OLLAMA_MODEL, "input": "Hi"})
    assert refused.status_code == 400 and "cannot embed" in refused.json()["error"]
    assert api.post("/api/embed", json={"model": "no-such-model"}).status_code == 404


@pytest.mark.parametrize("path, body", [
    ("/api/chat", {"model": OLLAMA_MODEL, "messages": [{"role": "user", "content": "Hi"}]}),
    ("/api/generate", {"model": OLLAMA_MODEL, "prompt": "Hi"}),
])
def test_a_streamed_ollama_reply_is_ndjson_of_the_documented_lines(schema, api, path, body):
    """Schemathesis reads no NDJSON: each line is checked here against the schema of the stream's lines."""
    ndjson = schema["paths"][path]["post"]["responses"]["200"]["content"]["application/x-ndjson"]["schema"]
    line_schema = jsonschema_rs.validator_for({**ndjson, "components": schema["components"]})
    with api.stream("POST", path, json={**body, "options": {"num_predict": 3}}) as response:
        assert response.headers["content-type"].startswith("application/x-ndjson")
        lines = [json.loads(line) for line in response.iter_lines() if line]
    assert len(lines) >= 2 and lines[-1]["done"] is True
    for line in lines:
        line_schema.validate(line)


def test_an_empty_document_is_refused_in_words(api):
    for content in (b"", b" \n\t"):
        response = api.post("/api/documents", files={"file": ("empty.txt", content)})
        assert response.status_code == 400, response.text
        assert response.json()["error"]["message"] == (f'"empty.txt" holds no text ({len(content)} bytes): there is '
                                                       "nothing to read")


@pytest.mark.parametrize("body, message", [
    (b'{"messages": [{"role": "user", "content": "Hi"}], "temperature": NaN}',
     "temperature: NaN is not a JSON number (JSON has no NaN or Infinity)"),
    (b'{"messages": [{"role": "user", "content": "Hi"}], "stop": ["a\\"]", Infinity]}',
     "stop[1]: Infinity is not a JSON number (JSON has no NaN or Infinity)"),
    (b'{"messages": [{"role": "user", "content": "Hi"}], "seed": -Infinity}',
     "seed: -Infinity is not a JSON number (JSON has no NaN or Infinity)"),
])
def test_nan_is_refused_with_the_name_of_its_field(api, body, message):
    response = api.post(CHAT, content=body, headers={"Content-Type": "application/json"})
    assert response.status_code == 400 and response.json()["error"]["message"] == message
    ollama = api.post("/api/generate", content=b'{"model": "m", "options": {"top_p": NaN}}',
                      headers={"Content-Type": "application/json"})
    assert ollama.status_code == 400
    assert ollama.json()["error"] == "options.top_p: NaN is not a JSON number (JSON has no NaN or Infinity)"


def nested_schema(depth: int) -> dict:
    """A JSON Schema `depth` levels of objects deep (an array's items, each level one object)."""
    schema = {"type": "string"}
    for _ in range(depth - 1):
        schema = {"type": "array", "items": schema}
    return schema


def test_a_json_schema_is_limited_by_its_own_depth_not_by_the_bodys(api):
    def chat_with(schema):
        return api.post(CHAT, json={"messages": [{"role": "user", "content": "Hi"}], "max_tokens": 1,
                                    "response_format": {"type": "json_schema",
                                                        "json_schema": {"name": "deep", "schema": schema}}})

    taken = chat_with(nested_schema(MAX_SCHEMA_DEPTH))  # the body around it is 4 levels deeper: 68
    assert taken.status_code == 200, taken.text
    refused = chat_with(nested_schema(MAX_SCHEMA_DEPTH + 1))
    assert refused.status_code == 400
    assert refused.json()["error"]["message"] == (f"the JSON Schema is nested more than {MAX_SCHEMA_DEPTH} levels "
                                                  "deep (objects and arrays)")
    hostile = api.post(CHAT, content=b'{"messages": ' + b"[" * 1000 + b"]" * 1000 + b"}",
                       headers={"Content-Type": "application/json"})
    assert hostile.status_code == 400
    assert hostile.json()["error"]["message"] == f"the JSON body is nested deeper than {MAX_JSON_DEPTH} levels"
