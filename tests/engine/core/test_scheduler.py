"""The scheduler's pace: beside running decodes, a prompt's prefill goes in chunks that keep a step near its target
time, stretched while more prompts wait for their first token; alone, in chunks that keep a step near the limit."""

import torch

from localchat.engine.core.kv_cache_manager import KVCacheConfig
from localchat.engine.core.scheduler import DecodeCost, ScheduledBatch, Scheduler, StepPace
from localchat.engine.core.sequence import Sequence
from localchat.engine.core.step_outputs import LogitRows
from localchat.engine.sampling_params import SamplingParams


def sequence(request_id: str, num_tokens: int) -> Sequence:
    return Sequence(request_id, 0, list(range(num_tokens)), num_tokens, SamplingParams(max_tokens=8))


def decoding(scheduler: Scheduler) -> Sequence:
    """A sequence whose prompt is computed: it decodes one token a step from now on."""
    seq = sequence("decoding", 10)
    scheduler.add(seq)
    scheduler.commit_and_fork(LogitRows(torch.empty(0), scheduler.schedule()))
    scheduler.take(seq, 7, text_stopped=False)
    return seq


def test_a_prefill_beside_decodes_is_cut_to_the_pace_and_alone_to_the_step_limit():
    pace = StepPace(decode_target_s=0.2, limit_s=1.0)
    scheduler = Scheduler(KVCacheConfig(256, 16, enable_prefix_caching=False), max_num_seqs=8,
                          max_num_batched_tokens=2048, pace=pace)
    decode = decoding(scheduler)
    pace.seconds_per_token = 0.005  # 40 tokens in 0.2 s
    scheduler.add(sequence("long prompt", 1000))
    batch = scheduler.schedule()
    # one prompt waits for its first token per reply being written: 0.2 s stretched to 0.4 s, 80 tokens, cut to
    # whole tiles of 32 rows
    assert batch.num_new_tokens == [1, 64]
    scheduler.finish(decode, "stop")
    scheduler.commit_and_fork(LogitRows(torch.empty(0), ScheduledBatch(batch.seqs[1:], [64], [], [])))
    assert scheduler.schedule().num_new_tokens == [192]  # alone: 1.0 s, 200 tokens, not the whole budget


def test_a_crowd_waiting_for_first_tokens_stretches_the_step_up_to_the_limit():
    pace = StepPace(decode_target_s=0.2, limit_s=1.0)
    pace.seconds_per_token = 0.005
    assert pace.prefill_budget(decoding=4, waiting=0) == 32  # a background prompt: the replies' pace
    assert pace.prefill_budget(decoding=4, waiting=4) == 64  # as many waiting as writing: twice as long
    assert pace.prefill_budget(decoding=1, waiting=31) == 192  # 32 chats at once: the limit, 1 s
    assert StepPace(0.2, 1.0).prefill_budget(1, 1) == StepPace.FIRST_CHUNK  # nothing measured yet
    assert StepPace(None, None).prefill_budget(1, 1) is None


def test_a_long_prompt_alone_is_prefilled_in_steps_near_the_limit():
    """A 6,000-token prompt on a machine whose steps cost a fixed 50 ms, 4 ms a token and more as the prompt's own
    earlier tokens grow (attention): every step stays near the 1 s limit, the first one short."""
    pace = StepPace(decode_target_s=0.2, limit_s=1.0)
    scheduler = Scheduler(KVCacheConfig(512, 16, enable_prefix_caching=False), max_num_seqs=8,
                          max_num_batched_tokens=2048, pace=pace)
    prompt = sequence("document", 6000)
    scheduler.add(prompt)
    steps = []
    while prompt.num_uncomputed_tokens > 1 or not steps:
        batch = scheduler.schedule()
        (n,) = batch.num_new_tokens
        seconds = 0.05 + n * (0.004 + 2e-7 * (prompt.num_computed_tokens + n / 2))
        pace.observe(batch, seconds)
        scheduler.commit_and_fork(LogitRows(torch.empty(0), batch))
        steps.append((n, seconds))
    assert steps[0][0] == StepPace.FIRST_CHUNK and sum(n for n, _ in steps) == 6000
    assert max(seconds for _, seconds in steps) < 1.2, steps
    assert sum(seconds for _, seconds in steps[1:]) / (len(steps) - 1) > 0.8  # not cut shorter than it needs


