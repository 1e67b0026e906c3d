"""Continuous batching and each sequence's life: which sequences run this step and how many of their tokens, then,
once the step's tokens are computed and sampled, their new tokens, the replies that start beside them, and those
that end. The scheduler builds and owns the KV cache manager and the speculator: nothing else drives them, and it
alone writes a sequence's tokens, progress and status (the KV cache manager its blocks)."""

from collections import deque
from collections.abc import Callable
from dataclasses import dataclass

import torch

from localchat.engine.core.block_chains import BlockChains
from localchat.engine.core.kv_cache_manager import KVCacheConfig, KVCacheManager, PrefixHit
from localchat.engine.core.sequence import Sequence, SequenceStatus
from localchat.engine.core.speculator import STEP_ROWS, Speculator
from localchat.engine.core.step_outputs import LogitRows, SamplerOutput, SampleRows, ScheduledBatch, VerifiedTokens
from localchat.engine.frontend.structured_output import GrammarFailed
from localchat.engine.stats import KVCacheUsage, PinUsage, SpeculationStats, Warmth


@dataclass(frozen=True)
class StopRules:
    """When a reply ends besides its own params: the model's end-of-reply tokens, and its length."""

    eos_token_ids: frozenset[int]
    max_model_len: int


class StepPace:
    """How long a step takes for each token it computes, averaged over recent steps that prefill, and so how many
    prompt tokens the next step takes. Beside replies being written, as many as keep the step near `decode_target_s`
    (their next token waits for the whole step: a 2,048-token chunk takes seconds on a CPU), that target stretched
    as more prompts wait for their first token per reply being written (a crowd that arrives at once gets its first
    tokens sooner, and the replies' gaps grow only while it waits). Never more than keep a step near `limit_s`, a
    prompt alone too, so that nothing that waits for the engine between steps (a decode, /metrics, a delete) waits
    longer. The time per token counts the step's fixed cost too, so the budget settles where a step takes its
    target: shorter steps raise it, longer ones lower it. Chunks are cut to whole tiles of the kernels' rows."""

    MIN_CHUNK = 8  # prompt tokens a step takes however slow the steps: a prompt always moves on
    FIRST_CHUNK = 128  # before any step is measured: short on any machine, long enough to measure
    ROWS = 32  # a chunk of more tokens than this is a multiple of it: the matmul kernels' row tiles stay whole
    WEIGHT = 0.3  # of the newest step in the average

    def __init__(self, decode_target_s: float | None, limit_s: float | None = None):
        self.decode_target_s, self.limit_s = decode_target_s, limit_s
        self.seconds_per_token: float | None = None
        self.decode_cost = DecodeCost()
        self.prefill_cost = StepCost()  # of the steps that prefill: what a prompt's tokens will take (prefill_s)

    def observe(self, batch: ScheduledBatch, seconds: float) -> None:
        if batch.num_tokens - batch.num_draft_tokens == len(batch.seqs):  # decodes only: what a row costs
            self.decode_cost.observe(batch.num_tokens, seconds)
            return
        self.prefill_cost.observe(batch.num_tokens, seconds)
        sample = seconds / batch.num_tokens
        old = self.seconds_per_token
        self.seconds_per_token = sample if old is None else (1 - self.WEIGHT) * old + self.WEIGHT * sample

    def prefill_s(self, tokens: int) -> float | None:
        """About how long computing `tokens` prompt tokens takes now: a step's fixed cost and each token's, fitted
        from the steps that prefilled (the time per token while steps of one size were seen); None before any."""
        fitted = self.prefill_cost.fit()
        if fitted is not None:
            fixed, per_token = fitted
            return fixed + per_token * tokens
        return self.seconds_per_token * tokens if self.seconds_per_token is not None else None

    def target_s(self, decoding: int, waiting: int) -> float | None:
        """The time a step aims at with `decoding` replies being written and `waiting` prompts before their first
        token; None: none."""
        if not decoding or self.decode_target_s is None:
            return self.limit_s
        stretched = self.decode_target_s * (1 + waiting / decoding)
        return stretched if self.limit_s is None else min(stretched, self.limit_s)

    def prefill_budget(self, decoding: int, waiting: int) -> int | None:
        """Prompt tokens for a step (see target_s); None: no limit."""
        target = self.target_s(decoding, waiting)
        if target is None:
            return None
        if self.seconds_per_token is None:
            return self.FIRST_CHUNK
        budget = max(self.MIN_CHUNK, int(target / self.seconds_per_token))
        return budget if budget < self.ROWS else budget // self.ROWS * self.ROWS


