"""Tests for the KV cache manager and its block pool.

A hypothesis state machine drives the real Scheduler over a KVCacheManager (admission with prefix hits,
chunked prefills within a token budget, decodes with drafts kept in part and rolled back, preemptions when blocks
run out, forks, frees, pins that move on and go) while it simulates the KV memory itself: every slot holds the whole
token prefix its key and value were computed from, so a prefix hit or a copy-on-write that hands a sequence the wrong
memory, or a rejected draft token's K and V found by hash, shows up as an unreadable token.
"""

import torch
from hypothesis import HealthCheck, settings
from hypothesis import strategies as st
from hypothesis.stateful import RuleBasedStateMachine, initialize, invariant, precondition, rule

from localchat.engine.core.block_pool import BlockPool, hash_block
from localchat.engine.core.kv_cache_manager import KVCacheConfig, KVCacheManager, PinRefused, PrefixHit
from localchat.engine.core.scheduler import ScheduledBatch, Scheduler
from localchat.engine.core.sequence import Sequence, SequenceStatus
from localchat.engine.core.step_outputs import LogitRows
from localchat.engine.sampling_params import SamplingParams

VOCAB = 3  # a small vocabulary, so that prompts share prefixes and the cache gets hits


def make_seq(kv: KVCacheManager, tokens: list[int], request_id: str = "r") -> Sequence:
    seq = Sequence(request_id, 0, list(tokens), len(tokens), SamplingParams())
    kv.hash_blocks(seq)
    return seq


