"""What a request returns: whole results from LLM, and the deltas the engine streams."""

from dataclasses import dataclass, field


class EngineFailed(RuntimeError):
    """A request ended because the engine failed while running it (the engine itself goes on)."""


class RequestFailed(ValueError):
    """A request failed alone, for a cause of its own (its grammar gave up); the others go on."""


@dataclass
class TokenLogprob:
    token_id: int
    logprob: float
    top: list[tuple[int, float]]  # the most likely tokens at this position, best first


@dataclass
class CompletionOutput:
    index: int
    text: str = ""  # a thinking model's answer only
    token_ids: list[int] = field(default_factory=list)  # every token, the thinking's too
    finish_reason: str | None = None  # "stop", "length" or "abort"
    logprobs: list[TokenLogprob] | None = None
    # speculative decoding, the reply's totals so far: draft tokens scored, and of them kept
    num_draft_tokens: int = 0
    num_accepted_tokens: int = 0
    reasoning: str = ""  # a thinking model's thinking, apart from its answer (reasoning.py)
    num_reasoning_tokens: int = 0  # the reply's total so far


@dataclass
class RequestOutput:
    request_id: str
    prompt_token_ids: list[int]
    num_cached_tokens: int  # prompt tokens whose KV came from the prefix cache
    outputs: list[CompletionOutput]  # in a delta: only the replies that changed, with their new part
    finished: bool = False  # every reply has finished
    error: str | None = None  # the request failed alone (its grammar gave up): why; its replies end with "abort"

    def merge(self, delta: "RequestOutput") -> None:
        """Add a delta of the same request to this output."""
        by_index = {o.index: o for o in self.outputs}
        for part in delta.outputs:
            whole = by_index.get(part.index)
            if whole is None:
                whole = by_index[part.index] = CompletionOutput(part.index)
                if part.logprobs is not None:
                    whole.logprobs = []
            whole.text += part.text
            whole.reasoning += part.reasoning
            whole.num_reasoning_tokens = part.num_reasoning_tokens
            whole.token_ids += part.token_ids
            if part.logprobs is not None:
                whole.logprobs += part.logprobs
            whole.finish_reason = part.finish_reason or whole.finish_reason
            whole.num_draft_tokens, whole.num_accepted_tokens = part.num_draft_tokens, part.num_accepted_tokens
        self.outputs = sorted(by_index.values(), key=lambda o: o.index)
        self.num_cached_tokens = delta.num_cached_tokens
        self.finished = delta.finished
        self.error = delta.error or self.error
