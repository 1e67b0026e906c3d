"""Continuous batching and each sequence's life: which sequences run this step and how many of their tokens, then,
once the step's tokens are computed and sampled, their new tokens, the replies that start beside them, and those
that end."""

from collections import deque
from dataclasses import dataclass

from localchat.engine.core.kv_cache_manager import KVCacheManager
from localchat.engine.core.sequence import Sequence, SequenceStatus
from localchat.engine.core.speculator import STEP_ROWS, Speculator
from localchat.engine.core.step_outputs import LogitRows, SampleRows, ScheduledBatch
from localchat.engine.frontend.structured_output import GrammarFailed


@dataclass(frozen=True)
class StopRules:
    """When a reply ends besides its own params: the model's end-of-reply tokens, and its length."""

    eos_token_ids: frozenset[int]
    max_model_len: int


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
        if batch.num_tokens - batch.num_draft_tokens == len(batch.seqs):  # decodes only: another matter
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
                 pace: StepPace | None = None, stop: StopRules | None = None, speculator: Speculator | None = None):
        self.kv = kv
        self.speculator = speculator or Speculator(enabled=False)
        self.max_num_seqs = max_num_seqs
        self.max_num_batched_tokens = max_num_batched_tokens
        self.pace = pace or StepPace(None)
        self.stop = stop or StopRules(frozenset(), 2**63)
        self.prompt_tokens = self.cached_prompt_tokens = 0  # of every request's first admission
        self.waiting: deque[Sequence] = deque()
        self.running: list[Sequence] = []  # in admission order: the last is the newest
        self.num_preemptions = 0

    def add(self, seq: Sequence) -> None:
        self.waiting.append(seq)

    def clear(self) -> None:
        """Forget every sequence (after a failed step; KVCacheManager.reset frees their blocks)."""
        self.waiting.clear()
        self.running.clear()
        self.speculator.clear()

    def schedule(self) -> ScheduledBatch:
        """Decodes first, then chunks of prefills, within one token budget (and, beside decodes, within what the
        pace allows); a step of decodes alone takes their drafts (_draft). When blocks run out the newest running
        sequence is preempted: its blocks are freed (kept as cache) and it waits to be recomputed; a draft never
        preempts anything."""
        budget = self.max_num_batched_tokens
        scheduled: dict[Sequence, int] = {}
        drafts: dict[Sequence, list[int]] = {}
        num_preemptions = self.num_preemptions
        decodes = [s for s in self.running if s.num_uncomputed_tokens == 1]
        prefills = [s for s in self.running if s.num_uncomputed_tokens > 1]
        for seq in decodes:
            budget -= self._continue(seq, budget, scheduled)
        if scheduled:  # the prefills beside these decodes: a step short enough for their next tokens
            budget = min(budget, self.pace.prefill_budget() or budget)
        for seq in prefills:
            budget -= self._continue(seq, budget, scheduled)
        if self.num_preemptions == num_preemptions:  # no re-admission in the step that preempted
            budget -= self._admit(budget, scheduled)
        if all(n == 1 for n in scheduled.values()):  # a step of decodes alone: drafts ride along where they fit
            self._draft(decodes, scheduled, drafts, budget)
        seqs, num_new_tokens = list(scheduled), list(scheduled.values())
        seq_drafts = [drafts.get(seq, []) for seq in seqs]
        sample_rows = [i for i, (seq, n, draft) in enumerate(zip(seqs, num_new_tokens, seq_drafts))
                       if seq.num_computed_tokens + n == len(seq) + len(draft)]
        return ScheduledBatch(seqs, num_new_tokens, *self.kv.take_block_updates(), sample_rows, seq_drafts)

    def _admit(self, budget: int, scheduled: dict[Sequence, int]) -> int:
        """Admit waiting sequences in order, each with what it finds of its tokens already held (KVCacheManager
        find_prefix), while the budget, the batch's slots and the free blocks allow; the tokens scheduled."""
        used = 0
        while self.waiting and used < budget and len(self.running) < self.max_num_seqs:
            seq = self.waiting[0]
            hit = self.kv.find_prefix(seq)
            num_new = min(len(seq) - hit.num_tokens, budget - used)
            if not self.kv.allocate_slots(seq, num_new, hit):
                break
            self.waiting.popleft()
            if seq.num_admissions == 0:
                seq.num_cached_tokens = seq.num_computed_tokens  # found in memory or read from disk
                self.prompt_tokens += len(seq)
                self.cached_prompt_tokens += seq.num_cached_tokens
            seq.num_admissions += 1
            seq.status = SequenceStatus.RUNNING
            self.running.append(seq)
            scheduled[seq] = num_new
            used += num_new
        return used

    def _draft(self, decodes: list[Sequence], scheduled: dict[Sequence, int], drafts: dict[Sequence, list[int]],
               budget: int) -> None:
        """Drafts for a step of decodes alone, while its rows stay within STEP_ROWS (a step that prefills, or
        has more rows, is compute-bound: a draft there costs what it saves)."""
        room = STEP_ROWS - len(scheduled)
        for seq in decodes:
            # not while a grammar waits for the reply's thinking to end: a draft's tokens past the closing marker
            # would not be checked by it
            if room > 0 and seq in scheduled and seq.num_siblings_pending == 0 and not seq.grammar_waits_for_answer:
                draft = self.speculator.propose(seq, min(room, budget), self.stop.max_model_len)
                if draft and self.kv.allocate_slots(seq, 1 + len(draft)):
                    drafts[seq] = draft
                    scheduled[seq] += len(draft)
                    budget -= len(draft)
                    room -= len(draft)

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

    def commit_and_fork(self, computed: LogitRows) -> SampleRows:
        """The step's tokens are in the cache: count them (their full blocks become findable; a draft's only once it
        is kept, see settle), and start the other replies of each request whose prompt is now computed, sharing every
        block (the prompt is computed once for all n replies). What to sample: the sequences of the batch's sample
        rows, each request's new replies beside its first, on its row."""
        batch = computed.batch
        for seq, n, draft in zip(batch.seqs, batch.num_new_tokens, batch.drafts):
            self.kv.commit(seq, n - len(draft))
        rows, logit_row = SampleRows(computed.logits), 0
        for i in batch.sample_rows:
            seq, draft = batch.seqs[i], batch.drafts[i]
            rows.add(seq, logit_row, draft)
            for k in range(1, seq.num_siblings_pending + 1):
                rows.add(self.add_sibling(seq.sibling(k)), logit_row, [])
            seq.num_siblings_pending = 0
            logit_row += 1 + len(draft)
        return rows

    def settle(self, seq: Sequence, draft: list[int], kept: int) -> None:
        """seq's draft is scored and its first `kept` tokens kept (they are in token_ids now): their K and V count,
        the rest are dropped with the blocks that held nothing else (never hashed, never findable)."""
        self.speculator.settle(seq, len(draft), kept)
        if not seq.is_finished:
            self.kv.commit(seq, kept)
            self.kv.trim(seq)

    def add_sibling(self, child: Sequence) -> Sequence:
        """Run child, just copied from a running sequence (Sequence.sibling), beside it, sharing its blocks."""
        self.kv.share_blocks(child)
        self.running.append(child)
        return child

    def update(self, seqs: list[Sequence], token_ids: list[int], stopped: list[bool]) -> dict[str, str]:
        """Each sampled sequence takes its token: its grammar advances, its full blocks are hashed, and a reply
        that ends with it (`stopped`: a stop string in its text; its grammar done, a stop token, max_tokens or the
        model's length) is saved to the disk tier and finished. The requests whose grammar failed, with why: their
        sequence is ended ("abort"); the caller ends their other replies."""
        failed = {}
        for seq, token, text_stopped in zip(seqs, token_ids, stopped):
            if seq.is_finished:  # its request failed earlier in this loop
                continue
            seq.token_ids.append(token)
            try:
                grammar_done = seq.advance_grammar(token)
            except GrammarFailed as error:  # this request's own grammar: it fails alone
                failed[seq.request_id] = str(error)
                self.end(seq)
                continue
            self.kv.hash_blocks(seq)
            reason = "stop" if grammar_done or text_stopped or self._stop_token(seq, token) else None
            if reason is None and (seq.num_output_tokens >= (seq.max_tokens or 2**63)
                                   or len(seq) >= self.stop.max_model_len):
                reason = "length"
            if reason is not None:
                self.kv.save(seq)
                self.finish(seq, reason)
        return failed

    def _stop_token(self, seq: Sequence, token: int) -> bool:
        params = seq.params
        return token in params.stop_token_ids or (not params.ignore_eos and token in self.stop.eos_token_ids)

    def end(self, seq: Sequence, save: bool = True) -> None:
        """Stop a reply that has not finished ("abort"), its blocks kept on disk unless save is False."""
        if not seq.is_finished:
            if save:
                self.kv.save(seq)
            self.finish(seq, "abort")

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
        self.speculator.forget(seq)
        seq.drop_grammar()
        seq.status = SequenceStatus.FINISHED
        seq.finish_reason = reason
