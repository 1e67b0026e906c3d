"""Ollama's API through the clients written for it: the official `ollama` Python client and LangChain's ChatOllama,
against a real `localchat serve` with two models (the embedded one and tiny-llama) and the tokenless Ollama
listener (--ollama-port): the model list, show and ps, chat and generate whole and streamed, JSON formats, seeds,
tools, refusals, switching models by name, keep_alive 0, and the listener's limits."""

import json
import threading
import time

import httpx
import ollama
import pytest

from localchat.engine.loading.model_catalog import EMBEDDED_NAME
from support import SECOND_MODEL_NAME, stream_api

pytestmark = pytest.mark.slow

EMBEDDED = f"{EMBEDDED_NAME}:latest"
WEATHER = {"type": "function", "function": {
    "name": "get_weather", "description": "Get the weather in a city",
    "parameters": {"type": "object", "properties": {"city": {"type": "string"}}, "required": ["city"]}}}
# an earlier call in the chat: the embedded model copies it for a new city with some seeds (5 of the first 16)
CALLED_BEFORE = [
    {"role": "user", "content": "What is the weather in Paris?"},
    {"role": "assistant", "content": "", "tool_calls": [{"function": {"name": "get_weather",
                                                                      "arguments": {"city": "Paris"}}}]},
    {"role": "user", "content": "What is the weather in Tokyo?"}]


@pytest.fixture(scope="module")
def server(two_model_server):
    yield two_model_server
    # leave the embedded model loaded (and chosen), as the other tests of this server expect it
    ollama.Client(host=two_model_server.url, headers={"Authorization": f"Bearer {two_model_server.token}"}).chat(
        model=EMBEDDED, messages=[])
    two_model_server.wait_ready()


@pytest.fixture
def client(server) -> ollama.Client:
    return ollama.Client(host=server.url, headers={"Authorization": f"Bearer {server.token}"})


def say(text: str) -> list[dict]:
    return [{"role": "user", "content": text}]


def test_list_show_ps_and_version(client):
    names = {m.model: m for m in client.list().models}
    assert EMBEDDED in names and f"{SECOND_MODEL_NAME}:latest" in names
    embedded = names[EMBEDDED]
    assert embedded.details.format == "gguf" and embedded.details.family == "llama"
    assert embedded.details.quantization_level == "Q4_1" and embedded.details.parameter_size == "134.5M"
    assert embedded.size > 90_000_000 and len(embedded.digest) == 64

    shown = client.show(EMBEDDED)
    assert shown.details.quantization_level == "Q4_1" and "completion" in shown.capabilities
    assert "im_start" in shown.template  # the model's own chat template
    assert "temperature" in shown.parameters and shown.modelinfo["general.architecture"] == "llama"
    assert shown.modelinfo["general.parameter_count"] == 134_515_008

    client.chat(model=EMBEDDED, messages=[])  # loads it (or finds it loaded)
    running = client.ps().models
    assert [m.model for m in running] == [EMBEDDED] and running[0].context_length > 0
    assert client._client.get("/api/version").json()["version"]


def test_chat_whole_and_streamed_agree_and_carry_ollamas_counters(client):
    options = {"temperature": 0, "num_predict": 12}
    whole = client.chat(model=EMBEDDED, messages=say("Name three colours."), options=options)
    assert whole.done and whole.done_reason == "length" and whole.eval_count == 12
    assert whole.message.role == "assistant" and whole.message.content
    assert whole.prompt_eval_count > 10 and whole.total_duration >= whole.eval_duration > 0
    assert whole.prompt_eval_duration > 0 and whole.load_duration >= 0

    parts = list(client.chat(model="smollm2-135m-instruct", messages=say("Name three colours."), options=options,
                             stream=True))  # the name in any case, without its tag
    assert all(not p.done for p in parts[:-1]) and parts[-1].done and parts[-1].message.content == ""
    assert "".join(p.message.content for p in parts) == whole.message.content
    assert parts[-1].eval_count == 12 and parts[-1].done_reason == "length"


