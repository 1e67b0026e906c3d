"""The output side of the engine: per request, its replies' text (incremental detokenizing: it finds the stop
strings), logprobs, and the deltas streamed to callers. It changes no engine state: the scheduler decides when a
reply ends."""

from dataclasses import dataclass, field

from localchat.engine.detokenizer import IncrementalDetokenizer
from localchat.engine.outputs import CompletionOutput, RequestOutput, TokenLogprob
from localchat.engine.sampler import SamplerOutput
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
    seqs: list[Sequence] = field(default_factory=list)  # by reply index, as they are forked
    replies: list[ReplyState] = field(default_factory=list)
    error: str | None = None  # why it failed alone (its grammar), if it did

    @property
    def finished(self) -> bool:
        return len(self.seqs) == self.params.n and all(s.is_finished for s in self.seqs)


class OutputProcessor:
    def __init__(self, tokenizer):
        self.tokenizer = tokenizer
        self.requests: dict[str, RequestState] = {}
        self.generated_tokens = 0

    def add(self, request: RequestState) -> None:
        self.requests[request.request_id] = request

    def clear(self) -> None:
        """Forget every request (after a failed step)."""
        self.requests.clear()

    def track(self, seq: Sequence) -> None:
        """A reply of its request starts (the first, or one started beside it once the prompt was computed)."""
        request = self.requests[seq.request_id]
        request.seqs.append(seq)
        request.replies.append(ReplyState(IncrementalDetokenizer(
            self.tokenizer, request.prompt_token_ids, request.params.stop, request.params.skip_special_tokens)))

    def add_tokens(self, seqs: list[Sequence], sampled: SamplerOutput) -> list[bool]:
        """Each reply's sampled token into its text and logprobs (a reply seen for the first time is tracked);
        for each, whether its text now ends at a stop string."""
        stopped = []
        for seq, token, logprob in zip(seqs, sampled.token_ids, sampled.logprobs):
            request = self.requests[seq.request_id]
            if seq.index == len(request.seqs):
                self.track(seq)
            reply = request.replies[seq.index]
            self.generated_tokens += 1
            reply.detokenizer.add(token)
            if logprob is not None:
                reply.logprobs.append(logprob)
            stopped.append(reply.detokenizer.stopped)
        return stopped

    def fail(self, request_id: str, error: str) -> None:
        """The request failed alone: its last delta says why."""
        self.requests[request_id].error = error

    def deltas(self, seqs: list[Sequence]) -> list[RequestOutput]:
        """The deltas of the requests of these sequences, once each."""
        return [self.delta(request_id) for request_id in dict.fromkeys(seq.request_id for seq in seqs)]

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
                logprobs=reply.logprobs[reply.sent_logprobs:] if request.params.logprobs is not None else None,
                num_draft_tokens=seq.num_draft_tokens, num_accepted_tokens=seq.num_accepted_tokens))
            reply.sent_text, reply.sent_tokens, reply.sent_logprobs = len(text), len(tokens), len(reply.logprobs)
            reply.sent_finished = seq.is_finished
        finished = request.finished
        if finished:
            del self.requests[request_id]
        return RequestOutput(request_id, request.prompt_token_ids, request.seqs[0].num_cached_tokens, outputs,
                             finished, request.error)
