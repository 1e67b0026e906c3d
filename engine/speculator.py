"""Drafts without a draft model, and their check: a decoding reply's next tokens guessed from where its last tokens
occurred before (its prompt, its own reply so far, the sources its request names: the sibling replies of a
regenerate or an edit), scored in the step's batch beside everything else and kept as far as the sampler would have
chosen them. A kept token is the token plain decoding gives (the sampler's draw is keyed by seed and position, and
a token's logits do not depend on how its sequence is stepped), so speculation changes no token, only the steps."""

from dataclasses import dataclass, field

from localchat.engine.sampling_params import SamplingParams
from localchat.engine.sequence import Sequence
from localchat.engine.structured_output import GrammarFailed, Matcher

SHORTEST_MATCH, LONGEST_MATCH = 2, 4  # the n-grams looked up, the longest first
LONGEST_DRAFT = 8
# a step's decode rows, drafts included, up to which a draft costs about nothing: the step reads the weights once
# whatever its rows (a memory-bound decode); beyond, it is compute-bound, and drafts are left out
STEP_ROWS = 16
LONGEST_PAUSE = 32  # steps a reply waits to draft again after drafts kept missing (doubling from 1)


class NgramIndex:
    """Where each n-gram of a token list last occurred: the position of the token after it (an n-gram is indexed
    once that token is known, so a list's own ending is never its own match)."""

    def __init__(self, tokens: list[int] | tuple[int, ...] = ()):
        self.tokens: list[int] = []
        self.after: dict[tuple[int, ...], int] = {}
        self.extend(tokens)

    def extend(self, tokens: list[int] | tuple[int, ...]) -> None:
        own, after = self.tokens, self.after
        for token in tokens:
            end = len(own)
            for n in range(SHORTEST_MATCH, min(LONGEST_MATCH, end) + 1):
                after[tuple(own[end - n : end])] = end
            own.append(token)

    def copy(self) -> "NgramIndex":
        index = NgramIndex()
        index.tokens, index.after = list(self.tokens), dict(self.after)
        return index

    def continuation(self, suffix: tuple[int, ...], length: int, periodic: bool = False) -> list[int]:
        """Up to `length` tokens that followed `suffix`'s last occurrence; [] if it never occurred. periodic: for
        suffix the list's own ending, whose recurrence `p` tokens back makes the list repeat with period p, a
        continuation that reaches the end goes on repeating (a count, a refrain)."""
        start = self.after.get(suffix)
        if start is None:
            return []
        tail = self.tokens[start:]
        if periodic and len(tail) < length:
            tail = tail * -(-length // len(tail))
        return tail[:length]


@dataclass
class DraftState:
    """One reply's drafting: its index (its own tokens), how long its next draft may be, and how long it waits
    after drafts that missed."""

    index: NgramIndex
    length: int = 2
    misses: int = 0
    wait: int = 0


@dataclass
class DraftRow:
    """What the sampler sees at one drafted position: the reply as if the draft before it were kept."""

    params: SamplingParams
    seed: int
    matcher: Matcher | None
    prompt_token_ids: list[int]
    output_token_ids: list[int]

    @property
    def token_ids(self) -> list[int]:
        return self.prompt_token_ids + self.output_token_ids


@dataclass
class SpeculationStats:
    drafted: int = 0  # draft tokens scored
    accepted: int = 0  # of them, kept


@dataclass
class Speculator:
    """Proposes drafts for a step's decoding replies (within STEP_ROWS) and settles them once they are scored."""

    enabled: bool = True
    states: dict[Sequence, DraftState] = field(default_factory=dict)
    sources: dict[str, list[NgramIndex]] = field(default_factory=dict)  # by request: the other texts it names
    stats: SpeculationStats = field(default_factory=SpeculationStats)

    def add_sources(self, request_id: str, sources: list[list[int]]) -> None:
        if self.enabled and sources:
            self.sources[request_id] = [NgramIndex(tokens) for tokens in sources]

    def forget(self, seq: Sequence) -> None:
        """seq is finished: drop its state (and its request's sources with its last reply)."""
        self.states.pop(seq, None)
        if not any(s.request_id == seq.request_id for s in self.states):
            self.sources.pop(seq.request_id, None)

    def propose(self, seq: Sequence, room: int, max_model_len: int) -> list[int]:
        """A draft for seq's next decode, of at most `room` tokens (what the step's rows leave), never past its
        max_tokens or the model's length; [] for none."""
        if not self.enabled or room < 1:
            return []
        state = self.states.get(seq)
        if state is None:
            state = self.states[seq] = DraftState(NgramIndex(seq.token_ids))
        else:
            state.index.extend(seq.token_ids[len(state.index.tokens) :])
        if state.wait:
            state.wait -= 1
            return []
        left = min(max_model_len - len(seq), (seq.max_tokens or 2**63) - seq.num_output_tokens) - 1
        length = min(state.length, room, left)
        if length < 1:
            return []
        tokens = state.index.tokens
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
        matcher, output = seq.matcher, seq.output_token_ids
        for j, token in enumerate(draft):
            if matcher is not None:
                matcher = matcher.copy()
                try:
                    if matcher.advance(token):
                        break
                except GrammarFailed:
                    break
            rows.append(DraftRow(seq.params, seq.seed, matcher, seq.prompt_token_ids, output + draft[: j + 1]))
        return rows

    def settle(self, seq: Sequence, drafted: int, kept: int) -> None:
        """seq's draft of `drafted` tokens was scored and `kept` of them kept: its next draft is longer after a
        draft kept whole, shorter after one cut, and a reply whose drafts keep missing waits longer and longer."""
        self.stats.drafted += drafted
        self.stats.accepted += kept
        seq.num_draft_tokens += drafted
        seq.num_accepted_tokens += kept
        state = self.states.get(seq)
        if state is None:  # seq finished with this step
            return
        if kept == drafted:
            state.length, state.misses = min(2 * state.length, LONGEST_DRAFT), 0
        else:
            state.length = max(1, kept + 1)
        if kept == 0:
            state.misses += 1
            state.wait = min(2 ** (state.misses - 1), LONGEST_PAUSE)