def test_generate_whole_streamed_and_continued_from_its_context(client):
    options = {"temperature": 0, "num_predict": 8}
    whole = client.generate(model=EMBEDDED, prompt="My name is Ana.", options=options)
    streamed = list(client.generate(model=EMBEDDED, prompt="My name is Ana.", options=options, stream=True))
    assert "".join(p.response for p in streamed) == whole.response and whole.eval_count == 8
    assert whole.context and whole.context[-8:] == streamed[-1].context[-8:]
    follow = client.generate(model=EMBEDDED, prompt="What is my name?", context=whole.context, options=options)
    assert follow.prompt_eval_count > len(whole.context)  # the earlier tokens come first

    raw = client.generate(model=EMBEDDED, prompt="The capital of France is", raw=True, options=options)
    assert raw.response and raw.context is None  # raw: no template, no context (as Ollama)


def test_format_json_schema_and_json_mode(client):
    schema = {"type": "object", "properties": {"name": {"type": "string"}, "age": {"type": "integer"}},
              "required": ["name", "age"]}
    reply = client.chat(model=EMBEDDED, messages=say("Give me a person as JSON."), format=schema,
                        options={"temperature": 0, "num_predict": 60})
    person = json.loads(reply.message.content)
    assert set(person) == {"name", "age"} and isinstance(person["age"], int)

    reply = client.chat(model=EMBEDDED, messages=say("Name a colour. Respond using JSON"), format="json",
                        options={"temperature": 0, "num_predict": 120})
    assert reply.done_reason == "stop" and isinstance(json.loads(reply.message.content), dict)


def test_a_seeded_request_repeats_exactly(client):
    for options in ({"temperature": 0, "seed": 7, "num_predict": 16},
                    {"temperature": 0.9, "seed": 7, "num_predict": 16}):
        first, second = (client.chat(model=EMBEDDED, messages=say("Tell me about owls."), options=options)
                         for _ in range(2))
        assert first.message.content == second.message.content and first.eval_count == 16
    other = client.chat(model=EMBEDDED, messages=say("Tell me about owls."),
                        options={"temperature": 0.9, "seed": 8, "num_predict": 16})
    assert other.message.content != first.message.content


def test_tools_come_back_as_ollama_tool_calls_and_their_results_are_taken(client):
    options = {"temperature": 1.0, "num_predict": 40}
    for seed in range(16):
        reply = client.chat(model=EMBEDDED, messages=CALLED_BEFORE, tools=[WEATHER], options={**options, "seed": seed})
        if reply.message.tool_calls:
            break
    else:
        pytest.fail("no seed of 16 gave a tool call")
    call = reply.message.tool_calls[0]
    assert call.function.name == "get_weather" and call.function.arguments == {"city": "Tokyo"}  # an object
    assert reply.done_reason == "stop"

    streamed = list(client.chat(model=EMBEDDED, messages=CALLED_BEFORE, tools=[WEATHER],
                                options={**options, "seed": seed}, stream=True))
    calls = [c for p in streamed for c in p.message.tool_calls or []]
    assert [c.function for c in calls] == [call.function]
    assert "<tool_call>" not in "".join(p.message.content for p in streamed)

    answer = client.chat(model=EMBEDDED, tools=[WEATHER], options={"temperature": 0, "num_predict": 12}, messages=[
        *CALLED_BEFORE, reply.message, {"role": "tool", "content": "rainy, 12 C", "tool_name": "get_weather"}])
    assert answer.message.content and answer.done