class StepCost:
    """What a kind of step costs, fitted as the steps run: seconds = fixed + per_row * rows (weighted least squares,
    the newest steps weighing most)."""

    DECAY = 0.97  # of the older steps' weight at each new step (about the last 30 steps count)

    def __init__(self):
        self.weight = self.rows = self.rows_squared = self.seconds = self.rows_seconds = 0.0

    def observe(self, rows: int, seconds: float) -> None:
        decay = self.DECAY
        self.weight = decay * self.weight + 1
        self.rows = decay * self.rows + rows
        self.rows_squared = decay * self.rows_squared + rows * rows
        self.seconds = decay * self.seconds + seconds
        self.rows_seconds = decay * self.rows_seconds + rows * seconds

    def fit(self) -> tuple[float, float] | None:
        """(fixed, per_row) seconds; None until steps of different row counts were seen."""
        spread = self.weight * self.rows_squared - self.rows**2
        if self.weight < 2 or spread <= 1e-9 * max(self.weight, 1):
            return None
        per_row = (self.weight * self.rows_seconds - self.rows * self.seconds) / spread
        fixed = (self.seconds - per_row * self.rows) / self.weight
        return max(fixed, 0.0), max(per_row, 0.0)


class DecodeCost(StepCost):
    """What a step of decodes alone costs. A decode step reads every weight once whatever its rows, so `fixed` is most
    of it while the rows are few; each row (a reply's token, or a draft token) adds its compute, `per_row`. Drafts pay
    where a kept token saves more than a drafted one costs (min_acceptance)."""

    def min_acceptance(self, replies: int) -> float:
        """The share of its draft a reply must keep for drafting to pay in a step that decodes `replies` replies: a
        drafted token costs a row; a kept one saves the reply a row in a later step and its share of that step's
        fixed cost (all of it for a reply alone, an eighth beside seven others). 0 until measured."""
        fitted = self.fit()
        if fitted is None:
            return 0.0
        fixed, per_row = fitted
        return per_row / (fixed / max(replies, 1) + per_row) if per_row > 0 else 0.0


