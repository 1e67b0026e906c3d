"""Drafts without a draft model, and their check: a decoding reply's next tokens guessed from where its last tokens
occurred before (its prompt, its own reply so far, the sources its request names: the sibling replies of a
regenerate or an edit), scored in the step's batch beside everything else and kept as far as the sampler would have
chosen them. A kept token is the token plain decoding gives (the sampler's draw is keyed by seed and position, and
a token's logits do not depend on how its sequence is stepped), so speculation changes no token, only the steps."""

from collections.abc import Callable
from dataclasses import dataclass, field

import torch

from localchat.engine.core.sequence import Sequence
from localchat.engine.core.step_outputs import SamplerOutput, SampleRow, SampleRows, VerifiedTokens
from localchat.engine.frontend.structured_output import GrammarFailed, Matcher
from localchat.engine.sampling_params import SamplingParams
from localchat.engine.stats import SpeculationStats

SHORTEST_MATCH, LONGEST_MATCH = 2, 4  # the n-grams looked up, the longest first
LONGEST_DRAFT = 8
# a step's decode rows, drafts included, up to which a draft costs about nothing: the step reads the weights once
# whatever its rows (a memory-bound decode); beyond, it is compute-bound, and drafts are left out
STEP_ROWS = 16
LONGEST_PAUSE = 32  # steps a reply waits to draft again after drafts kept missing (doubling from 1)
ACCEPTANCE_WEIGHT = 0.3  # of a reply's newest draft in its acceptance


