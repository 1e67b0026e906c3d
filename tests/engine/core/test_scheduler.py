"""The scheduler's pace: beside running decodes, a prompt's prefill goes in chunks that keep a step near its target
time; alone, it takes the whole token budget."""

from localchat.engine.core.kv_cache_manager import KVCacheManager
from localchat.engine.core.scheduler import ScheduledBatch, Scheduler, StepPace
from localchat.engine.core.sequence import Sequence
from localchat.engine.sampling_params import SamplingParams


def sequence(request_id: str, num_tokens: int) -> Sequence:
    return Sequence(request_id, 0, list(range(num_tokens)), num_tokens, SamplingParams(max_tokens=8))


def decoding(scheduler: Scheduler) -> Sequence:
    """A sequence whose prompt is computed: it decodes one token a step from now on."""
    seq = sequence("decoding", 10)
    scheduler.add(seq)
    scheduler.schedule()
    scheduler.kv.commit(seq, 10)
    seq.token_ids.append(7)
    return seq


def test_a_prefill_beside_decodes_is_cut_to_the_pace_and_alone_is_not():
    pace = StepPace(target_s=0.2)
    kv = KVCacheManager(256, 16, enable_prefix_caching=False)
    scheduler = Scheduler(kv, max_num_seqs=8, max_num_batched_tokens=2048, pace=pace)
    decode = decoding(scheduler)
    pace.seconds_per_token = 0.005  # 40 tokens in 0.2 s
    scheduler.add(sequence("long prompt", 1000))
    batch = scheduler.schedule()
    assert batch.num_new_tokens == [1, 40]
    scheduler.finish(decode, "stop")
    for seq, n in zip(batch.seqs, batch.num_new_tokens):
        if not seq.is_finished:
            scheduler.kv.commit(seq, n)
    assert scheduler.schedule().num_new_tokens == [960]  # no one waits for its next token: the whole budget


def test_the_pace_settles_where_a_step_takes_its_target():
    """A step costs a fixed 40 ms plus 5 ms a token: the budget goes to the 32 tokens of a 0.2 s step, from above
    and from below, and never under the smallest chunk however slow the steps."""
    def step_seconds(tokens: int) -> float:
        return 0.040 + 0.005 * tokens

    for start in (2000, StepPace.MIN_CHUNK):
        pace = StepPace(target_s=0.2)
        tokens = start
        for _ in range(60):
            pace.observe(ScheduledBatch([None, None], [1, tokens - 1], [], []), step_seconds(tokens))
            tokens = pace.prefill_budget()
        assert abs(tokens - 32) <= 1
    slow = StepPace(target_s=0.2)
    slow.observe(ScheduledBatch([None, None], [1, 9], [], []), 5.0)
    assert slow.prefill_budget() == StepPace.MIN_CHUNK
    assert StepPace(target_s=None).prefill_budget() is None and StepPace(0.2).prefill_budget() is None


def test_steps_of_decodes_alone_teach_the_pace_nothing():
    pace = StepPace(target_s=0.2)
    pace.observe(ScheduledBatch([None] * 4, [1, 1, 1, 1], [], []), 0.5)
    assert pace.seconds_per_token is None
