"""The official `openai` client against a real `localchat serve`."""

import httpx
import openai
import pytest

pytestmark = pytest.mark.slow  # a real `localchat serve`: left out of `./dev test --fast`

MODEL = "SmolLM2-135M-Instruct"
LONG_SYSTEM = " ".join(f"Rule {i}: answer politely and briefly, in plain words." for i in range(30))


@pytest.fixture(scope="module")
def client(server) -> openai.OpenAI:
    return openai.OpenAI(base_url=f"{server.url}/v1", api_key=server.token, max_retries=0, timeout=120)


def test_lists_the_model(client):
    assert [m.id for m in client.models.list().data] == [MODEL]


def test_chat_completion(client):
    reply = client.chat.completions.create(model=MODEL, messages=[{"role": "user", "content": "Say hello."}],
                                           max_tokens=5, temperature=0, seed=1)
    choice = reply.choices[0]
    assert choice.message.role == "assistant" and choice.message.content
    assert choice.finish_reason in ("stop", "length")
    assert reply.usage.prompt_tokens > 0 and 0 < reply.usage.completion_tokens <= 5
    assert reply.usage.total_tokens == reply.usage.prompt_tokens + reply.usage.completion_tokens


def test_streamed_chat_completion_matches_the_whole_one(client):
    messages = [{"role": "user", "content": "Name a color."}]
    whole = client.chat.completions.create(model=MODEL, messages=messages, max_tokens=5, temperature=0)
    stream = client.chat.completions.create(model=MODEL, messages=messages, max_tokens=5, temperature=0,
                                            stream=True, stream_options={"include_usage": True})
    text, finish, usage = "", None, None
    for chunk in stream:
        if chunk.usage is not None:
            usage = chunk.usage
        for choice in chunk.choices:
            text += choice.delta.content or ""
            finish = choice.finish_reason or finish
    assert text == whole.choices[0].message.content  # greedy: the same reply
    assert finish == whole.choices[0].finish_reason
    assert usage.completion_tokens == whole.usage.completion_tokens
    assert usage.prompt_tokens_details.cached_tokens > 0  # the same prompt again


def test_n_replies(client):
    reply = client.chat.completions.create(model=MODEL, messages=[{"role": "user", "content": "Tell me a fact."}],
                                           n=3, max_tokens=5, temperature=1.0, seed=7)
    assert sorted(c.index for c in reply.choices) == [0, 1, 2]
    assert all(c.message.content for c in reply.choices)
    assert len({c.message.content for c in reply.choices}) > 1  # three samples, not one copied
    # reply k samples with seed + k: the same request gives the same replies
    again = client.chat.completions.create(model=MODEL, messages=[{"role": "user", "content": "Tell me a fact."}],
                                           n=3, max_tokens=5, temperature=1.0, seed=7)
    assert [c.message.content for c in again.choices] == [c.message.content for c in reply.choices]


def test_streamed_n_replies_each_finish(client):
    finishes = {}
    for chunk in client.chat.completions.create(model=MODEL, messages=[{"role": "user", "content": "Hi"}], n=3,
                                                max_tokens=6, stream=True):
        for choice in chunk.choices:
            if choice.finish_reason:
                finishes[choice.index] = choice.finish_reason
    assert set(finishes) == {0, 1, 2}


def test_repeated_long_prompt_hits_the_prefix_cache(client):
    messages = [{"role": "system", "content": LONG_SYSTEM}, {"role": "user", "content": "What is rule 3?"}]
    first = client.chat.completions.create(model=MODEL, messages=messages, max_tokens=4, temperature=0)
    second = client.chat.completions.create(model=MODEL, messages=messages, max_tokens=4, temperature=0)
    assert first.usage.prompt_tokens > 400
    assert second.usage.prompt_tokens == first.usage.prompt_tokens
    cached = second.usage.prompt_tokens_details.cached_tokens
    assert cached >= (first.usage.prompt_tokens - 1) // 16 * 16  # every full block of the prompt
    assert cached > first.usage.prompt_tokens_details.cached_tokens


def test_sampling_fields_and_logprobs(client):
    reply = client.chat.completions.create(
        model=MODEL, messages=[{"role": "user", "content": "Count: one, two,"}], max_completion_tokens=5,
        temperature=0.8, top_p=0.9, presence_penalty=0.5, frequency_penalty=0.5, seed=3,
        logprobs=True, top_logprobs=2, extra_body={"top_k": 20, "min_p": 0.05, "repetition_penalty": 1.1})
    choice = reply.choices[0]
    assert 0 < reply.usage.completion_tokens <= 5
    content = choice.logprobs.content
    assert len(content) == reply.usage.completion_tokens
    assert all(entry.logprob <= 0 and len(entry.top_logprobs) == 2 for entry in content)
    assert "".join(entry.token for entry in content) == choice.message.content


def test_stop_string(client):
    reply = client.chat.completions.create(model=MODEL, messages=[{"role": "user", "content": "List 1, 2, 3, 4"}],
                                           max_tokens=12, temperature=0, stop=[","])
    assert "," not in reply.choices[0].message.content


def test_completions_with_strings_and_token_ids(client, server):
    reply = client.completions.create(model=MODEL, prompt=["Once upon a time", "The capital of France is"],
                                      max_tokens=4, temperature=0, n=2, logprobs=1)
    assert sorted(c.index for c in reply.choices) == [0, 1, 2, 3]
    assert reply.choices[0].text == reply.choices[1].text  # greedy twice
    assert all(len(c.logprobs.tokens) == len(c.logprobs.token_logprobs) > 0 for c in reply.choices)
    ids = client.completions.create(model=MODEL, prompt=[504, 3458, 253], max_tokens=3, temperature=0)
    assert ids.usage.prompt_tokens == 3
    streamed = "".join(chunk.choices[0].text for chunk in client.completions.create(
        model=MODEL, prompt="Once upon a time", max_tokens=4, temperature=0, stream=True) if chunk.choices)
    assert streamed == reply.choices[0].text


def test_errors_reach_the_openai_client_as_its_exceptions(client):
    with pytest.raises(openai.NotFoundError, match="does not exist"):
        client.chat.completions.create(model="gpt-4", messages=[{"role": "user", "content": "x"}])
    with pytest.raises(openai.BadRequestError, match="n must be"):
        client.chat.completions.create(model=MODEL, messages=[{"role": "user", "content": "x"}], n=99)
    with pytest.raises(openai.AuthenticationError):
        openai.OpenAI(base_url=str(client.base_url), api_key="wrong", max_retries=0).models.list()


def test_streaming_over_plain_http_ends_with_done(server):
    with server.client() as http, http.stream("POST", "/v1/chat/completions", json={
            "model": MODEL, "messages": [{"role": "user", "content": "Hi"}], "max_tokens": 3, "stream": True}) as r:
        assert r.headers["content-type"].startswith("text/event-stream")
        lines = [line for line in r.iter_lines() if line.startswith("data:")]
    assert lines[-1] == "data: [DONE]"
    assert isinstance(httpx.Response(200, content=lines[0][5:]).json()["choices"], list)
