"""The offline entry point: generate replies for a list of prompts or chats."""

from localchat.engine.config import EngineConfig
from localchat.engine.frontend.llm_engine import LLMEngine
from localchat.engine.frontend.outputs import RequestOutput
from localchat.engine.sampling_params import SamplingParams
from localchat.engine.stats import EngineStats

Prompt = str | list[int]


class LLM:
    """`LLM()` loads the embedded model; the keyword arguments are EngineConfig's fields, and
    on_progress(stage, fraction) hears how loading goes."""

    def __init__(self, model: str | None = None, on_progress=None, **engine_args):
        self.engine = LLMEngine(EngineConfig(model, **engine_args), on_progress)

    @property
    def tokenizer(self):
        return self.engine.tokenizer

    def generate(self, prompts: Prompt | list[Prompt],
                 params: SamplingParams | list[SamplingParams] | None = None) -> list[RequestOutput]:
        """One RequestOutput per prompt, in order. A prompt is a string or a list of token ids; params is one
        SamplingParams for all prompts or one per prompt."""
        if isinstance(prompts, str) or (prompts and isinstance(prompts[0], int)):
            prompts = [prompts]
        if not isinstance(params, list):
            params = [params or SamplingParams()] * len(prompts)
        if len(params) != len(prompts):
            raise ValueError(f"{len(prompts)} prompts but {len(params)} sampling params")
        token_ids = [self.engine.tokenize(p) for p in prompts]
        for ids, p in zip(token_ids, params):  # check every prompt before any starts
            self.engine.check_request(ids, p)
        return self._run(token_ids, params)

    def chat(self, conversations: list[dict] | list[list[dict]],
             params: SamplingParams | list[SamplingParams] | None = None) -> list[RequestOutput]:
        """Replies to one conversation or a list of them (lists of {"role", "content"} messages)."""
        if conversations and isinstance(conversations[0], dict):
            conversations = [conversations]
        return self.generate([self.engine.apply_chat_template(c) for c in conversations], params)

    def stats(self) -> EngineStats:
        return self.engine.stats()

    def close(self) -> None:
        """Finish writing the KV cache's disk tier, if there is one."""
        self.engine.close()

    def _run(self, token_ids: list[list[int]], params: list[SamplingParams]) -> list[RequestOutput]:
        results: dict[str, RequestOutput] = {}
        for ids, p in zip(token_ids, params):
            request_id = self.engine.add_request(ids, p)
            results[request_id] = RequestOutput(request_id, ids, 0, [])
        try:
            while any(not r.finished for r in results.values()):
                for delta in self.engine.step():
                    if delta.request_id in results:
                        results[delta.request_id].merge(delta)
        finally:
            for request_id, result in results.items():
                if not result.finished:
                    self.engine.abort(request_id)
        return list(results.values())
