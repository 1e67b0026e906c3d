"""The output side of the engine: per request, its replies' text (incremental detokenizing: it finds the stop
strings, and takes a thinking model's reasoning apart), logprobs, and the deltas streamed to callers. It writes only
each reply's text state (ReplyState, its own): the scheduler decides when a reply ends, the engine's step when a
reply's thinking is closed (from what forced_tokens() says) and when its answer's grammar begins (answer_begun()), and
the request table (the engine's) writes the requests' state, the replies it tracks among them."""

from dataclasses import dataclass, field

from localchat.engine.core.request_table import RequestState, RequestTable
from localchat.engine.core.sequence import Sequence
from localchat.engine.core.step_outputs import SamplerOutput
from localchat.engine.frontend.detokenizer import IncrementalDetokenizer
from localchat.engine.frontend.outputs import CompletionOutput, RequestOutput, TokenLogprob
from localchat.engine.frontend.reasoning import Phase, ReasoningMarkers, ReasoningParser


@dataclass
class ReplyState:
    """One reply's text so far and how much of it the deltas have carried."""

    detokenizer: IncrementalDetokenizer
    logprobs: list[TokenLogprob] = field(default_factory=list)
    num_reasoning_tokens: int = 0  # taken inside the thinking block (its markers, and the closing the engine wrote,
    # not counted)
    sent_text: int = 0
    sent_reasoning: int = 0
    sent_tokens: int = 0
    sent_logprobs: int = 0
    sent_finished: bool = False
    num_draft_tokens: int = 0  # drafted for this reply and scored (speculator.py); written by the request table
    num_accepted_tokens: int = 0  # of them, kept


class OutputProcessor:
    def __init__(self, tokenizer, requests: RequestTable, markers: ReasoningMarkers | None = None):
        self.tokenizer = tokenizer
        self.requests = requests  # the engine's: read here
        self.markers = markers  # the model's reasoning markers, if it thinks
        self.generated_tokens = 0

    def track(self, seq: Sequence) -> None:
        """A reply of its request starts (the first, or one started beside it once the prompt was computed)."""
        request = self.requests[seq.request_id]
        parser = ReasoningParser(self.markers, request.first_phase) if request.first_phase is not None else None
        self.requests.track(seq, ReplyState(IncrementalDetokenizer(
            self.tokenizer, request.prompt_token_ids, request.params.stop, request.params.skip_special_tokens,
            parser)))

    def _reply(self, seq: Sequence) -> ReplyState:
        """seq's reply (tracked now if it is seen for the first time)."""
        request = self.requests[seq.request_id]
        if seq.index == len(request.seqs):
            self.track(seq)
        return request.replies[seq.index]

    def add_tokens(self, seqs: list[Sequence], sampled: SamplerOutput, forced: list[bool] | None = None
                   ) -> list[bool]:
        """Each reply's sampled token into its text and logprobs; for each, whether its text now ends at a stop
        string. forced: which tokens the engine wrote (forced_tokens), not the model (not counted as thinking)."""
        stopped = []
        for k, (seq, token, logprob) in enumerate(zip(seqs, sampled.token_ids, sampled.logprobs)):
            reply = self._reply(seq)
            self.generated_tokens += 1
            parser = reply.detokenizer.reasoning
            was_thinking = parser is not None and parser.thinking
            reply.detokenizer.add(token)
            if was_thinking and parser.thinking and not (forced and forced[k]):
                reply.num_reasoning_tokens += 1
            if logprob is not None:
                reply.logprobs.append(logprob)
            stopped.append(reply.detokenizer.stopped)
        return stopped

    def forced_tokens(self, seq: Sequence) -> tuple[int, ...]:
        """The tokens the engine writes for seq in place of its next sampled one, if any: the closing marker of a
        thinking reply whose budget is spent or that was asked to answer now, the opening one of a reply whose
        answer has a grammar (the thinking comes first, free)."""
        reply = self._reply(seq)
        parser = reply.detokenizer.reasoning
        if parser is None:
            return ()
        request = self.requests[seq.request_id]
        budget = request.params.thinking_token_budget
        if parser.thinking and (request.end_thinking or (budget is not None and reply.num_reasoning_tokens >= budget)):
            return self.markers.closing_ids
        if parser.phase is Phase.BEFORE and seq.grammar_waits_for_answer and seq.num_output_tokens == 0:
            return self.markers.opening_ids
        return ()

    def answer_begun(self, seq: Sequence) -> bool:
        """seq's grammar waits for its answer, which has begun now (the reply is past its thinking)."""
        if not seq.grammar_waits_for_answer or seq.is_finished:
            return False
        parser = self._reply(seq).detokenizer.reasoning
        return parser is None or parser.phase is Phase.ANSWER

    def delta(self, request: RequestState) -> RequestOutput:
        """What changed in a request since its last delta."""
        outputs = []
        for k, (seq, reply) in enumerate(zip(request.seqs, request.replies)):
            if reply.sent_finished:
                continue
            text = reply.detokenizer.visible_text(seq.is_finished)
            reasoning = reply.detokenizer.reasoning_text
            tokens = seq.output_token_ids
            if (len(text) == reply.sent_text and len(tokens) == reply.sent_tokens and not seq.is_finished):
                continue
            outputs.append(CompletionOutput(
                index=k, text=text[reply.sent_text:], token_ids=tokens[reply.sent_tokens:],
                finish_reason=seq.finish_reason,
                logprobs=reply.logprobs[reply.sent_logprobs:] if request.params.logprobs is not None else None,
                num_draft_tokens=reply.num_draft_tokens, num_accepted_tokens=reply.num_accepted_tokens,
                reasoning=reasoning[reply.sent_reasoning:], num_reasoning_tokens=reply.num_reasoning_tokens))
            reply.sent_text, reply.sent_tokens, reply.sent_logprobs = len(text), len(tokens), len(reply.logprobs)
            reply.sent_reasoning = len(reasoning)
            reply.sent_finished = seq.is_finished
        return RequestOutput(request.request_id, request.prompt_token_ids, request.seqs[0].num_cached_tokens, outputs,
                             request.finished, request.error)
