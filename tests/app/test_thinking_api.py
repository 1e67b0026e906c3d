"""A thinking model through the server (the thinking_server fixture: tiny-r1-thinking, whose replies start inside
their thinking and never close it on their own): reasoning_content apart from the answer in /v1 (the official openai
client) and in conversations, the budget, end-thinking on a running reply, forks, a JSON Schema after thinking, the
next turn's prompt as the template renders the branch (its shared prefix served from the cache), and the export."""

import json
import time

import msgspec
import ollama
import openai
import pytest
from transformers import AutoTokenizer

from localchat.app.protocol.conversations import Message, SamplingSettings
from localchat.app.server.active_requests import ActiveRequests
from localchat.app.server.chat_template import ChatTemplate, template_variables
from localchat.app.server.conversations import Conversations
from localchat.app.server.store import Store
from localchat.app.server.tool_calls import IN_SYSTEM_PROMPT
from support import (
    QWEN3_THINKING,
    R1_THINKING,
    SESSION_HOME,
    Server,
    make_home,
    stream_api,
    stream_in_background,
    thinking_model_dir,
)

pytestmark = pytest.mark.slow  # real `localchat serve` processes: left out of `./dev test --fast`

SEEDED = {"temperature": 0.8, "seed": 7}
SYSTEM = ("You are a careful assistant. Think step by step before you answer, check every figure twice, and answer "
          "in one short paragraph of plain words.")  # several KV blocks: turn 2 finds them cached


@pytest.fixture(scope="module")
def api(thinking_server):
    with thinking_server.client() as client:
        yield client


@pytest.fixture(scope="module")
def client(thinking_server) -> openai.OpenAI:
    return openai.OpenAI(base_url=f"{thinking_server.url}/v1", api_key=thinking_server.token, max_retries=0,
                         timeout=120)


@pytest.fixture(scope="module")
def tokenizer():
    return AutoTokenizer.from_pretrained(thinking_model_dir(SESSION_HOME / "cache" / "test-references" / "thinking")
                                         / R1_THINKING)


def test_health_says_the_model_thinks(api):
    assert api.get("/health").json()["thinking"] is True


def test_the_openai_client_reads_reasoning_content_whole_and_streamed(client):
    ask = dict(model=R1_THINKING, messages=[{"role": "user", "content": "Hi"}], max_tokens=24, **SEEDED,
               extra_body={"thinking_token_budget": 6})
    whole = client.chat.completions.create(**ask)
    message = whole.choices[0].message
    reasoning = message.model_extra["reasoning_content"]  # an extra field, as llama.cpp's and DeepSeek's
    assert reasoning and message.content and "<think>" not in message.content + reasoning
    assert whole.usage.completion_tokens == 24
    assert whole.usage.completion_tokens_details.reasoning_tokens == 6  # max_tokens counts both parts
    streamed_reasoning, streamed_content = "", ""
    for chunk in client.chat.completions.create(**ask, stream=True):
        for choice in chunk.choices:
            streamed_reasoning += (choice.delta.model_extra or {}).get("reasoning_content") or ""
            streamed_content += choice.delta.content or ""
    assert (streamed_reasoning, streamed_content) == (reasoning, message.content)


def test_a_json_schema_constrains_the_answer_not_the_thinking(client):
    schema = {"type": "object", "properties": {"city": {"type": "string", "maxLength": 12}}, "required": ["city"]}
    reply = client.chat.completions.create(
        model=R1_THINKING, messages=[{"role": "user", "content": "Where?"}], max_tokens=120, **SEEDED,
        response_format={"type": "json_schema", "json_schema": {"name": "place", "schema": schema}},
        extra_body={"thinking_token_budget": 8})
    message = reply.choices[0].message
    assert reply.choices[0].finish_reason == "stop"
    assert isinstance(json.loads(message.content)["city"], str)
    assert message.model_extra["reasoning_content"]


def test_chat_template_kwargs_may_not_set_the_templates_own_arguments(api):
    response = api.post("/v1/chat/completions", json={"messages": [{"role": "user", "content": "Hi"}],
                                                      "chat_template_kwargs": {"add_generation_prompt": False}})
    assert response.status_code == 400 and "add_generation_prompt" in response.json()["error"]["message"]


