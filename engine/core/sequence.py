"""A sequence: one reply being generated, its tokens and the KV blocks that hold them."""

import enum
import itertools
import random
from dataclasses import dataclass, field

from localchat.engine.frontend.structured_output import Matcher, ReplyGrammar
from localchat.engine.sampling_params import SamplingParams


class SequenceStatus(enum.Enum):
    WAITING = enum.auto()
    RUNNING = enum.auto()
    FINISHED = enum.auto()


_seq_ids = itertools.count()


@dataclass(eq=False)
class Sequence:
    request_id: str
    index: int  # which of the request's n replies
    token_ids: list[int]  # prompt then output
    num_prompt_tokens: int
    params: SamplingParams
    # the reply's sampling randomness (sampler.uniform): the request's seed for this reply, or a random one
    seed: int = field(default_factory=lambda: random.getrandbits(64))
    # the reply's place in its grammar (params.structured), until it finishes: written through the methods below
    grammar: ReplyGrammar | None = None
    seq_id: int = field(default_factory=lambda: next(_seq_ids))
    # One writer for each field after construction (tests/engine/test_seams.py checks it): the Scheduler writes the
    # tokens, the progress and the life (token_ids, status, num_computed_tokens, num_cached_tokens, num_admissions,
    # num_siblings_pending, finish_reason); the KVCacheManager the blocks (block_table, block_hashes); the sequence
    # its grammar (its methods below).
    status: SequenceStatus = SequenceStatus.WAITING
    num_computed_tokens: int = 0  # tokens whose K and V are in the cache
    num_cached_tokens: int = 0  # prompt tokens found in the prefix cache at the first admission
    num_admissions: int = 0  # more than one after a preemption
    block_table: list[int] = field(default_factory=list)
    block_hashes: list[int] = field(default_factory=list)  # content hash of each full block (KVCacheManager)
    num_siblings_pending: int = 0  # the request's other replies, started from this one once its prompt is computed
    max_tokens: int | None = None  # of the reply (the request's, within the model's length); None: no limit
    finish_reason: str | None = None

    def __len__(self) -> int:
        return len(self.token_ids)

    @property
    def prompt_token_ids(self) -> list[int]:
        return self.token_ids[: self.num_prompt_tokens]

    @property
    def output_token_ids(self) -> list[int]:
        return self.token_ids[self.num_prompt_tokens :]

    @property
    def num_output_tokens(self) -> int:
        return len(self.token_ids) - self.num_prompt_tokens

    @property
    def num_uncomputed_tokens(self) -> int:
        return len(self.token_ids) - self.num_computed_tokens

    @property
    def is_finished(self) -> bool:
        return self.status is SequenceStatus.FINISHED

    @property
    def matcher(self) -> Matcher | None:
        """What constrains the reply's next token (the sampler masks by it); None: nothing."""
        return self.grammar.matcher if self.grammar is not None else None

    @property
    def grammar_waits_for_answer(self) -> bool:
        """The reply has a grammar that applies from its answer on, and the reply is not there yet."""
        return self.grammar is not None and self.grammar.waits_for_answer

    def advance_grammar(self, token: int) -> bool:
        """The reply's grammar takes its new token; whether the grammar is done (GrammarFailed if it fails)."""
        return self.grammar is not None and self.grammar.advance(token)

    def begin_answer(self) -> None:
        """The reply's answer has begun: so does a grammar that waited for it."""
        if self.grammar is not None:
            self.grammar.begin_answer()

    def drop_grammar(self) -> None:
        """The reply is finished: its grammar state goes."""
        self.grammar = None

    def sibling(self, index: int) -> "Sequence":
        """Reply `index` of the same request: a copy that writes its own reply from here, in its own place in the
        grammar, with its own seed (the request's seed for that reply). The caller shares the KV blocks
        (KVCacheManager.share_blocks)."""
        return Sequence(
            request_id=self.request_id,
            index=index,
            token_ids=list(self.token_ids),
            num_prompt_tokens=self.num_prompt_tokens,
            params=self.params,
            seed=reply_seed(self.params, index),
            grammar=self.grammar.copy() if self.grammar is not None else None,
            status=self.status,
            num_computed_tokens=self.num_computed_tokens,
            num_cached_tokens=self.num_cached_tokens,
            num_admissions=self.num_admissions,
            block_table=list(self.block_table),
            block_hashes=list(self.block_hashes),
            max_tokens=self.max_tokens,
        )


def reply_seed(params: SamplingParams, index: int) -> int:
    """The seed of reply `index`: the request's for it (seed + index), or a fresh random one for an unseeded
    request."""
    seed = params.seed_for(index)
    return random.getrandbits(64) if seed is None else seed
