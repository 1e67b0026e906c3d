"""Continuous batching: which sequences run this step and how many of their tokens."""

from collections import deque
from dataclasses import dataclass

from localchat.engine.kv_cache_manager import KVCacheManager
from localchat.engine.sequence import Sequence, SequenceStatus


@dataclass
class ScheduledBatch:
    seqs: list[Sequence]
    num_new_tokens: list[int]  # tokens of each sequence computed this step
    copies: list[tuple[int, int]]  # copy-on-write block copies to make before the forward
    cleared: list[int]  # blocks to zero before the forward (first use)

    @property
    def num_tokens(self) -> int:
        return sum(self.num_new_tokens)

    @property
    def sample_rows(self) -> list[int]:
        """The sequences whose last token is computed in this step: they get logits and a new token."""
        return [i for i, (seq, n) in enumerate(zip(self.seqs, self.num_new_tokens))
                if seq.num_computed_tokens + n == len(seq)]


class Scheduler:
    def __init__(self, kv: KVCacheManager, max_num_seqs: int, max_num_batched_tokens: int):
        self.kv = kv
        self.max_num_seqs = max_num_seqs
        self.max_num_batched_tokens = max_num_batched_tokens
        self.waiting: deque[Sequence] = deque()
        self.running: list[Sequence] = []  # in admission order: the last is the newest
        self.num_preemptions = 0

    def add(self, seq: Sequence) -> None:
        self.waiting.append(seq)

    def schedule(self) -> ScheduledBatch:
        """Decodes first, then chunks of prefills, within one token budget. When blocks run out the
        newest running sequence is preempted: its blocks are freed (kept as cache) and it waits to be
        recomputed."""
        budget = self.max_num_batched_tokens
        scheduled: dict[Sequence, int] = {}
        num_preemptions = self.num_preemptions
        decodes = [s for s in self.running if s.num_uncomputed_tokens == 1]
        prefills = [s for s in self.running if s.num_uncomputed_tokens > 1]
        for seq in decodes + prefills:
            if budget == 0:
                break
            if seq.status is not SequenceStatus.RUNNING:  # preempted earlier in this loop
                continue
            num_new = min(seq.num_uncomputed_tokens, budget)
            while not self.kv.allocate_slots(seq, num_new):
                victim = next((s for s in reversed(self.running) if s is not seq and s not in scheduled), seq)
                self.preempt(victim)
                if victim is seq:
                    break
            else:
                scheduled[seq] = num_new
                budget -= num_new
        while (self.waiting and budget > 0 and len(self.running) < self.max_num_seqs
               and self.num_preemptions == num_preemptions):  # no re-admission in the step that preempted
            seq = self.waiting[0]
            cached = self.kv.find_cached_prefix(seq)
            on_disk = self.kv.find_disk_prefix(seq, len(cached))
            partial, partial_tokens = (None, 0) if on_disk else self.kv.find_partial(seq, len(cached))
            num_new = min(len(seq) - (len(cached) + len(on_disk)) * self.kv.block_size - partial_tokens, budget)
            if not self.kv.allocate_slots(seq, num_new, cached, on_disk, partial, partial_tokens):
                break
            self.waiting.popleft()
            if seq.num_admissions == 0:
                seq.num_cached_tokens = seq.num_computed_tokens  # found in memory or read from disk
            seq.num_admissions += 1
            seq.status = SequenceStatus.RUNNING
            self.running.append(seq)
            scheduled[seq] = num_new
            budget -= num_new
        return ScheduledBatch(list(scheduled), list(scheduled.values()), *self.kv.take_block_updates())

    def fork(self, child: Sequence) -> Sequence:
        """Run child, just copied from a running sequence (Sequence.fork), beside it, sharing its blocks."""
        self.kv.fork(child)
        self.running.append(child)
        return child

    def preempt(self, seq: Sequence) -> None:
        self.running.remove(seq)
        self.kv.free(seq)
        seq.status = SequenceStatus.WAITING
        self.waiting.appendleft(seq)
        self.num_preemptions += 1

    def finish(self, seq: Sequence, reason: str) -> None:
        """End a sequence wherever it is, return its blocks to the pool and drop its grammar state."""
        if seq.status is SequenceStatus.RUNNING:
            self.running.remove(seq)
        elif seq.status is SequenceStatus.WAITING:
            self.waiting.remove(seq)
        self.kv.free(seq)
        seq.matcher = None
        seq.status = SequenceStatus.FINISHED
        seq.finish_reason = reason