def test_a_completion_is_the_text_as_written(api):
    """/v1/completions takes nothing apart: a completion of an open block is thinking text, markers and all."""
    body = {"prompt": "<|im_start|>user\nHi<|im_end|>\n<|im_start|>assistant\n<think>\n", "max_tokens": 8, **SEEDED}
    choice = api.post("/v1/completions", json=body).json()["choices"][0]
    assert choice["text"] and "reasoning_content" not in choice


def conversation(api, **settings) -> dict:
    response = api.post("/api/conversations", json={"system_prompt": SYSTEM,
                                                    "settings": {**SEEDED, "max_tokens": 24, **settings}})
    assert response.status_code == 201, response.text
    return response.json()


def done_messages(events: list[dict]) -> list[dict]:
    return [e["message"] for e in events if e["type"] == "done"]


def test_a_reply_streams_its_thinking_then_its_answer_and_stores_both(api):
    conv = conversation(api, thinking_token_budget=5)
    events = stream_api(api, f"/api/conversations/{conv['id']}/messages", {"content": "Hello"})
    deltas = [e for e in events if e["type"] == "delta"]
    first_answer = next(i for i, e in enumerate(deltas) if e["text"])
    # a delta may carry a thinking token whose text waits for the rest of its character (reasoning "")
    assert all(not e["text"] for e in deltas[:first_answer]) and "".join(e["reasoning"] for e in deltas[:first_answer])
    assert all(not e["reasoning"] for e in deltas[first_answer:])
    assert [e["reasoning_tokens"] for e in deltas[:first_answer]][-1] == 5
    [reply] = done_messages(events)
    assert reply["reasoning_content"] == "".join(e["reasoning"] for e in deltas).strip()
    assert reply["content"] == "".join(e["text"] for e in deltas)
    assert reply["stats"]["reasoning_tokens"] == 5 and reply["stats"]["thinking_s"] >= 0
    stored = api.get(f"/api/conversations/{conv['id']}").json()["messages"][-1]
    assert (stored["reasoning_content"], stored["content"]) == (reply["reasoning_content"], reply["content"])
    markdown = api.get(f"/api/conversations/{conv['id']}/export").text
    assert f"<details>\n<summary>Thinking</summary>\n\n{reply['reasoning_content']}\n\n</details>" in markdown
    exported = api.get(f"/api/conversations/{conv['id']}/export", params={"format": "json"}).json()
    assert exported["messages"][-1]["reasoning_content"] == reply["reasoning_content"]


def test_the_next_turns_prompt_is_the_templates_rendering_with_its_prefix_cached(api, thinking_server, tokenizer):
    conv = conversation(api, thinking_token_budget=4)
    api.patch(f"/api/conversations/{conv['id']}", json={"title": "Turns"})  # named: no title request's blocks
    [first] = done_messages(stream_api(api, f"/api/conversations/{conv['id']}/messages", {"content": "Hello"}))
    events = stream_api(api, f"/api/conversations/{conv['id']}/messages",
                        {"content": "And then?", "parent_id": first["id"]})
    [second] = done_messages(events)
    user2 = next(e["message"] for e in events if e["type"] == "user")
    chat = [{"role": "system", "content": SYSTEM}, {"role": "user", "content": "Hello"},
            {"role": "assistant", "content": first["content"]}, {"role": "user", "content": "And then?"}]
    expected = tokenizer.apply_chat_template(chat, tokenize=True, add_generation_prompt=True)["input_ids"]
    # what the server renders for turn 2, by the same code on its own store
    store = Store(thinking_server.db)
    try:
        backend = _Backend(ChatTemplate(tokenizer))
        conversations = Conversations(store, backend, ActiveRequests())
        stored = store.get_conversation(conv["id"])
        prompt, _ = conversations.prompt(stored, store.path(conv["id"], user2["id"]))
    finally:
        store.close()
    assert prompt == expected  # token for token transformers' rendering: turn 1's thinking dropped
    assert second["stats"]["prompt_tokens"] == len(expected)
    turn1 = tokenizer.apply_chat_template(chat[:2], tokenize=True, add_generation_prompt=True)["input_ids"]
    shared = next(i for i, (a, b) in enumerate(zip(turn1, expected)) if a != b)  # where the rendering changed
    assert shared >= 32
    assert shared // 16 * 16 <= second["stats"]["cached_tokens"] <= shared
    print(f"turn 2: {len(expected)} prompt tokens, {shared} shared with turn 1's, "
          f"{second['stats']['cached_tokens']} from the cache")