class Scheduler:
    def __init__(self, kv_cache: KVCacheConfig, max_num_seqs: int, max_num_batched_tokens: int,
                 pace: StepPace | None = None, stop: StopRules | None = None, speculative: bool = False):
        self.kv = KVCacheManager(kv_cache)  # read by tests and stats; driven by the scheduler alone
        self.chains = BlockChains(self.kv.chain)  # each chat's block hashes, for its warmth and its pin
        self.speculator = Speculator(enabled=speculative)
        self.max_num_seqs = max_num_seqs
        self.max_num_batched_tokens = max_num_batched_tokens
        self.pace = pace or StepPace(None)
        self.stop = stop or StopRules(frozenset(), 2**63)
        self.prompt_tokens = self.cached_prompt_tokens = 0  # of every request's first admission
        self.waiting: deque[Sequence] = deque()
        self.running: list[Sequence] = []  # in admission order: the last is the newest
        self.num_preemptions = 0

    def add(self, seq: Sequence, draft_sources: list[list[int]] | None = None) -> None:
        """A request's first reply waits to run; its prompt's full blocks are hashed now, and draft_sources are the
        other texts its replies may copy from (speculator.py)."""
        self.kv.hash_blocks(seq)
        self.speculator.add_sources(seq.request_id, draft_sources or [])
        self.waiting.append(seq)

    def reset(self) -> None:
        """Forget every sequence, and start the KV memory afresh (after a failed step: see LLMEngine.reset)."""
        self.waiting.clear()
        self.running.clear()
        self.speculator.clear()
        self.kv.reset()

    def reset_prefix_cache(self) -> None:
        """Forget every cached prefix in memory (blocks in use keep their contents; the disk tier keeps its own)."""
        self.kv.forget_cached()

    def forget(self, dropped: list[list[int]], kept: list[list[int]]) -> int:
        """Drop the cached blocks of the token sequences `dropped` that none of `kept` shares (KVCacheManager)."""
        return self.kv.forget(dropped, kept)

    @property
    def kv_usage(self) -> KVCacheUsage:
        return self.kv.usage()

    # --- chats: where their history is, and pins that keep it warm ---

    def warmth(self, key: str, token_ids: list[int]) -> Warmth:
        """Where the history token_ids of the chat `key` is, and what it adds to the next first token's wait (see
        Warmth); read from any thread (an estimate: nothing waits for a step, nothing changes)."""
        bs = self.kv.block_size
        resident, on_disk = self.kv.held(self.chains.get(key, token_ids), token_ids)
        cold = len(token_ids) - resident - on_disk
        held = resident + on_disk
        state = "cold" if cold > bs or (cold and not held) else "on_disk" if on_disk else "resident"
        return Warmth(len(token_ids), resident, on_disk, state, self._wait_s(cold, on_disk // bs),
                      key in self.kv.pins)

    def _wait_s(self, cold_tokens: int, disk_blocks: int) -> float | None:
        """What computing cold_tokens and reading disk_blocks adds to a first token's wait, from the measured prefill
        and disk read times; None while either is needed and not yet measured."""
        compute = self.pace.prefill_s(cold_tokens) if cold_tokens else 0.0
        per_block = self.kv.disk_seconds_per_block
        if compute is None or (disk_blocks and per_block is None):
            return None
        return compute + disk_blocks * (per_block or 0.0)

    def pin(self, key: str, token_ids: list[int]) -> None:
        """Keep the chat `key`'s history warm, in place of its earlier pin (KVCacheManager.pin; PinRefused over the
        budget)."""
        self.kv.pin(key, self.chains.get(key, token_ids), token_ids)

    def unpin(self, key: str) -> bool:
        return self.kv.unpin(key)

    def pin_usage(self, block_bytes: int) -> PinUsage:
        return self.kv.pin_usage(block_bytes)

    @property
    def speculation(self) -> SpeculationStats:
        return self.speculator.stats

    def schedule(self) -> ScheduledBatch:
        """Decodes first, then chunks of prefills, within one token budget and what the pace allows (StepPace); a
        step of decodes alone takes their drafts (_draft). When blocks run out the newest running
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
        paced = self.pace.prefill_budget(len(scheduled), len(prefills) + len(self.waiting))
        budget = min(budget, paced or budget)  # a step short enough for the decodes' next tokens, and for the rest
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
        find_prefix), while the budget, the batch's slots and the free blocks allow; the tokens scheduled. A sequence
        whose next block a running sequence is computing waits, in its place, until that block is cached (_waits):
        prompts that share a prefix and arrive together (a fork's variations, 32 chats with one system prompt)
        compute it once."""
        used, held = 0, []
        in_flight = {h for s in self.running if s.num_uncomputed_tokens > 1 for h in self._computing(s)}
        while self.waiting and used < budget and len(self.running) < self.max_num_seqs:
            seq = self.waiting[0]
            hit = self.kv.find_prefix(seq)
            if self._waits(seq, hit, in_flight):
                held.append(self.waiting.popleft())
                continue
            num_new = min(len(seq) - hit.num_tokens, budget - used)
            if not self.kv.allocate_slots(seq, num_new, hit):
                break
            self.waiting.popleft()
            self._start(seq, hit)
            scheduled[seq] = num_new
            used += num_new
            in_flight.update(self._computing(seq))
        self.waiting.extendleft(reversed(held))
        return used

    def _computing(self, seq: Sequence) -> list[bytes]:
        """The hashes of seq's full blocks that it has yet to compute."""
        return seq.block_hashes[seq.num_computed_tokens // self.kv.block_size :]

    def _waits(self, seq: Sequence, hit: PrefixHit, in_flight: set[bytes]) -> bool:
        """Whether seq's next block, past what it finds held, is one that a running sequence computes (in_flight), and
        one a hit could give it (never the block of its last token)."""
        k = hit.num_tokens // self.kv.block_size
        hashed = min(len(seq.block_hashes), (len(seq) - 1) // self.kv.block_size)  # none without prefix caching
        return k < hashed and seq.block_hashes[k] in in_flight

    def _start(self, seq: Sequence, hit: PrefixHit) -> None:
        """seq runs from now on, the tokens of its hit computed (as many as the hit held once read: a failed disk block
        not); at its first admission they are its cached tokens, and the prompt counters take it in."""
        seq.num_computed_tokens += hit.num_tokens
        if seq.num_admissions == 0:
            seq.num_cached_tokens = seq.num_computed_tokens  # found in memory or read from disk
            self.prompt_tokens += len(seq)
            self.cached_prompt_tokens += seq.num_cached_tokens
        seq.num_admissions += 1
        seq.status = SequenceStatus.RUNNING
        self.running.append(seq)

    def _draft(self, decodes: list[Sequence], scheduled: dict[Sequence, int], drafts: dict[Sequence, list[int]],
               budget: int) -> None:
        """Drafts for a step of decodes alone, while its rows stay within STEP_ROWS (a step that prefills, or
        has more rows, is compute-bound: a draft there costs what it saves), for the replies whose drafts keep
        enough to pay in a step of this many replies (DecodeCost.min_acceptance: eight forks decoding together
        gain from a kept token an eighth of what a reply alone gains)."""
        room = STEP_ROWS - len(scheduled)
        min_acceptance = self.pace.decode_cost.min_acceptance(len(scheduled))
        for seq in decodes:
            # not while a grammar waits for the reply's thinking to end: a draft's tokens past the closing marker
            # would not be checked by it
            if room > 0 and seq in scheduled and seq.num_siblings_pending == 0 and not seq.grammar_waits_for_answer:
                draft = self.speculator.propose(seq, min(room, budget), self.stop.max_model_len, min_acceptance)
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

    def _computed(self, seq: Sequence, num_new_tokens: int) -> None:
        """seq's next num_new_tokens tokens are in the cache: count them, and their full blocks become findable."""
        before = seq.num_computed_tokens
        seq.num_computed_tokens += num_new_tokens
        self.kv.cache_computed(seq, before)

    def commit_and_fork(self, computed: LogitRows) -> SampleRows:
        """The step's tokens are in the cache: count them (their full blocks become findable; a draft's only once it
        is kept, see settle), and start the other replies of each request whose prompt is now computed, sharing every
        block (the prompt is computed once for all n replies). What to sample: the sequences of the batch's sample
        rows, each request's new replies beside its first, on its row."""
        batch = computed.batch
        for seq, n, draft in zip(batch.seqs, batch.num_new_tokens, batch.drafts):
            self._computed(seq, n - len(draft))
        rows, logit_row = SampleRows(computed.logits), 0
        for i in batch.sample_rows:
            seq, draft = batch.seqs[i], batch.drafts[i]
            rows.add(seq, logit_row, draft)
            for k in range(1, seq.num_siblings_pending + 1):
                rows.add(self.add_sibling(seq.sibling(k)), logit_row, [])
            seq.num_siblings_pending = 0
            logit_row += 1 + len(draft)
        return rows

    def verify(self, sampler: Callable[[torch.Tensor, list], SamplerOutput], rows: SampleRows) -> list[VerifiedTokens]:
        """Sample the step's rows, each draft kept as far as the sampler agrees with it (Speculator.verify)."""
        return self.speculator.verify(sampler, rows)

    def settle(self, seq: Sequence, draft: list[int], kept: int) -> None:
        """seq's draft is scored and its first `kept` tokens kept (they are in token_ids now): their K and V count,
        the rest are dropped with the blocks that held nothing else (never hashed, never findable)."""
        self.speculator.settle(seq, len(draft), kept)
        if not seq.is_finished:
            self._computed(seq, kept)
            self.kv.trim(seq)

    def add_sibling(self, child: Sequence) -> Sequence:
        """Run child, just copied from a running sequence (Sequence.sibling), beside it, sharing its blocks."""
        self.kv.share_blocks(child)
        self.running.append(child)
        return child

    def take(self, seq: Sequence, token: int, text_stopped: bool) -> str | None:
        """seq takes its sampled token: its grammar advances, its full blocks are hashed, and a reply that ends with it
        (text_stopped: a stop string in its text; its grammar done, a stop token, max_tokens or the model's length)
        is saved to the disk tier and finished. Why its request failed, if its grammar refused the token (the reply
        is ended, "abort"; the caller ends the request's other replies); else None."""
        seq.token_ids.append(token)
        try:
            grammar_done = seq.advance_grammar(token)
        except GrammarFailed as error:  # this request's own grammar: it fails alone
            self.end(seq)
            return str(error)
        self.kv.hash_blocks(seq)
        reason = "stop" if grammar_done or text_stopped or self._stop_token(seq, token) else None
        if reason is None and (seq.num_output_tokens >= (seq.max_tokens or 2**63)
                               or len(seq) >= self.stop.max_model_len):
            reason = "length"
        if reason is not None:
            self.kv.save(seq)
            self.finish(seq, reason)
        return None

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
        seq.num_computed_tokens = 0
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
        seq.num_computed_tokens = 0
        self.speculator.forget(seq)
        seq.drop_grammar()
        seq.status = SequenceStatus.FINISHED
        seq.finish_reason = reason