def test_the_pace_settles_where_a_step_takes_its_target():
    """A step costs a fixed 40 ms plus 5 ms a token: the budget goes to the 32 tokens of a 0.2 s step, from above
    and from below, and never under the smallest chunk however slow the steps."""
    def step_seconds(tokens: int) -> float:
        return 0.040 + 0.005 * tokens

    for start in (2000, StepPace.MIN_CHUNK):
        pace = StepPace(decode_target_s=0.2, limit_s=1.0)
        tokens = start
        for _ in range(60):
            pace.observe(ScheduledBatch([None, None], [1, tokens - 1], [], []), step_seconds(tokens))
            tokens = pace.prefill_budget(decoding=1, waiting=0)
        assert abs(tokens - 32) <= 1
    slow = StepPace(decode_target_s=0.2, limit_s=1.0)
    slow.observe(ScheduledBatch([None, None], [1, 9], [], []), 5.0)
    assert slow.prefill_budget(1, 0) == StepPace.MIN_CHUNK


def test_steps_of_decodes_alone_teach_the_pace_nothing():
    pace = StepPace(decode_target_s=0.2, limit_s=1.0)
    pace.observe(ScheduledBatch([None] * 4, [1, 1, 1, 1], [], []), 0.5)
    assert pace.seconds_per_token is None


def test_the_decode_cost_is_fitted_from_the_steps_and_says_where_drafts_pay():
    cost = DecodeCost()
    assert cost.fit() is None and cost.min_acceptance(8) == 0.0  # nothing measured: drafts may be tried
    for rows in [1, 3, 2, 8, 12, 9, 4] * 5:
        cost.observe(rows, 0.005 + 0.001 * rows)  # a 5 ms weight pass, 1 ms a row
    fixed, per_row = cost.fit()
    assert abs(fixed - 0.005) < 1e-6 and abs(per_row - 0.001) < 1e-7
    # a kept token saves its reply a row and its share of a step's fixed cost
    assert abs(cost.min_acceptance(1) - 0.001 / 0.006) < 1e-6  # alone: a sixth of a draft kept pays
    assert abs(cost.min_acceptance(8) - 0.001 / (0.005 / 8 + 0.001)) < 1e-6  # eight forks: 62%


def repetitive(request_id: str) -> Sequence:
    """A decoding reply whose tokens repeat, so the speculator always finds a draft."""
    return Sequence(request_id, 0, [1, 2, 3, 4] * 8, 4, SamplingParams(max_tokens=500))


def test_forks_that_keep_little_of_their_drafts_decode_without_them_and_a_reply_alone_still_drafts():
    def running(count: int) -> tuple[Scheduler, list[Sequence]]:
        scheduler = Scheduler(KVCacheConfig(256, 4, enable_prefix_caching=False), max_num_seqs=16,
                              max_num_batched_tokens=2048, speculative=True)
        for rows in [1, 3, 2, 8, 12, 9, 4] * 5:
            scheduler.pace.observe(ScheduledBatch([None] * rows, [1] * rows, [], []), 0.005 + 0.001 * rows)
        seqs = [repetitive(f"r{i}") for i in range(count)]
        for seq in seqs:
            scheduler.add(seq)
        scheduler.commit_and_fork(LogitRows(torch.empty(0), scheduler.schedule()))  # the prompts: computed
        for seq in seqs:
            scheduler.take(seq, 1, text_stopped=False)
            scheduler.speculator.propose(seq, 8, 10_000)
            scheduler.speculator.settle(seq, 10, 3)  # kept 30%: acceptance 1.0 -> 0.79
            scheduler.speculator.settle(seq, 10, 3)  # -> 0.64
            scheduler.speculator.settle(seq, 10, 3)  # -> 0.54
            scheduler.speculator.states[seq].wait = 0
        return scheduler, seqs

    forks, _ = running(8)
    assert forks.schedule().drafts == [[]] * 8  # 54% < the 62% eight replies need
    alone, _ = running(1)
    assert alone.schedule().drafts[0] != []  # alone, a sixth pays


def test_the_prefill_cost_is_fitted_from_the_steps_that_prefill_and_predicts_a_prompts_time():
    pace = StepPace(decode_target_s=0.2, limit_s=1.0)
    assert pace.prefill_s(100) is None  # nothing measured
    pace.observe(ScheduledBatch([None], [200], [], []), 0.05 + 0.002 * 200)
    assert abs(pace.prefill_s(100) - 0.45 / 200 * 100) < 1e-9  # one size seen: the time per token
    for tokens in [64, 128, 300, 32, 500, 200] * 3:
        pace.observe(ScheduledBatch([None], [tokens], [], []), 0.05 + 0.002 * tokens)
    assert abs(pace.prefill_s(1000) - (0.05 + 2.0)) < 1e-6  # a step's fixed 50 ms and 2 ms a token