def blocks_for(num_tokens: int, bs: int) -> int:
    return -(-num_tokens // bs)


def chain_hashes(pool: BlockPool, tokens: tuple[int, ...] | list[int], bs: int) -> list[int]:
    """The chained hash of every full block of `tokens`."""
    hashes, parent = [], pool.root_hash
    for i in range(len(tokens) // bs):
        parent = hash_block(parent, tokens[i * bs : (i + 1) * bs])
        hashes.append(parent)
    return hashes


def snapshot(kv: KVCacheManager, seqs: list[Sequence]) -> tuple:
    """Everything an allocation could change."""
    pool = kv.pool
    return (
        [(b.ref_count, b.hash, b.token_ids) for b in pool.blocks],
        list(pool.free_queue),
        list(pool.pinned_free),
        dict(pool.cached),
        set(pool.never_used),
        list(pool.first_used),
        list(kv.pending_copies),
        [(list(s.token_ids), s.num_computed_tokens, list(s.block_table), list(s.block_hashes)) for s in seqs],
    )


class SchedulerMachine(RuleBasedStateMachine):
    """The real Scheduler and KVCacheManager, stepped as the engine steps them, over simulated KV memory."""

    @initialize(num_blocks=st.integers(8, 40), block_size=st.integers(1, 5), prefix_caching=st.booleans(),
                max_num_seqs=st.integers(1, 6), budget=st.integers(1, 24), drafts=st.booleans())
    def setup(self, num_blocks: int, block_size: int, prefix_caching: bool, max_num_seqs: int, budget: int,
              drafts: bool) -> None:
        self.scheduler = Scheduler(KVCacheConfig(num_blocks, block_size, enable_prefix_caching=prefix_caching),
                                   max_num_seqs, budget, speculative=drafts)
        self.kv = self.scheduler.kv
        self.bs, self.budget = block_size, budget
        self.num_blocks = num_blocks
        self.mem: dict[int, tuple[int, ...] | None] = {}  # slot -> the token prefix its K and V were computed from
        self.cleared: set[int] = set()  # blocks cleared before their first use
        self.history: list[list[int]] = []  # token ids of every sequence so far, for multi-turn prompts
        self.num_requests = 0
        self.was_reset = False  # reset_cache leaves formerly cached free blocks where they were in the queue

    # ---- helpers -------------------------------------------------------------------------------------

    def slot(self, block_id: int, offset: int) -> int:
        return block_id * self.bs + offset

    def live(self) -> list[Sequence]:
        return list(self.scheduler.waiting) + self.scheduler.running

    def expected_hit(self, seq: Sequence) -> int:
        """Blocks of the longest prefix of seq (never its last token) whose memory a cached block holds."""
        if not self.kv.enable_prefix_caching:
            return 0
        held = {self.mem.get(self.slot(b, self.bs - 1)) for b in self.kv.pool.cached.values()}
        k = 0
        while k < (len(seq) - 1) // self.bs and tuple(seq.token_ids[: (k + 1) * self.bs]) in held:
            k += 1
        return k

    def check_batch(self, batch: ScheduledBatch) -> None:
        assert batch.num_tokens <= self.budget  # max_num_seqs bounds admissions; forks join the running batch
        assert len(set(batch.seqs)) == len(batch.seqs)
        for seq, n, draft in zip(batch.seqs, batch.num_new_tokens, batch.drafts):
            assert seq.status is SequenceStatus.RUNNING and 1 <= n <= seq.num_uncomputed_tokens + len(draft)
            assert not draft or seq.num_uncomputed_tokens == 1, "a draft beside a prefill"
            assert len(seq.block_table) == blocks_for(seq.num_computed_tokens + n, self.bs)
            assert len(set(seq.block_table)) == len(seq.block_table)

    def forward(self, batch: ScheduledBatch) -> None:
        """What the model runner does with a scheduled batch: clear and copy blocks, write the K and V of the
        new tokens. Then the engine commits them."""
        for b in batch.cleared:
            assert b not in self.cleared, f"block {b} cleared twice as first used"
            assert all(self.slot(b, j) not in self.mem for j in range(self.bs)), f"block {b} was used before"
            self.cleared.add(b)
            for j in range(self.bs):
                self.mem[self.slot(b, j)] = None
        for src, dst in batch.copies:
            assert src != dst
            assert self.kv.pool.blocks[dst].ref_count == 1
            for j in range(self.bs):
                self.mem[self.slot(dst, j)] = self.mem.get(self.slot(src, j))
        for seq, n, draft in zip(batch.seqs, batch.num_new_tokens, batch.drafts):
            tokens = seq.token_ids + draft
            for pos in range(seq.num_computed_tokens, seq.num_computed_tokens + n):
                block_id = seq.block_table[pos // self.bs]
                block = self.kv.pool.blocks[block_id]
                assert block_id in self.cleared, f"block {block_id} written without being cleared first"
                assert block.ref_count == 1, f"write into block {block_id} shared by {block.ref_count} sequences"
                assert block.hash is None, f"write into hashed block {block_id}"
                self.mem[self.slot(block_id, pos % self.bs)] = tuple(tokens[: pos + 1])

    def finish(self, seq: Sequence) -> None:
        """scheduler.finish, checked: the cached blocks it frees join the back of their free queue (the pinned one if
        a pin keeps them), tail first."""
        table = list(seq.block_table)
        self.scheduler.finish(seq, "stop")
        assert seq.block_table == [] and seq.num_computed_tokens == 0
        pool = self.kv.pool
        for queue in (pool.free_queue, pool.pinned_free):
            freed = [b for b in reversed(table) if pool.blocks[b].ref_count == 0 and pool.blocks[b].hash is not None
                     and b in queue]
            assert list(queue)[len(queue) - len(freed):] == freed
        self.history.append(list(seq.token_ids))

    # ---- rules ---------------------------------------------------------------------------------------

    @rule(tokens=st.lists(st.integers(0, VOCAB - 1), min_size=1, max_size=14), reuse=st.integers(0, 3),
          long=st.integers(0, 9), data=st.data())
    def add_sequence(self, tokens: list[int], reuse: int, long: int, data: st.DataObject) -> None:
        """A new prompt: random, or (multi-turn) an earlier or running conversation, or a part of one, plus
        a new turn that may be empty."""
        if long == 0:  # sometimes a prompt that exhausts a small pool
            tokens = tokens * 6
        earlier = self.history + [list(s.token_ids) for s in self.scheduler.running]
        if reuse and earlier:
            base = data.draw(st.sampled_from(earlier), label="earlier conversation")
            if reuse == 1:
                base = base[: data.draw(st.integers(1, len(base)), label="part")]
            tokens = base + tokens[: data.draw(st.integers(0, len(tokens)), label="new turn")]
        self.num_requests += 1
        self.scheduler.add(make_seq(self.kv, tokens, f"r{self.num_requests}"))

    @precondition(lambda self: self.live())
    @rule(data=st.data())
    def step(self, data: st.DataObject) -> None:
        """One engine step: schedule, forward, commit, then for each sequence whose tokens are all computed:
        finish, fork, or append a sampled token."""
        expected = {seq: self.expected_hit(seq) for seq in self.scheduler.waiting if seq.num_admissions == 0}
        cached_before = dict(self.kv.pool.cached)
        batch = self.scheduler.schedule()
        self.check_batch(batch)
        for seq in (seq for seq in batch.seqs if seq in expected):  # admitted for the first time
            assert seq.num_cached_tokens <= len(seq) - 1, "a prefix hit covered the last token"
            hit = seq.num_cached_tokens // self.bs
            assert hit <= expected[seq]
            if hit < expected[seq]:  # only because this step's earlier allocations evicted the next block
                missed = seq.block_hashes[hit]
                assert self.kv.pool.cached.get(missed) != cached_before[missed], "a cached prefix block was missed"
        self.forward(batch)
        rows = self.scheduler.commit_and_fork(LogitRows(torch.empty(0), batch))
        for seq, draft in zip(rows.seqs, rows.drafts):
            self.after_forward(seq, draft, data)

    def after_forward(self, seq: Sequence, draft: list[int], data: st.DataObject) -> None:
        """Finish, or take a sampled token (and, after a draft, the draft tokens kept before it), or fork."""
        if data.draw(st.integers(0, 5), label="finish?") == 0:
            self.finish(seq)
            if draft:
                self.scheduler.settle(seq, draft, 0)
            return
        if draft:
            kept = data.draw(st.integers(0, len(draft)), label="draft tokens kept")
            for token in draft[:kept] + [data.draw(st.integers(0, VOCAB - 1), label="sampled")]:
                self.scheduler.take(seq, token, text_stopped=False)
            self.scheduler.settle(seq, draft, kept)
            return
        family = [seq]
        for k in range(data.draw(st.integers(0, 2) if data.draw(st.integers(0, 3)) == 0 else st.just(0))):
            family.append(self.scheduler.add_sibling(seq.sibling(k + 1)))
        for s in family:
            self.scheduler.take(s, data.draw(st.integers(0, VOCAB - 1), label="sampled"), text_stopped=False)

    @precondition(lambda self: self.scheduler.running)
    @rule(data=st.data())
    def start_a_sibling(self, data: st.DataObject) -> None:
        """A sibling of a running sequence between steps: the child shares every block, then diverges."""
        running = self.scheduler.running
        seq = running[data.draw(st.integers(0, len(running) - 1), label="parent")]
        child = self.scheduler.add_sibling(seq.sibling(1))
        if data.draw(st.booleans(), label="diverge"):  # give the child a different last (uncomputed) token
            if child.num_uncomputed_tokens > 0 and len(child) > child.num_prompt_tokens and len(child) % self.bs:
                child.token_ids[-1] = (child.token_ids[-1] + 1) % VOCAB

    @precondition(lambda self: self.live())
    @rule(data=st.data())
    def finish_sequence(self, data: st.DataObject) -> None:
        live = self.live()
        self.finish(live[data.draw(st.integers(0, len(live) - 1), label="finished")])

    @precondition(lambda self: self.scheduler.running)
    @rule(data=st.data())
    def preempt_sequence(self, data: st.DataObject) -> None:
        running = self.scheduler.running
        self.scheduler.preempt(running[data.draw(st.integers(0, len(running) - 1), label="preempted")])

    @precondition(lambda self: self.history)
    @rule(data=st.data(), key=st.sampled_from(["a", "b", "c"]))
    def pin_a_chat(self, data: st.DataObject, key: str) -> None:
        """Pin a finished sequence's tokens (or a part of them) under a key, in place of its earlier pin, or unpin it;
        over the budget the pin is refused and nothing changes."""
        tokens = data.draw(st.sampled_from(self.history), label="pinned chat")
        tokens = tokens[: data.draw(st.integers(0, len(tokens)), label="pinned part")]
        if not tokens:
            self.scheduler.unpin(key)
            return
        before = (dict(self.kv.pins), dict(self.kv.pool.pins), dict(self.kv.pool.partial_pins))
        try:
            self.scheduler.pin(key, tokens)
        except PinRefused:
            assert (dict(self.kv.pins), dict(self.kv.pool.pins), dict(self.kv.pool.partial_pins)) == before
            return
        assert self.kv.pins[key].hashes == tuple(chain_hashes(self.kv.pool, tokens, self.bs))

    @rule(really=st.integers(0, 4))
    def reset_prefix_cache(self, really: int) -> None:
        """Forget every cached prefix (now and then): blocks in use keep their memory, nothing is a hit."""
        if really:
            return
        self.kv.pool.reset_cache()
        self.was_reset = True
        assert not self.kv.pool.cached
        for seq in self.scheduler.waiting:
            assert self.kv.find_prefix(seq).cached == []

    # ---- invariants ----------------------------------------------------------------------------------

    @invariant()
    def reference_counts_are_conserved(self) -> None:
        pool = self.kv.pool
        owners = [0] * self.num_blocks
        for seq in self.live():
            assert len(set(seq.block_table)) == len(seq.block_table), "a block twice in one table"
            for b in seq.block_table:
                owners[b] += 1
        assert [b.ref_count for b in pool.blocks] == owners
        free = list(pool.free_queue) + list(pool.pinned_free)
        assert len(free) == len(set(free))
        assert set(free) == {i for i, n in enumerate(owners) if n == 0}
        assert pool.num_used + pool.num_free == self.num_blocks
        assert pool.num_used == sum(1 for n in owners if n > 0)
        assert pool.num_cached_free == sum(1 for b in free if pool.blocks[b].hash is not None)
        assert self.kv.pending_copies == []

    @invariant()
    def pinned_blocks_wait_in_their_own_queue(self) -> None:
        """A free block is in the pinned queue exactly when a pin keeps its content; the pool counts each key's pins
        and holds the keys the manager's pins name; the pins stay within their budget."""
        pool = self.kv.pool
        for b in pool.free_queue:
            block = pool.blocks[b]
            assert block.hash not in pool.pins and (block.hash is not None or block.partial_after not in
                                                    pool.partial_pins)
        for b in pool.pinned_free:
            block = pool.blocks[b]
            assert block.hash in pool.pins if block.hash is not None else block.partial_after in pool.partial_pins
        counts, partial_counts = {}, {}
        for pin in self.kv.pins.values():
            for h in pin.hashes:
                counts[h] = counts.get(h, 0) + 1
            if pin.partial_after is not None:
                partial_counts[pin.partial_after] = partial_counts.get(pin.partial_after, 0) + 1
        assert pool.pins == counts and pool.partial_pins == partial_counts
        assert pool.num_pinned <= self.kv.pin_limit

    @invariant()
    def free_queue_puts_cached_blocks_last(self) -> None:
        if self.was_reset:
            return
        pool = self.kv.pool
        kept = [pool.blocks[b].hash is not None or pool.blocks[b].partial_after is not None for b in pool.free_queue]
        assert kept == sorted(kept), "a block holding nothing is queued behind a cached or kept partial one"
        assert all(pool.blocks[b].hash is not None or pool.blocks[b].partial_after is not None
                   for b in pool.pinned_free), "a block holding nothing is kept by a pin"

    @invariant()
    def kept_partial_blocks_hold_their_tokens(self) -> None:
        """A kept partial block holds the K/V of its tokens after exactly the prefix its parent hash names."""
        pool, bs = self.kv.pool, self.bs
        assert all(pool.blocks[b].partial_after == h for h, b in pool.partials.items())
        assert sum(1 for b in pool.blocks if b.partial_after is not None) == len(pool.partials)
        for h, b in pool.partials.items():
            block = pool.blocks[b]
            assert block.hash is None and 0 < len(block.token_ids) < bs
            first = self.mem.get(self.slot(b, 0))
            assert first is not None and (len(first) - 1) % bs == 0, f"kept block {b} does not start a block"
            prefix = first[:-1]
            assert (chain_hashes(pool, prefix, bs)[-1] if prefix else pool.root_hash) == h
            for j in range(len(block.token_ids)):
                assert self.mem.get(self.slot(b, j)) == prefix + tuple(block.token_ids[: j + 1]), (
                    f"kept block {b} holds other tokens than recorded at slot {j}")

    @invariant()
    def cached_blocks_hold_their_tokens(self) -> None:
        pool, bs = self.kv.pool, self.bs
        if not self.kv.enable_prefix_caching:
            assert not pool.cached and all(b.hash is None for b in pool.blocks)
        assert all(pool.blocks[b].hash == h for h, b in pool.cached.items())
        assert sum(1 for b in pool.blocks if b.hash is not None) == len(pool.cached)
        for h, b in pool.cached.items():
            block = pool.blocks[b]
            assert len(block.token_ids) == bs
            prefix = self.mem.get(self.slot(b, bs - 1))
            assert prefix is not None and len(prefix) % bs == 0, f"cached block {b} holds no full block"
            assert prefix[-bs:] == block.token_ids, f"cached block {b} holds other tokens than recorded"
            for j in range(bs):
                assert self.mem.get(self.slot(b, j)) == prefix[: len(prefix) - bs + j + 1]
            assert chain_hashes(pool, prefix, bs)[-1] == h, f"cached block {b} holds another prefix"

    @invariant()
    def live_sequences_read_their_tokens(self) -> None:
        for seq in self.live():
            expected = chain_hashes(self.kv.pool, seq.token_ids, self.bs)
            assert seq.block_hashes == (expected if self.kv.enable_prefix_caching else [])
        for seq in self.scheduler.running:
            assert seq.num_computed_tokens <= len(seq)
            assert len(seq.block_table) == blocks_for(seq.num_computed_tokens, self.bs)
            for pos in range(seq.num_computed_tokens):
                slot = self.slot(seq.block_table[pos // self.bs], pos % self.bs)
                assert self.mem.get(slot) == tuple(seq.token_ids[: pos + 1]), (
                    f"sequence {seq.request_id}/{seq.index} reads the wrong K/V at position {pos}")
        for seq in self.scheduler.waiting:
            assert seq.block_table == [] and seq.num_computed_tokens == 0

    def teardown(self) -> None:
        if not hasattr(self, "kv"):
            return
        for seq in list(self.live()):
            self.finish(seq)
        pool = self.kv.pool
        assert all(b.ref_count == 0 for b in pool.blocks)
        assert sorted([*pool.free_queue, *pool.pinned_free]) == list(range(self.num_blocks))
        assert pool.num_free == self.num_blocks and pool.num_used == 0
        for key in list(self.kv.pins):
            self.scheduler.unpin(key)
        assert not pool.pinned_free and not pool.pins and not pool.partial_pins


SchedulerMachine.TestCase.settings = settings(
    max_examples=300, stateful_step_count=50, deadline=None, suppress_health_check=[HealthCheck.too_slow])
TestSchedulerMachine = SchedulerMachine.TestCase


# ---- examples ------------------------------------------------------------------------------------------


def compute(kv: KVCacheManager, seq: Sequence, n: int, cached: list[tuple[bytes, int]] = ()) -> None:
    """What the scheduler does with seq's next n tokens after a hit on `cached`: make room, count the hit's tokens and
    then the n computed ones, whose full blocks become findable."""
    hit = PrefixHit(list(cached), num_tokens=len(cached) * kv.block_size)
    assert kv.allocate_slots(seq, n, hit)
    seq.num_computed_tokens += hit.num_tokens + n
    kv.cache_computed(seq, seq.num_computed_tokens - n)


def run_prompt(kv: KVCacheManager, tokens: list[int]) -> Sequence:
    seq = make_seq(kv, tokens)
    cached = kv.find_prefix(seq).cached
    compute(kv, seq, len(seq) - len(cached) * kv.block_size, cached)
    return seq


def test_fork_shares_every_block_and_copies_only_the_partial_last_one() -> None:
    kv = KVCacheManager(KVCacheConfig(num_blocks=10, block_size=4))
    parent = run_prompt(kv, list(range(10)))  # two full blocks and a partial one
    kv.take_block_updates()
    child = parent.sibling(1)
    kv.share_blocks(child)
    assert child.block_table == parent.block_table and len(parent.block_table) == 3
    assert all(kv.pool.blocks[b].ref_count == 2 for b in parent.block_table)
    shared = list(parent.block_table)

    parent.token_ids.append(100)
    assert kv.allocate_slots(parent, 1)
    copies, cleared = kv.take_block_updates()
    assert parent.block_table[:2] == shared[:2] and parent.block_table[2] != shared[2]
    assert copies == [(shared[2], parent.block_table[2])]
    assert [kv.pool.blocks[b].ref_count for b in shared] == [2, 2, 1]

    child.token_ids.append(200)
    assert kv.allocate_slots(child, 1)  # the partial block is the child's alone now: written in place
    assert kv.take_block_updates() == ([], [])
    assert child.block_table == shared


def test_fork_at_a_block_boundary_copies_nothing() -> None:
    kv = KVCacheManager(KVCacheConfig(num_blocks=10, block_size=4))
    parent = run_prompt(kv, list(range(8)))
    kv.take_block_updates()
    child = parent.sibling(1)
    kv.share_blocks(child)
    for seq, token in ((parent, 1), (child, 2)):
        seq.token_ids.append(token)
        assert kv.allocate_slots(seq, 1)
    copies, _ = kv.take_block_updates()
    assert copies == []
    assert parent.block_table[:2] == child.block_table[:2] and parent.block_table[2] != child.block_table[2]


def test_free_evicts_the_tail_before_the_head() -> None:
    kv = KVCacheManager(KVCacheConfig(num_blocks=8, block_size=2))
    seq = run_prompt(kv, [1, 2, 3, 4, 5, 6, 7])  # blocks: [1 2] [3 4] [5 6] [7]
    table = list(seq.block_table)
    kv.free(seq)
    unused = [b for b in range(8) if b not in table]
    order = [kv.pool.allocate() for _ in range(8)]
    # blocks holding nothing first, then the kept partial last block and the cached blocks, tail first
    assert set(order[:4]) == set(unused)
    assert order[4:] == [table[3], table[2], table[1], table[0]]


def test_eviction_of_the_tail_keeps_the_head_findable() -> None:
    kv = KVCacheManager(KVCacheConfig(num_blocks=6, block_size=2))
    seq = run_prompt(kv, [1, 2, 3, 4, 5, 6, 7])
    kv.free(seq)
    for _ in range(3):  # the two never-used blocks and the partial one
        kv.pool.allocate()
    probe = make_seq(kv, [1, 2, 3, 4, 5, 6, 7])
    assert len(kv.find_prefix(probe).cached) == 3
    kv.pool.allocate()  # evicts [5 6], the tail
    assert len(kv.find_prefix(probe).cached) == 2
    kv.pool.allocate()
    assert len(kv.find_prefix(probe).cached) == 1


def test_prefix_hit_never_covers_the_last_token() -> None:
    kv = KVCacheManager(KVCacheConfig(num_blocks=10, block_size=4))
    kv.free(run_prompt(kv, list(range(8))))
    same = make_seq(kv, list(range(8)))
    assert len(kv.find_prefix(same).cached) == 1  # not both: the last token must be computed for logits
    longer = make_seq(kv, list(range(9)))
    assert len(kv.find_prefix(longer).cached) == 2
    compute(kv, same, 4, kv.find_prefix(same).cached)
    assert same.num_computed_tokens == 8


def test_prefix_hit_needs_the_same_whole_prefix() -> None:
    kv = KVCacheManager(KVCacheConfig(num_blocks=10, block_size=2))
    kv.free(run_prompt(kv, [1, 2, 3, 4, 5]))
    assert len(kv.find_prefix(make_seq(kv, [9, 9, 3, 4, 5])).cached) == 0  # same second block, other first block
    assert len(kv.find_prefix(make_seq(kv, [1, 2, 3, 9, 5])).cached) == 1


def test_least_recently_freed_prefix_is_evicted_first() -> None:
    kv = KVCacheManager(KVCacheConfig(num_blocks=6, block_size=2))
    a = run_prompt(kv, [1, 1, 1, 1, 1])  # two cached blocks and a partial one
    b = run_prompt(kv, [2, 2, 2, 2, 2])
    kv.free(a)
    kv.free(b)
    probe_a, probe_b = make_seq(kv, [1, 1, 1, 1, 1]), make_seq(kv, [2, 2, 2, 2, 2])
    kv.pool.allocate()  # a's kept partial block: a was freed first, and its tail goes first
    assert len(kv.find_prefix(probe_a).cached) == 2 and len(kv.find_prefix(probe_b).cached) == 2
    longer_a, longer_b = make_seq(kv, [1, 1, 1, 1, 1, 7]), make_seq(kv, [2, 2, 2, 2, 2, 7])
    assert kv.find_prefix(longer_a).partial is None and kv.find_prefix(longer_b).partial_tokens == 1
    kv.pool.allocate(), kv.pool.allocate()
    assert len(kv.find_prefix(probe_a).cached) == 0 and len(kv.find_prefix(probe_b).cached) == 2


def test_a_prefix_hit_makes_the_prefix_recently_used() -> None:
    kv = KVCacheManager(KVCacheConfig(num_blocks=6, block_size=2))
    kv.free(run_prompt(kv, [1, 1, 1, 1, 1]))
    kv.free(run_prompt(kv, [2, 2, 2, 2, 2]))
    kv.free(run_prompt(kv, [1, 1, 1, 1, 1, 3]))  # hits and frees [1 1] [1 1] again: now newer than [2 2]s
    probe_a, probe_b = make_seq(kv, [1, 1, 1, 1, 1]), make_seq(kv, [2, 2, 2, 2, 2])
    for _ in range(4):
        kv.pool.allocate()
    assert len(kv.find_prefix(probe_a).cached) == 2 and len(kv.find_prefix(probe_b).cached) == 0


def test_failed_allocation_changes_nothing() -> None:
    kv = KVCacheManager(KVCacheConfig(num_blocks=4, block_size=2))
    a = run_prompt(kv, [1, 2, 3])
    kv.take_block_updates()
    child = a.sibling(1)
    kv.share_blocks(child)
    big = make_seq(kv, list(range(20)))
    before = snapshot(kv, [a, child, big])
    assert not kv.allocate_slots(big, 20)
    a.token_ids.extend([4, 5, 6, 7, 8])
    before = snapshot(kv, [a, child, big])
    assert not kv.allocate_slots(a, 5)  # needs a copy of the shared partial block and two more blocks
    assert snapshot(kv, [a, child, big]) == before
    assert kv.allocate_slots(a, 3)  # a copy and one more block fit


def test_revived_cached_blocks_count_against_the_free_pool() -> None:
    kv = KVCacheManager(KVCacheConfig(num_blocks=4, block_size=2))
    kv.free(run_prompt(kv, [1, 2, 3, 4, 5]))  # [1 2] [3 4] cached and free, the [5] block free
    other = run_prompt(kv, [9])  # takes one block
    seq = make_seq(kv, [1, 2, 3, 4, 5, 6, 7, 8])
    cached = kv.find_prefix(seq).cached
    assert len(cached) == 2
    before = snapshot(kv, [other, seq])
    assert not kv.allocate_slots(seq, 4, PrefixHit(cached))  # 2 revived + 2 new > 3 free
    assert snapshot(kv, [other, seq]) == before
    assert kv.allocate_slots(seq, 2, PrefixHit(cached))  # 2 revived + 1 new


def test_lookup_checks_the_tokens_behind_a_hash() -> None:
    pool = BlockPool(4)
    block_id = pool.allocate()
    pool.register(block_id, 1234, [5, 6])
    assert pool.lookup(1234, [5, 6]) == block_id
    assert pool.lookup(1234, [5, 7]) is None  # a hash collision is no hit
    assert pool.lookup(4321, [5, 6]) is None


def test_all_blocks_return_to_the_free_queue() -> None:
    kv = KVCacheManager(KVCacheConfig(num_blocks=12, block_size=3))
    seqs = [run_prompt(kv, [1, 2, 3, 4, 5, 6, 7]), run_prompt(kv, [1, 2, 3, 4, 5, 6, 8, 9])]
    child = seqs[0].sibling(1)
    kv.share_blocks(child)
    for seq in seqs + [child]:
        kv.free(seq)
    assert all(b.ref_count == 0 for b in kv.pool.blocks)
    assert sorted(kv.pool.free_queue) == list(range(12))


def test_the_next_turn_copies_the_kept_partial_block_instead_of_computing_it() -> None:
    kv = KVCacheManager(KVCacheConfig(num_blocks=8, block_size=4))
    first = run_prompt(kv, [1, 2, 3, 4, 5, 6])  # [1 2 3 4] [5 6 . .]
    partial = first.block_table[1]
    kv.free(first)
    turn = make_seq(kv, [1, 2, 3, 4, 5, 6, 7, 8, 9])
    hit = kv.find_prefix(turn)
    cached, found, held = hit.cached, hit.partial, hit.partial_tokens
    assert len(cached) == 1 and found == partial and held == 2 and hit.num_tokens == 6
    assert kv.allocate_slots(turn, len(turn) - hit.num_tokens, hit)
    assert hit.num_tokens == 6 and turn.block_table[0] == cached[0][1]  # none of the 6 on disk failed
    assert kv.pool.blocks[partial].ref_count == 1  # held until the copy is handed out with the step
    copies, _ = kv.take_block_updates()
    assert copies == [(partial, turn.block_table[1])] and partial not in turn.block_table
    assert kv.pool.blocks[partial].ref_count == 0 and kv.pool.lookup_partial(cached[0][0]) == found  # still kept
    kv.free(turn)
    assert all(b.ref_count == 0 for b in kv.pool.blocks)


def test_a_partial_block_that_a_fork_still_holds_is_not_kept() -> None:
    kv = KVCacheManager(KVCacheConfig(num_blocks=8, block_size=4))
    parent = run_prompt(kv, [1, 2, 3, 4, 5, 6])
    child = parent.sibling(1)
    kv.share_blocks(child)
    partial = child.block_table[1]
    kv.free(parent)  # the child still holds (and may write into) the partial block
    assert kv.pool.partials == {}
    kv.free(child)  # the last owner: now it is kept
    assert list(kv.pool.partials.values()) == [partial]
