"""`localchat chat "question"`: one reply streamed to stdout, nothing stored.

A running engine process with the same model answers it (its cache is warm, nothing to load); otherwise the
embedded engine runs in this process and ends with it, so a one-shot question leaves no server behind."""

import sys
from collections.abc import Iterator

import httpx
import msgspec

from localchat.app import paths
from localchat.app.chat_defaults import chat_defaults
from localchat.app.client import engine_process
from localchat.app.client.engine_client import raise_for_status
from localchat.app.engine_state import read_state
from localchat.app.protocol.conversations import SAMPLING_FIELDS, ConversationDefaults
from localchat.app.protocol.openai import ChatCompletionChunk
from localchat.app.sampling_defaults import sampling_defaults
from localchat.app.sse import data_lines
from localchat.engine.loading.model_catalog import chosen_model


def reply(question: str, system: str | None, model: str | None, sampling: dict) -> Iterator[str]:
    """The reply's text as it is generated. `sampling`: temperature, top_p, max_tokens, seed; a system prompt or a
    temperature of None: the model's chat defaults, as a new conversation gets them (app/chat_defaults.py)."""
    state = read_state()
    health = engine_process.health(state.url) if state else None
    if health is not None and health.status == "ready" and model in (None, health.model):
        headers = {"Authorization": f"Bearer {paths.load_or_create_token()}"}
        defaults = _engine_defaults(state.url, headers)
        return _from_engine_process(state.url, headers, _chat(question, system, defaults),
                                    _sampling(sampling, defaults))
    model_file = chosen_model(model)
    defaults = chat_defaults(model_file.parameters if model_file else None,
                             sampling_defaults(model_file.sampling if model_file else None))
    return _in_process(_chat(question, system, defaults), model, _sampling(sampling, defaults))


def _chat(question: str, system: str | None, defaults: ConversationDefaults) -> list[dict]:
    system = defaults.system_prompt if system is None else system
    question_only = [{"role": "user", "content": question}]
    return [{"role": "system", "content": system}, *question_only] if system else question_only


def _sampling(sampling: dict, defaults: ConversationDefaults) -> dict:
    """The values given, and a new chat's for the sampling values not given."""
    fields = {name: getattr(defaults.settings, name) for name in SAMPLING_FIELDS}
    return sampling | {k: v for k, v in fields.items() if sampling.get(k) is None}


def _engine_defaults(url: str, headers: dict) -> ConversationDefaults:
    response = httpx.get(f"{url}/api/conversation-defaults", headers=headers, timeout=30)
    if response.status_code >= 400:
        raise_for_status(response.status_code, response.content)
    return msgspec.json.decode(response.content, type=ConversationDefaults)


def _from_engine_process(url: str, headers: dict, messages: list[dict], sampling: dict) -> Iterator[str]:
    body = {"messages": messages, "stream": True, **sampling}
    with httpx.stream("POST", f"{url}/v1/chat/completions", json=body, headers=headers,
                      timeout=httpx.Timeout(30.0, read=None)) as response:
        if response.status_code >= 400:
            raise_for_status(response.status_code, response.read())
        for data in data_lines(response.iter_lines()):
            for choice in msgspec.json.decode(data, type=ChatCompletionChunk).choices:
                if choice.delta.content:
                    yield choice.delta.content


def _in_process(messages: list[dict], model: str | None, sampling: dict) -> Iterator[str]:
    from localchat.engine import SamplingParams
    from localchat.engine.config import EngineConfig
    from localchat.engine.frontend.llm_engine import LLMEngine

    print("loading the model (no engine process is running)...", file=sys.stderr, flush=True)
    engine = LLMEngine(EngineConfig(model))
    if engine.tokenizer.chat_template is None:
        raise ValueError(f"{engine.model_name} has no chat template (a base model, not a chat model): it only "
                         "continues text, which `localchat serve` answers on /v1/completions")
    request_id = engine.add_request(engine.apply_chat_template(messages), SamplingParams(**sampling))
    while engine.has_unfinished_requests():
        for delta in engine.step():
            if delta.request_id == request_id:
                for part in delta.outputs:
                    if part.text:
                        yield part.text

