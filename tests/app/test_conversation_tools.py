"""Tool calls and tool results as messages of a conversation's tree, and JSON mode per chat, against a real
engine: a chat whose settings give tools and tool_choice "required" gets a reply that is a call (stored parsed, with
finish_reason "tool_calls"), its result is sent as a tool message under it, and the next reply follows."""

import json

import pytest

from support import stream_api

pytestmark = pytest.mark.slow

WEATHER = {"type": "function", "function": {
    "name": "get_weather", "description": "The current weather in a city",
    "parameters": {"type": "object", "properties": {"city": {"type": "string", "maxLength": 30}},
                   "required": ["city"]}}}
SETTINGS = {"temperature": 1.0, "seed": 3, "max_tokens": 120, "tools": [WEATHER], "tool_choice": "required"}


def test_a_tool_call_and_its_result_are_messages_of_the_tree(api):
    conversation = api.post("/api/conversations", json={"settings": SETTINGS}).json()
    path = f"/api/conversations/{conversation['id']}/messages"
    events = stream_api(api, path, {"content": "What is the weather in Paris?"})
    call_message = events[-1]["message"]
    assert call_message["finish_reason"] == "tool_calls" and call_message["content"] == ""
    [call] = call_message["tool_calls"]
    assert call["function"]["name"] == "get_weather" and "city" in json.loads(call["function"]["arguments"])

    wrong = api.post(path, json={"content": "21 C", "parent_id": call_message["id"], "tool_call_id": "call_nope"})
    assert wrong.status_code == 400 and "not a tool call" in wrong.json()["error"]["message"]

    stored_only = stream_api(api, path, {"content": "(a first try)", "parent_id": call_message["id"],
                                         "tool_call_id": call["id"], "reply": False})
    assert [e["type"] for e in stored_only] == ["user"] and stored_only[0]["message"]["role"] == "tool"

    auto = {**SETTINGS, "tool_choice": "auto", "max_tokens": 30}
    answered = stream_api(api, path, {"content": json.dumps({"temperature_c": 21}), "parent_id": call_message["id"],
                                      "tool_call_id": call["id"], "settings": auto})
    result, reply = answered[0]["message"], answered[-1]["message"]
    assert result["role"] == "tool" and result["tool_call_id"] == call["id"] and result["num_tokens"] > 0
    assert reply["role"] == "assistant" and reply["parent_id"] == result["id"] and reply["content"]

    tree = api.get(f"/api/conversations/{conversation['id']}").json()["messages"]
    stored = {m["id"]: m for m in tree}
    assert stored[call_message["id"]]["tool_calls"] == call_message["tool_calls"]
    assert stored[result["id"]]["content"] == json.dumps({"temperature_c": 21})
    markdown = api.get(f"/api/conversations/{conversation['id']}/export", params={"leaf": reply["id"]}).text
    assert "Calls `get_weather`" in markdown and "**Tool result**" in markdown
    # the prompt of the last reply held the call and its result: more tokens than the question alone
    assert reply["stats"]["prompt_tokens"] > call_message["stats"]["prompt_tokens"] + result["num_tokens"] - 1


def test_json_mode_per_chat(api):
    conversation = api.post("/api/conversations", json={"settings": {
        "temperature": 1.0, "seed": 5, "max_tokens": 200, "json_mode": True}}).json()
    events = stream_api(api, f"/api/conversations/{conversation['id']}/messages", {"content": "Describe a dog."})
    reply = events[-1]["message"]
    if reply["finish_reason"] == "stop":
        assert isinstance(json.loads(reply["content"]), dict)
    else:  # a small model may write a long string: cut, but what there is starts an object
        assert reply["finish_reason"] == "length" and reply["content"].startswith("{")


@pytest.mark.parametrize("settings, message", [
    ({"tool_choice": "required"}, "needs tools"),
    ({"tools": [WEATHER], "tool_choice": "required", "json_mode": True}, "cannot both"),
    ({"tools": [WEATHER, WEATHER]}, "same name"),
])
def test_tool_settings_that_cannot_work_are_refused_where_they_are_set(api, settings, message):
    response = api.post("/api/conversations", json={"settings": settings})
    assert response.status_code == 400 and message in response.json()["error"]["message"]