def test_a_conversations_enable_thinking_goes_to_the_template(tmp_path):
    """Qwen3's shape: enable_thinking false renders an empty block in the generation prompt (the reply answers at
    once); true (the default) leaves the reply to open its block."""
    tokenizer = AutoTokenizer.from_pretrained(thinking_model_dir(SESSION_HOME / "cache" / "test-references"
                                                                 / "thinking") / QWEN3_THINKING)
    store = Store(tmp_path / "store.db")
    conversations = Conversations(store, _Backend(ChatTemplate(tokenizer)), ActiveRequests())
    for enable, ending in ((False, "<|im_start|>assistant\n<think>\n\n</think>\n\n"),
                           (True, "<|im_start|>assistant\n")):
        conv = store.create_conversation("t", "", SamplingSettings(enable_thinking=enable))
        user = Message(id=f"m_{enable}", conversation_id=conv.id, parent_id=None, role="user", content="Hi",
                       created_at=time.time())
        store.add_message(user, [])
        prompt, _ = conversations.prompt(conv, [user])
        assert tokenizer.decode(prompt).endswith(ending)
    store.close()


class _Backend:
    """What Conversations.prompt reads of a backend: a template and the model's name."""

    renders_templates = can_chat = True
    tool_syntax = IN_SYSTEM_PROMPT
    model_name = R1_THINKING

    def __init__(self, template: ChatTemplate):
        self.template = template


def test_end_thinking_makes_a_running_reply_answer_now(api):
    conv = conversation(api, max_tokens=400)
    listener, events, writing = stream_in_background(api, f"/api/conversations/{conv['id']}/messages",
                                                     {"content": "Think long"})
    assert writing.wait(60)
    response = api.post(f"/api/conversations/{conv['id']}/end-thinking", json={})
    assert response.status_code == 200, response.text
    [message_id] = response.json()["ended"]
    listener.join(120)
    [reply] = done_messages(events)
    assert reply["id"] == message_id
    assert reply["content"] and reply["reasoning_content"]
    assert reply["stats"]["reasoning_tokens"] < 200 and reply["stats"]["completion_tokens"] == 400
    deltas = [e for e in events if e["type"] == "delta"]
    assert any(e["text"] for e in deltas) and not any(e["reasoning"] for e in deltas[-5:])


def test_end_thinking_of_a_conversation_with_nothing_running_ends_nothing(api):
    conv = conversation(api)
    assert api.post(f"/api/conversations/{conv['id']}/end-thinking", json={}).json() == {"ended": []}
    assert api.post("/api/conversations/c_nope/end-thinking", json={}).status_code == 404


def test_forked_replies_each_think_and_answer_on_their_own(api):
    conv = conversation(api, thinking_token_budget=4)
    replies = done_messages(stream_api(api, f"/api/conversations/{conv['id']}/messages",
                                       {"content": "Hello", "n": 3}))
    assert len(replies) == 3
    assert len({r["reasoning_content"] for r in replies}) == 3 and all(r["content"] for r in replies)
    assert all(r["stats"]["reasoning_tokens"] == 4 for r in replies)


def test_the_thinking_settings_are_bounded(api):
    limits = api.get("/api/limits").json()["sampling"]["thinking_token_budget"]
    assert limits == {"min": 0, "max": None}
    response = api.post("/api/conversations", json={"settings": {"thinking_token_budget": -1}})
    assert response.status_code == 400 and "thinking_token_budget" in response.text
    conv = conversation(api, enable_thinking=False, thinking_token_budget=0)
    assert msgspec.convert(conv["settings"], dict)["enable_thinking"] is False