def test_refusals_in_ollamas_shape(client, server):
    with pytest.raises(ollama.ResponseError) as missing:
        client.chat(model="llama3.2", messages=say("Hi"))
    assert missing.value.status_code == 404 and "llama3.2" in missing.value.error
    with pytest.raises(ollama.ResponseError) as images:
        client.chat(model=EMBEDDED, messages=[{"role": "user", "content": "What is this?", "images": [b"\x89PNG"]}])
    assert images.value.status_code == 400 and "does not take images" in images.value.error
    with pytest.raises(ollama.ResponseError) as images:
        client.generate(model=EMBEDDED, prompt="What is this?", images=[b"\x89PNG"])
    assert images.value.status_code == 400
    for refused in (lambda: client.pull("llama3.2"), lambda: client.delete(EMBEDDED),
                    lambda: client.create("mine", from_=EMBEDDED)):
        with pytest.raises(ollama.ResponseError) as error:
            refused()
        assert error.value.status_code == 400 and "never downloads" in error.value.error
    with pytest.raises(ollama.ResponseError) as embed:
        client.embed(model=EMBEDDED, input="Hello")
    assert embed.value.status_code == 400 and "cannot embed" in embed.value.error
    with pytest.raises(ollama.ResponseError) as thinking:
        client.chat(model=EMBEDDED, messages=say("Hi"), think=True)
    assert thinking.value.status_code == 400 and "does not support thinking" in thinking.value.error
    with pytest.raises(ollama.ResponseError) as bad:
        client.chat(model=EMBEDDED, messages=say("Hi"), options={"temperature": -1})
    assert bad.value.status_code == 400 and "temperature" in bad.value.error
    # the token rules hold on the main port, in Ollama's error shape
    with pytest.raises(ollama.ResponseError) as unauthorized:
        ollama.Client(host=server.url).list()
    assert unauthorized.value.status_code == 401 and "token" in unauthorized.value.error


def test_num_ctx_is_clamped_to_the_engines_context_and_a_chat_is_cut_to_fit_it(client, server):
    with httpx.Client(base_url=server.url, headers={"Authorization": f"Bearer {server.token}"}) as api:
        body = {"model": EMBEDDED, "messages": say("Hi"), "stream": False,
                "options": {"num_ctx": 10_000_000, "num_predict": 2}}
        engine = api.post("/api/chat", json=body)
        limit = int(engine.headers["X-Localchat-Num-Ctx"])
        assert engine.status_code == 200 and 0 < limit < 10_000_000 == body["options"]["num_ctx"]
        assert limit == client.ps().models[0].context_length
    history = [m for i in range(12) for m in (*say(f"Tell me fact number {i} about the sea."),
                                              {"role": "assistant", "content": f"Fact {i}: the sea is salty."})]
    whole = client.chat(model=EMBEDDED, messages=[*history, *say("Thanks.")], options={"num_predict": 2})
    cut = client.chat(model=EMBEDDED, messages=[*history, *say("Thanks.")], options={"num_predict": 2, "num_ctx": 96})
    assert whole.prompt_eval_count > 200 and cut.prompt_eval_count < 96  # the oldest messages left out, as Ollama
    with pytest.raises(ollama.ResponseError) as too_long:
        client.generate(model=EMBEDDED, prompt="sea " * 200, options={"num_ctx": 64})
    assert too_long.value.status_code == 400 and "num_ctx" in too_long.value.error


def test_a_request_naming_another_model_switches_to_it_and_back(client, server):
    tiny = client.chat(model=SECOND_MODEL_NAME, messages=say("Hi"), options={"num_predict": 4, "seed": 1})
    assert tiny.model == SECOND_MODEL_NAME and tiny.eval_count == 4 and tiny.load_duration > 0
    assert httpx.get(f"{server.url}/health").json()["model"] == SECOND_MODEL_NAME
    assert [m.model for m in client.ps().models] == [f"{SECOND_MODEL_NAME}:latest"]
    back = client.chat(model=EMBEDDED, messages=say("Hi"), options={"num_predict": 4})
    assert back.eval_count == 4 and httpx.get(f"{server.url}/health").json()["model"] == EMBEDDED_NAME


def test_concurrent_requests_for_two_models_are_served_in_turn(client, server):
    results, errors = {}, []

    def ask(name: str, key: str) -> None:
        try:
            results[key] = list(client.chat(model=name, messages=say("Count to twenty."), stream=True,
                                            options={"num_predict": 24, "temperature": 0}))
        except Exception as error:  # noqa: BLE001 - collected and reported below
            errors.append(error)

    threads = [threading.Thread(target=ask, args=(name, f"{name}-{i}"))
               for i in range(2) for name in (EMBEDDED, SECOND_MODEL_NAME)]
    for thread in threads:
        thread.start()
        time.sleep(0.05)
    for thread in threads:
        thread.join(180)
    assert not errors and len(results) == 4
    for parts in results.values():
        assert parts[-1].done and parts[-1].eval_count == 24  # each whole: none was stopped by another's switch
    same = [results[f"{EMBEDDED}-{i}"] for i in range(2)]
    assert "".join(p.message.content for p in same[0]) == "".join(p.message.content for p in same[1])


