"""The typed hand-offs between a step's phases: what the scheduler schedules (ScheduledBatch) and hands the model
runner as plain data (ModelInput), the logits the runner computes for it (LogitRows), what the sampler reads of a row
(SampleRow) and gives back (SamplerOutput), what is sampled from them once the step's tokens count and the replies of
prompts just computed start (SampleRows), and the tokens each reply takes once its draft is verified
(VerifiedTokens)."""

from dataclasses import dataclass, field
from typing import TYPE_CHECKING, Protocol

import torch

from localchat.engine.core.sequence import Sequence
from localchat.engine.frontend.outputs import TokenLogprob
from localchat.engine.sampling_params import SamplingParams

if TYPE_CHECKING:
    from localchat.engine.frontend.structured_output import Matcher

NOT_FORCED = 2**63  # VerifiedTokens.forced_from when the engine writes none of a reply's tokens


@dataclass(frozen=True)
class ModelInput:
    """What the model runner computes in a step, as plain data (copies, never a live sequence): the new tokens of
    every scheduled sequence in one flat list (its own, then its draft's), each sequence's count of them, its length
    once they are computed and its block table, and the flat positions whose logits are sampled; the block copies and
    clears to make first."""

    input_ids: list[int]
    query_lens: list[int]
    seq_lens: list[int]
    block_tables: list[list[int]]
    logit_positions: list[int]
    copies: list[tuple[int, int]]  # copy-on-write block copies (source, destination)
    cleared: list[int]  # blocks to zero before the forward (first use)


@dataclass
class ScheduledBatch:
    seqs: list[Sequence]
    num_new_tokens: list[int]  # tokens of each sequence computed this step
    copies: list[tuple[int, int]]  # copy-on-write block copies to make before the forward
    cleared: list[int]  # blocks to zero before the forward (first use)
    sample_rows: list[int] = field(default_factory=list)  # the sequences whose last token is computed: sampled
    drafts: list[list[int]] = field(default_factory=list)  # per sequence: draft tokens scored after its own ones

    def __post_init__(self) -> None:
        self.drafts = self.drafts or [[] for _ in self.seqs]  # none given: no sequence drafts

    @property
    def num_tokens(self) -> int:
        return sum(self.num_new_tokens)

    @property
    def num_draft_tokens(self) -> int:
        return sum(map(len, self.drafts))

    def model_input(self) -> ModelInput:
        """The runner's input for this batch, read from its sequences now (before the step changes them)."""
        input_ids, seq_lens, logit_positions, start = [], [], [], 0
        sampled = set(self.sample_rows)
        for i, (seq, n, draft) in enumerate(zip(self.seqs, self.num_new_tokens, self.drafts)):
            computed = seq.num_computed_tokens
            input_ids += seq.token_ids[computed : computed + n - len(draft)] + draft
            seq_lens.append(computed + n)
            start += n
            if i in sampled:  # the last own token, then each draft token
                logit_positions += range(start - 1 - len(draft), start)
        return ModelInput(input_ids, list(self.num_new_tokens), seq_lens, [list(s.block_table) for s in self.seqs],
                          logit_positions, list(self.copies), list(self.cleared))


class SampleRow(Protocol):
    """What the sampler reads of a row: a reply (a Sequence), or a reply as if draft tokens were kept (a DraftRow)."""

    @property
    def params(self) -> SamplingParams: ...

    @property
    def seed(self) -> int: ...  # the reply's randomness (uniform)

    @property
    def matcher(self) -> "Matcher | None": ...  # the grammar that constrains the row's token; None: none

    @property
    def prompt_token_ids(self) -> list[int]: ...

    @property
    def output_token_ids(self) -> list[int]: ...

    @property
    def num_output_tokens(self) -> int: ...


@dataclass
class SamplerOutput:
    token_ids: list[int]  # one sampled token per row
    logprobs: list[TokenLogprob | None]  # per row; None where the row asked for none


@dataclass
class LogitRows:
    """The model runner's output with the batch it belongs to: a step's logits (float32), a row at the last own token
    of each sequence of batch.sample_rows, in that order, then one at each token of its draft."""

    logits: torch.Tensor
    batch: ScheduledBatch


@dataclass
class SampleRows:
    """What a step samples: the step's logits, each sequence, the row it samples from (the replies of a request whose
    prompt is just computed share its row) and its draft, whose rows follow that one."""

    logits: torch.Tensor
    seqs: list[Sequence] = field(default_factory=list)
    logit_rows: list[int] = field(default_factory=list)
    drafts: list[list[int]] = field(default_factory=list)

    def add(self, seq: Sequence, logit_row: int, draft: list[int]) -> None:
        self.seqs.append(seq)
        self.logit_rows.append(logit_row)
        self.drafts.append(draft)


@dataclass
class VerifiedTokens:
    """The tokens one reply takes in a step: those the sampler kept (its own, then each draft token it agreed with),
    and their logprobs; from `forced_from` on, the engine's tokens in their place (a thinking reply's closing marker:
    OutputProcessor.forced_tokens, decided as the reply takes its tokens, since each token's text can end its
    thinking)."""

    seq: Sequence
    draft: list[int]
    token_ids: list[int]
    logprobs: list[TokenLogprob | None]
    forced_from: int = NOT_FORCED

    def force(self, at: int, forced: tuple[int, ...]) -> None:
        """From position `at` on, the engine's tokens `forced` in place of the sampled ones (none: nothing changes)."""
        if forced:
            self.token_ids = self.token_ids[:at] + list(forced)
            self.logprobs = self.logprobs[:at] + [None] * len(forced)
            self.forced_from = at

    @property
    def num_kept_draft_tokens(self) -> int:
        """Of a scored draft, the tokens kept (whose K and V the step computed): each sampled token but the last agreed
        with the draft token before it; where the engine's tokens took over early, every sampled one did."""
        sampled = min(len(self.token_ids), self.forced_from)
        return sampled if 0 < self.forced_from < NOT_FORCED else max(sampled - 1, 0)
