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


class StepPace:
    """How long a step takes for each token it computes, averaged over recent steps that prefill, and so how many
    prefill tokens fit beside running decodes in `target_s` (their next token waits for the whole step: a
    2,048-token chunk takes seconds on a CPU). The time per token counts the step's fixed cost too, so the budget
    settles where a step takes target_s: shorter steps raise it, longer ones lower it."""

    MIN_CHUNK = 8  # prefill tokens beside decodes, however slow the steps: a prompt always moves on
    WEIGHT = 0.3  # of the newest step in the average

    def __init__(self, target_s: float | None):
        self.target_s = target_s
        self.seconds_per_token: float | None = None

    def observe(self, batch: ScheduledBatch, seconds: float) -> None:
        if batch.num_tokens == len(batch.seqs):  # decodes only: their cost per token is another matter
            return
        sample = seconds / batch.num_tokens
        old = self.seconds_per_token
        self.seconds_per_token = sample if old is None else (1 - self.WEIGHT) * old + self.WEIGHT * sample

    def prefill_budget(self) -> int | None:
        """Prefill tokens for a step that also decodes; None: no limit (no target, or nothing measured yet)."""
        if self.target_s is None or self.seconds_per_token is None:
            return None
        return max(self.MIN_CHUNK, int(self.target_s / self.seconds_per_token))


class Scheduler:
    def __init__(self, kv: KVCacheManager, max_num_seqs: int, max_num_batched_tokens: int,
                 pace: StepPace | None = None):
        self.kv = kv
        self.max_num_seqs = max_num_seqs
        self.max_num_batched_tokens = max_num_batched_tokens
        self.pace = pace or StepPace(None)
        self.waiting: deque[Sequence] = deque()
        self.running: list[Sequence] = []  # in admission order: the last is the newest
        self.num_preemptions = 0

    def add(self, seq: Sequence) -> None:
        self.waiting.append(seq)

    def clear(self) -> None:
        """Forget every sequence (after a failed step; KVCacheManager.reset frees their blocks)."""
        self.waiting.clear()
        self.running.clear()

    def schedule(self) -> ScheduledBatch:
        """Decodes first, then chunks of prefills, within one token budget (and, beside decodes, within what the
        pace allows). When blocks run out the newest running sequence is preempted: its blocks are freed (kept as
        cache) and it waits to be recomputed."""
        budget = self.max_num_batched_tokens
        scheduled: dict[Sequence, int] = {}
        num_preemptions = self.num_preemptions
        decodes = [s for s in self.running if s.num_uncomputed_tokens == 1]
        prefills = [s for s in self.running if s.num_uncomputed_tokens > 1]
        for seq in decodes:
            budget -= self._continue(seq, budget, scheduled)
        if scheduled:  # the prefills beside these decodes: a step short enough for their next tokens
            budget = min(budget, self.pace.prefill_budget() or budget)
        for seq in prefills:
            budget -= self._continue(seq, budget, scheduled)
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

    def _continue(self, seq: Sequence, budget: int, scheduled: dict[Sequence, int]) -> int:
        """Schedule a running sequence's next tokens within budget, preempting the newest others while blocks run
        out (or seq itself, last); the tokens scheduled."""
        if budget == 0 or seq.status is not SequenceStatus.RUNNING:  # no room, or preempted earlier in this step
            return 0
        num_new = min(seq.num_uncomputed_tokens, budget)
        while not self.kv.allocate_slots(seq, num_new):
            victim = next((s for s in reversed(self.running) if s is not seq and s not in scheduled), seq)
            self.preempt(victim)
            if victim is seq:
                return 0
        scheduled[seq] = num_new
        return num_new

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