def test_keep_alive_0_unloads_and_the_next_request_loads_again(client, server):
    client.chat(model=EMBEDDED, messages=[])
    unloaded = client.generate(model=EMBEDDED, keep_alive=0)
    assert unloaded.done_reason == "unload"
    deadline = time.monotonic() + 30
    while httpx.get(f"{server.url}/health").json()["status"] != "unloaded":
        assert time.monotonic() < deadline, "the model was not unloaded"
        time.sleep(0.05)
    assert client.ps().models == []
    again = client.chat(model=EMBEDDED, messages=say("Hi"), options={"num_predict": 3})
    assert again.eval_count == 3 and again.load_duration > 100_000_000  # it loaded again (> 0.1 s)
    assert httpx.get(f"{server.url}/health").json()["status"] == "ready"
    # a request's keep_alive of some seconds unloads it once that long passed with nothing running
    client.chat(model=EMBEDDED, messages=say("Hi"), options={"num_predict": 2}, keep_alive="1s")
    expires = client.ps().models[0].expires_at
    assert expires.year < 2300
    deadline = time.monotonic() + 30
    while httpx.get(f"{server.url}/health").json()["status"] != "unloaded":
        assert time.monotonic() < deadline, "keep_alive 1s did not unload the model"
        time.sleep(0.1)
    # a conversation's message waits for the model to load again, as an Ollama request does
    with server.client() as api:
        conversation = api.post("/api/conversations", json={"settings": {"max_tokens": 3}}).json()
        events = stream_api(api, f"/api/conversations/{conversation['id']}/messages", {"content": "Hi"})
    assert events[-1]["type"] == "done" and events[-1]["message"]["content"]
    assert httpx.get(f"{server.url}/health").json()["status"] == "ready"


def test_the_tokenless_listener_serves_inference_only_and_no_web_page(server):
    listener = f"http://127.0.0.1:{server.ollama_port}"
    plain = ollama.Client(host=listener)  # no token: for clients that cannot send one
    assert EMBEDDED in {m.model for m in plain.list().models}
    assert plain.chat(model=EMBEDDED, messages=say("Hi"), options={"num_predict": 3}).eval_count == 3
    assert httpx.get(listener).text == "Ollama is running"
    for path in ("/api/conversations", "/api/documents", "/api/models", "/v1/models", "/api/openapi.json"):
        assert httpx.get(listener + path).status_code == 404, path  # never conversations, nor the rest
    body = {"model": EMBEDDED, "messages": say("Hi"), "stream": False}
    for headers in ({"Origin": "http://127.0.0.1:1234"}, {"Origin": "null"}, {"Sec-Fetch-Site": "cross-site"},
                    {"Sec-Fetch-Site": "same-site"}):
        refused = httpx.post(listener + "/api/chat", json=body, headers=headers)
        assert refused.status_code == 403 and "web pages" in refused.json()["error"], headers
    rebound = httpx.post(listener + "/api/chat", json=body, headers={"Host": "attacker.example:11434"})
    assert rebound.status_code == 403 and "Host" in rebound.json()["error"]


def test_langchain_chat_ollama_talks_to_localchat(server):
    from langchain_ollama import ChatOllama

    llm = ChatOllama(model=EMBEDDED_NAME, base_url=server.url, temperature=0, num_predict=8, seed=3,
                     client_kwargs={"headers": {"Authorization": f"Bearer {server.token}"}})
    message = llm.invoke("What is the capital of France?")
    assert message.content and message.response_metadata["done_reason"] == "length"
    assert message.usage_metadata["output_tokens"] == 8 and message.usage_metadata["input_tokens"] > 10
    streamed = "".join(chunk.content for chunk in llm.stream("What is the capital of France?"))
    assert streamed == message.content
