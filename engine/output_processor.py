"""The output side of the engine: per request, its replies' text (incremental detokenizing), stop strings, stop
tokens and grammars, logprobs, and the deltas streamed to callers."""

from dataclasses import dataclass, field

from localchat.engine.detokenizer import IncrementalDetokenizer
from localchat.engine.outputs import CompletionOutput, RequestOutput, TokenLogprob
from localchat.engine.sampling_params import SamplingParams
from localchat.engine.sequence import Sequence


@dataclass
class ReplyState:
    """One reply's text so far and how much of it the deltas have carried."""

    detokenizer: IncrementalDetokenizer
    logprobs: list[TokenLogprob] = field(default_factory=list)
    sent_text: int = 0
    sent_tokens: int = 0
    sent_logprobs: int = 0
    sent_finished: bool = False


@dataclass
class RequestState:
    request_id: str
    prompt_token_ids: list[int]
    params: SamplingParams
    max_tokens: int
    seqs: list[Sequence] = field(default_factory=list)  # by reply index, as they are forked
    replies: list[ReplyState] = field(default_factory=list)
    error: str | None = None  # why it failed alone (its grammar), if it did

    @property
    def finished(self) -> bool:
        return len(self.seqs) == self.params.n and all(s.is_finished for s in self.seqs)


class OutputProcessor:
    def __init__(self, tokenizer, eos_token_ids: set[int], max_model_len: int):
        self.tokenizer, self.eos_token_ids, self.max_model_len = tokenizer, eos_token_ids, max_model_len
        self.requests: dict[str, RequestState] = {}
        self.generated_tokens = 0

    def add(self, request: RequestState) -> None:
        self.requests[request.request_id] = request

    def clear(self) -> None:
        """Forget every request (after a failed step)."""
        self.requests.clear()

    def track(self, seq: Sequence) -> None:
        """A reply of its request starts (the first, or one forked from it)."""
        request = self.requests[seq.request_id]
        request.seqs.append(seq)
        request.replies.append(ReplyState(IncrementalDetokenizer(
            self.tokenizer, request.prompt_token_ids, request.params.stop, request.params.skip_special_tokens)))

    def append(self, seq: Sequence, token: int, logprob: TokenLogprob | None) -> str | None:
        """Add a sampled token to its reply; the finish reason if the reply ends with it ("stop" also when it
        completes the reply's grammar). GrammarFailed if the reply's grammar gives up on it."""
        request = self.requests[seq.request_id]
        reply = request.replies[seq.index]
        seq.token_ids.append(token)
        self.generated_tokens += 1
        reply.detokenizer.add(token)
        if logprob is not None:
            reply.logprobs.append(logprob)
        params = request.params
        grammar_done = seq.matcher is not None and seq.matcher.advance(token)
        if grammar_done or reply.detokenizer.stopped or token in params.stop_token_ids or (
                not params.ignore_eos and token in self.eos_token_ids):
            return "stop"
        if seq.num_output_tokens >= request.max_tokens or len(seq) >= self.max_model_len:
            return "length"
        return None

    def delta(self, request_id: str) -> RequestOutput:
        """What changed in a request since its last delta; a finished request is forgotten."""
        request = self.requests[request_id]
        outputs = []
        for k, (seq, reply) in enumerate(zip(request.seqs, request.replies)):
            text = reply.detokenizer.visible_text(seq.is_finished)
            tokens = seq.output_token_ids
            if reply.sent_finished or (len(text) == reply.sent_text and len(tokens) == reply.sent_tokens
                                       and not seq.is_finished):
                continue
            outputs.append(CompletionOutput(
                index=k, text=text[reply.sent_text:], token_ids=tokens[reply.sent_tokens:],
                finish_reason=seq.finish_reason,
                logprobs=reply.logprobs[reply.sent_logprobs:] if request.params.logprobs is not None else None))
            reply.sent_text, reply.sent_tokens, reply.sent_logprobs = len(text), len(tokens), len(reply.logprobs)
            reply.sent_finished = seq.is_finished
        finished = request.finished
        if finished:
            del self.requests[request_id]
        return RequestOutput(request_id, request.prompt_token_ids, request.seqs[0].num_cached_tokens, outputs,
                             finished, request.error)