class NgramIndex:
    """Where each n-gram of a token list last occurred: the position of the token after it (an n-gram is indexed
    once that token is known, so a list's own ending is never its own match). The index keeps its own copy of the
    list, and catches up with a list that grows (a reply's tokens) in update()."""

    def __init__(self, tokens: list[int]):
        self.tokens: list[int] = []
        self.after: dict[tuple[int, ...], int] = {}
        self.update(tokens)

    def update(self, tokens: list[int]) -> None:
        """Index the tokens of `tokens` past those indexed so far (`tokens` continues the list indexed)."""
        after, start = self.after, len(self.tokens)
        self.tokens.extend(tokens[start:])
        tokens = self.tokens
        for end in range(start, len(tokens)):
            for n in range(SHORTEST_MATCH, min(LONGEST_MATCH, end) + 1):
                after[tuple(tokens[end - n : end])] = end

    def continuation(self, suffix: tuple[int, ...], length: int, periodic: bool = False) -> list[int]:
        """Up to `length` tokens that followed `suffix`'s last occurrence; [] if it never occurred. periodic: for
        suffix the list's own ending, whose recurrence `p` tokens back makes the list repeat with period p, a
        continuation that reaches the end goes on repeating (a count, a refrain)."""
        start = self.after.get(suffix)
        if start is None:
            return []
        tail = self.tokens[start : start + length]
        if periodic and len(tail) < length:
            tail = tail * -(-length // len(tail))
        return tail[:length]


@dataclass
class DraftState:
    """One reply's drafting: its index (its own tokens), how long its next draft may be, how long it waits after
    drafts that missed, and the share of its drafted tokens it keeps (recent drafts weighing most)."""

    index: NgramIndex
    length: int = 2
    misses: int = 0
    wait: int = 0
    acceptance: float = 1.0  # nothing drafted yet: its first draft is tried wherever a draft could pay


@dataclass
class DraftRow:
    """What the sampler sees at one drafted position: the reply `seq` as if the draft tokens before it (`kept`)
    were kept, with its grammar (`matcher`) advanced over them. Its token lists are made only when asked for (the
    penalties): a row's draw needs only its position."""

    seq: Sequence
    kept: list[int]
    matcher: Matcher | None

    @property
    def params(self) -> SamplingParams:
        return self.seq.params

    @property
    def seed(self) -> int:
        return self.seq.seed

    @property
    def num_output_tokens(self) -> int:
        return self.seq.num_output_tokens + len(self.kept)

    @property
    def prompt_token_ids(self) -> list[int]:
        return self.seq.prompt_token_ids

    @property
    def output_token_ids(self) -> list[int]:
        return self.seq.output_token_ids + self.kept

    @property
    def token_ids(self) -> list[int]:
        return self.seq.token_ids + self.kept


@dataclass
class Speculator:
    """Proposes drafts for a step's decoding replies (within STEP_ROWS), verifies them against the sampler once they
    are scored, and settles them (the scheduler drops what a draft's rejected tokens held)."""

    enabled: bool = True
    states: dict[Sequence, DraftState] = field(default_factory=dict)
    sources: dict[str, list[NgramIndex]] = field(default_factory=dict)  # by request: the other texts it names
    stats: SpeculationStats = field(default_factory=SpeculationStats)

    def add_sources(self, request_id: str, sources: list[list[int]]) -> None:
        if self.enabled and sources:
            self.sources[request_id] = [NgramIndex(list(tokens)) for tokens in sources]

    def clear(self) -> None:
        """Forget every reply (after a failed step)."""
        self.states.clear()
        self.sources.clear()

    def forget(self, seq: Sequence) -> None:
        """seq is finished: drop its state (and its request's sources with its last reply)."""
        self.states.pop(seq, None)
        if not any(s.request_id == seq.request_id for s in self.states):
            self.sources.pop(seq.request_id, None)

    def propose(self, seq: Sequence, room: int, max_model_len: int, min_acceptance: float = 0.0) -> list[int]:
        """A draft for seq's next decode, of at most `room` tokens (what the step's rows leave), never past its
        max_tokens or the model's length, if seq keeps at least `min_acceptance` of what it drafts; [] for none."""
        if not self.enabled or room < 1:
            return []
        state = self.states.get(seq)
        if state is None:
            state = self.states[seq] = DraftState(NgramIndex(seq.token_ids))
        else:
            state.index.update(seq.token_ids)
        if state.wait:
            state.wait -= 1
            return []
        if state.acceptance < min_acceptance:
            return []
        left = min(max_model_len - len(seq), (seq.max_tokens or 2**63) - seq.num_output_tokens) - 1
        length = min(state.length, room, left)
        if length < 1:
            return []
        tokens = seq.token_ids
        sources = self.sources.get(seq.request_id, ())
        for n in range(min(LONGEST_MATCH, len(tokens)), SHORTEST_MATCH - 1, -1):
            suffix = tuple(tokens[-n:])
            draft = state.index.continuation(suffix, length, periodic=True)
            for index in sources:
                draft = draft or index.continuation(suffix, length)
            if draft:
                return draft
        return []

    def rows(self, seq: Sequence, draft: list[int]) -> list[DraftRow | Sequence]:
        """The sampler's rows for a scored draft: seq itself, then seq as if each draft token were kept, with
        its grammar advanced over them. Cut where the grammar refuses a draft token or ends with it (no row after
        it could be kept)."""
        rows: list[DraftRow | Sequence] = [seq]
        matcher = seq.matcher
        for j, token in enumerate(draft):
            if matcher is not None:
                matcher = matcher.copy()
                try:
                    if matcher.advance(token):
                        break
                except GrammarFailed:
                    break
            rows.append(DraftRow(seq, draft[: j + 1], matcher))
        return rows

    def verify(self, sampler: Callable[[torch.Tensor, list[SampleRow]], SamplerOutput], rows: SampleRows
               ) -> list[VerifiedTokens]:
        """Sample every sequence's rows (its own, then one per draft token: rows()) and keep, for each, its draft as far
        as the sampler drew its tokens, then the token drawn where it stopped agreeing; a sequence without a draft
        takes its one token."""
        scored = [self.rows(seq, draft) if draft else [seq] for seq, draft in zip(rows.seqs, rows.drafts)]
        logit_rows = [row for first, seq_rows in zip(rows.logit_rows, scored)
                      for row in range(first, first + len(seq_rows))]
        logits = rows.logits
        if logit_rows != list(range(len(logits))):  # a request's replies sample from its one row; a cut draft
            logits = logits[torch.tensor(logit_rows, device=logits.device)]
        sampled = sampler(logits, [row for seq_rows in scored for row in seq_rows])
        verified, row = [], 0
        for seq, draft, seq_rows in zip(rows.seqs, rows.drafts, scored):
            tokens = sampled.token_ids[row : row + len(seq_rows)]
            n = next((j for j, (token, drafted) in enumerate(zip(tokens, draft)) if token != drafted), len(tokens) - 1)
            verified.append(VerifiedTokens(seq, draft, tokens[: n + 1], sampled.logprobs[row : row + n + 1]))
            row += len(seq_rows)
        return verified

    def settle(self, seq: Sequence, drafted: int, kept: int) -> None:
        """seq's draft of `drafted` tokens was scored and `kept` of them kept: its next draft is longer after a
        draft kept whole, shorter after one cut, and a reply whose drafts keep missing waits longer and longer."""
        self.stats.drafted += drafted
        self.stats.accepted += kept
        state = self.states.get(seq)
        if state is None:  # seq finished with this step
            return
        state.acceptance = (1 - ACCEPTANCE_WEIGHT) * state.acceptance + ACCEPTANCE_WEIGHT * kept / drafted
        if kept == drafted:
            state.length, state.misses = min(2 * state.length, LONGEST_DRAFT), 0
        else:
            state.length = max(1, kept + 1)
        if kept == 0:
            state.misses += 1
            state.wait = min(2 ** (state.misses - 1), LONGEST_PAUSE)
