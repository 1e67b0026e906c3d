"""A step's verified tokens applied to its replies, as plain decoding would take them: the first token of every
reply, then the second, ... (a draft kept gives a reply several). Each token goes into the reply's text first (the
text side finds stop strings, and a thinking reply's markers), then into its sequence (the scheduler: grammar,
blocks, the end of a reply); drafts are settled after. The result says what happened, typed (AppliedStep)."""

from dataclasses import dataclass, field
from typing import Protocol

from localchat.engine.core.scheduler import Scheduler
from localchat.engine.core.sequence import Sequence
from localchat.engine.core.step_outputs import SamplerOutput, VerifiedTokens


class TextSide(Protocol):
    """What applying tokens asks of the replies' text (the engine's OutputProcessor)."""

    def add_tokens(self, seqs: list[Sequence], sampled: SamplerOutput, forced: list[bool]) -> list[bool]:
        """Each reply's token into its text; whether each text now ends at a stop string."""

    def forced_tokens(self, seq: Sequence) -> tuple[int, ...]:
        """The tokens the engine writes for seq in place of its next sampled ones (a thinking reply's markers)."""

    def answer_begun(self, seq: Sequence) -> bool:
        """seq's grammar waits for its answer, which has begun now."""


@dataclass
class DraftOutcome:
    """How one reply's draft fared in the step: tokens scored, and of them kept."""

    seq: Sequence
    drafted: int
    kept: int


@dataclass
class AppliedStep:
    """What a step's tokens did: the replies sampled (their requests' deltas go out), the requests that failed (their
    grammar refused a token: why), and each scored draft's outcome."""

    seqs: list[Sequence]
    failed: dict[str, str] = field(default_factory=dict)
    drafts: list[DraftOutcome] = field(default_factory=list)


def apply_step(verified: list[VerifiedTokens], scheduler: Scheduler, text: TextSide) -> AppliedStep:
    """Each reply takes its verified tokens (where a thinking reply must close its thinking, the engine's tokens take
    the place of the rest, decided token by token: a token's text may end the thinking, or spend its budget); each
    draft is settled (the scheduler keeps what the kept tokens computed and drops the rest); a grammar that waited for
    its reply's answer begins with it (after the step's tokens: the closing marker the engine writes is not the
    answer's)."""
    applied = AppliedStep([reply.seq for reply in verified])
    for reply in verified:
        reply.force(0, text.forced_tokens(reply.seq))
    position = 0
    while taking := [r for r in verified if len(r.token_ids) > position and not r.seq.is_finished
                     and r.seq.request_id not in applied.failed]:
        _take_position(taking, position, scheduler, text, applied.failed)
        position += 1
    for reply in verified:
        if reply.draft:
            scheduler.settle(reply.seq, reply.draft, reply.num_kept_draft_tokens)
            applied.drafts.append(DraftOutcome(reply.seq, len(reply.draft), reply.num_kept_draft_tokens))
        if text.answer_begun(reply.seq):
            reply.seq.begin_answer()
    return applied


def _take_position(taking: list[VerifiedTokens], j: int, scheduler: Scheduler, text: TextSide,
                   failed: dict[str, str]) -> None:
    """The replies `taking` take their token at position j: into their text, then their sequences; a request whose
    grammar failed is recorded in `failed` (its replies take no more tokens)."""
    seqs = [reply.seq for reply in taking]
    taken = SamplerOutput([r.token_ids[j] for r in taking], [r.logprobs[j] for r in taking])
    stopped = text.add_tokens(seqs, taken, [j >= r.forced_from for r in taking])
    for seq, token, text_stopped in zip(seqs, taken.token_ids, stopped):
        if seq.is_finished or seq.request_id in failed:  # its request failed earlier at this position
            continue
        if (error := scheduler.take(seq, token, text_stopped)) is not None:
            failed[seq.request_id] = error
    for reply in taking:
        if j + 1 < min(len(reply.token_ids), reply.forced_from) and not reply.seq.is_finished:
            reply.force(j + 1, text.forced_tokens(reply.seq))
