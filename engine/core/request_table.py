"""The requests in flight, by id: each one's prompt, params and replies. The table is the one writer of a request's
state (RequestState): the engine adds a request, its replies are tracked as they start, a step's outcomes are recorded
(draft counts, a failure), and the request leaves the table with its last delta (or all at once after a failed step).
Each reply's text state (ReplyState) is the output processor's own."""

from collections.abc import Iterator
from dataclasses import dataclass, field
from typing import TYPE_CHECKING

from localchat.engine.core.sequence import Sequence
from localchat.engine.frontend.reasoning import Phase
from localchat.engine.sampling_params import SamplingParams

if TYPE_CHECKING:
    from localchat.engine.core.step_apply import AppliedStep
    from localchat.engine.frontend.output_processor import ReplyState


@dataclass
class RequestState:
    request_id: str
    prompt_token_ids: list[int]
    params: SamplingParams
    seqs: list[Sequence] = field(default_factory=list)  # by reply index, as they are forked
    replies: list["ReplyState"] = field(default_factory=list)
    error: str | None = None  # why it failed alone (its grammar), if it did
    first_phase: Phase | None = None  # a thinking model's: where each reply starts (None: no thinking to take apart)
    end_thinking: bool = False  # asked to answer now: each reply's thinking is closed at its next token

    @property
    def finished(self) -> bool:
        return len(self.seqs) == self.params.n and all(s.is_finished for s in self.seqs)


class RequestTable:
    def __init__(self):
        self._requests: dict[str, RequestState] = {}

    def add(self, request: RequestState) -> None:
        self._requests[request.request_id] = request

    def remove(self, request_id: str) -> None:
        del self._requests[request_id]

    def clear(self) -> None:
        """Forget every request (after a failed step)."""
        self._requests.clear()

    def track(self, seq: Sequence, reply: "ReplyState") -> None:
        """A reply of its request starts (the first, or one started beside it once the prompt was computed), with its
        text state."""
        request = self._requests[seq.request_id]
        request.seqs.append(seq)
        request.replies.append(reply)

    def end_thinking(self, request_id: str) -> bool:
        """Ask a request's replies to close their thinking at their next token; False if it has none to close (an
        unknown request, or a model that does not think)."""
        request = self._requests.get(request_id)
        if request is None or request.first_phase is None:
            return False
        request.end_thinking = True
        return True

    def record(self, applied: "AppliedStep") -> None:
        """A step's outcomes: each scored draft counts in its reply, and a request that failed alone says why in its
        last delta."""
        for outcome in applied.drafts:
            reply = self._requests[outcome.seq.request_id].replies[outcome.seq.index]
            reply.num_draft_tokens += outcome.drafted
            reply.num_accepted_tokens += outcome.kept
        for request_id, error in applied.failed.items():
            self._requests[request_id].error = error

    def get(self, request_id: str) -> RequestState | None:
        return self._requests.get(request_id)

    def __getitem__(self, request_id: str) -> RequestState:
        return self._requests[request_id]

    def __contains__(self, request_id: object) -> bool:
        return request_id in self._requests

    def __iter__(self) -> Iterator[str]:
        return iter(self._requests)

    def __len__(self) -> int:
        return len(self._requests)