def test_a_message_without_thinking_has_no_reasoning_field():
    encoded = msgspec.json.encode(Message(id="m", conversation_id="c", parent_id=None, role="user", content="x",
                                          created_at=time.time()))
    assert b"reasoning_content" not in encoded


@pytest.fixture(scope="module")
def front(thinking_server, tmp_path_factory):
    """`localchat serve --engine-url` in front of the thinking server: the replies come from that server's stream."""
    process = Server(make_home(tmp_path_factory.mktemp("front-home")),
                     args=["--engine-url", f"{thinking_server.url}/v1"],
                     env={"LOCALCHAT_ENGINE_API_KEY": thinking_server.token}).start()
    yield process
    process.stop()


def test_a_remote_servers_reasoning_content_is_kept_apart(front):
    with front.client() as api:
        cid = api.post("/api/conversations", json={"settings": {**SEEDED, "max_tokens": 16,
                                                                "thinking_token_budget": 5}}).json()["id"]
        [reply] = done_messages(stream_api(api, f"/api/conversations/{cid}/messages", {"content": "Hello"}))
        assert reply["reasoning_content"] and reply["content"]  # the budget went with the request
        response = api.post(f"/api/conversations/{cid}/end-thinking", json={})
        assert response.status_code == 200 and response.json() == {"ended": []}  # nothing runs: nothing to refuse


def test_reasoning_effort_goes_to_the_templates_variable_of_that_name_or_to_enable_thinking():
    models = thinking_model_dir(SESSION_HOME / "cache" / "test-references" / "thinking")
    qwen3 = ChatTemplate(AutoTokenizer.from_pretrained(models / QWEN3_THINKING))  # has enable_thinking only
    assert template_variables(qwen3, None, "none") == {"enable_thinking": False}
    assert template_variables(qwen3, None, "high") == {}
    assert template_variables(qwen3, {"enable_thinking": True}, "none") == {"enable_thinking": True}  # kwargs win
    effort = ChatTemplate(AutoTokenizer.from_pretrained(models / QWEN3_THINKING))
    effort.tokenizer = _WithTemplate(effort.tokenizer, "{{ reasoning_effort }} <think></think>")
    assert template_variables(effort, {"x": 1}, "low") == {"x": 1, "reasoning_effort": "low"}
    with pytest.raises(ValueError, match="may not set messages"):
        template_variables(qwen3, {"messages": []}, None)


class _WithTemplate:
    """A tokenizer with another chat template (only the template is read)."""

    def __init__(self, tokenizer, template: str):
        self.tokenizer, self.chat_template = tokenizer, template


def test_ollamas_think_keeps_the_thinking_apart_and_false_turns_it_off(thinking_server):
    """Ollama's API: message.thinking (and generate's thinking) hold the thinking, whole and streamed alike; think
    false reaches a template that can turn it off (Qwen3's enable_thinking). Ends on the model it started with."""
    client = ollama.Client(host=thinking_server.url, headers={"Authorization": f"Bearer {thinking_server.token}"})
    ask = dict(messages=[{"role": "user", "content": "Hi"}], options={"num_predict": 24, **SEEDED})
    whole = client.chat(model=R1_THINKING, think=True, **ask)
    assert whole.message.thinking and "<think>" not in whole.message.thinking + whole.message.content
    streamed = list(client.chat(model=R1_THINKING, think=True, stream=True, **ask))
    assert "".join(p.message.thinking or "" for p in streamed) == whole.message.thinking
    assert "".join(p.message.content for p in streamed) == whole.message.content
    generated = client.generate(model=R1_THINKING, prompt="Hi", think=True, options=ask["options"])
    assert generated.thinking == whole.message.thinking and generated.response == whole.message.content

    off = client.chat(model=QWEN3_THINKING, think=False, **ask)  # switches to it by name
    assert not off.message.thinking and off.message.content and off.eval_count == 24
    client.chat(model=R1_THINKING, messages=[])  # back to the model the other tests use
