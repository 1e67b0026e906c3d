"""The engine on the embedded model: transformers' greedy outputs, forks, preemption, prefix reuse, bad input."""

import pytest
import torch

from localchat.engine import LLM, SamplingParams
from localchat.engine.loading.loader import resolve_model

pytestmark = pytest.mark.slow  # the embedded model and transformers' reference: left out of `./dev test --fast`

QUESTIONS = [
    "What is the capital of France? Tell me about its history.",
    "Write a short story about a robot who learns to paint.",
    "Explain how a paged KV cache works in an LLM inference engine, step by step, in detail.",
    "List five fruits.",
    "hi",
    "Translate to French: The weather is nice today and I would like to go for a walk in the park.",
    "Write a Python function that checks whether a number is prime, and explain it.",
    "Why is the sky blue? Answer like a pirate.",
]
NEW_TOKENS = 64
EOS = 2  # <|im_end|>


@pytest.fixture(scope="module")
def llm():
    return LLM(dtype="float32", quantization="none")  # dense float32: exact against transformers


@pytest.fixture(scope="module")
def prompts(llm):
    return [llm.engine.apply_chat_template([{"role": "user", "content": q}]) for q in QUESTIONS]


@pytest.fixture(scope="module")
def reference(hf_smollm2, prompts, llm):
    """transformers' greedy continuation of each prompt, up to and including its end-of-turn token.

    Fast path of the same thing: the engine's greedy replies are a guess that one forward pass of transformers per
    prompt checks at every position (transformers' argmax after each prefix); from the first position where
    transformers picks another token, transformers' own generate() continues. A wrong engine meets its reference
    computed by transformers alone, token by token."""
    model, _ = hf_smollm2
    llm.engine.reset_prefix_cache()
    guesses = [o.outputs[0].token_ids for o in llm.generate(prompts, SamplingParams(temperature=0,
                                                                                     max_tokens=NEW_TOKENS))]
    results = []
    with torch.no_grad():
        for ids, guess in zip(prompts, guesses):
            picks = model(torch.tensor([ids + guess])).logits[0, len(ids) - 1 :].argmax(-1).tolist()
            agreed = next((i for i, (a, b) in enumerate(zip(guess, picks)) if a != b), len(guess))
            tokens = guess[:agreed]
            if agreed < len(guess) or (len(tokens) < NEW_TOKENS and EOS not in tokens):
                start = ids + tokens
                out = model.generate(torch.tensor([start]), attention_mask=torch.ones(1, len(start), dtype=torch.long),
                                     do_sample=False, max_new_tokens=NEW_TOKENS - len(tokens), pad_token_id=EOS)
                tokens += out[0, len(start):].tolist()
            results.append(tokens[: tokens.index(EOS) + 1] if EOS in tokens else tokens)
    return results


GREEDY = SamplingParams(temperature=0, max_tokens=NEW_TOKENS)


def test_reference_is_long_enough(reference):
    assert sum(len(r) == NEW_TOKENS for r in reference) >= 4  # most prompts really produce 64 tokens


def test_greedy_one_at_a_time_matches_transformers(llm, prompts, reference):
    llm.engine.reset_prefix_cache()
    for ids, expected in zip(prompts, reference):
        (out,) = llm.generate(ids, GREEDY)
        assert out.outputs[0].token_ids == expected


def test_greedy_mixed_batch_matches_transformers(llm, prompts, reference):
    llm.engine.reset_prefix_cache()
    outs = llm.generate(prompts, GREEDY)
    assert [o.outputs[0].token_ids for o in outs] == reference
    # the prompts start alike (the template's default system prompt): the first computes that start, the others wait
    # for its full blocks and find them cached (prompts that share a prefix and arrive together compute it once)
    shared = next(i for i, tokens in enumerate(zip(*prompts)) if len(set(tokens)) > 1) // 16 * 16
    assert shared > 0 and [o.num_cached_tokens for o in outs] == [0] + [shared] * (len(prompts) - 1)


def test_greedy_with_warm_prefix_cache_matches_transformers(llm, prompts, reference):
    llm.generate(prompts, SamplingParams(temperature=0, max_tokens=1))  # warm: every prompt's blocks are cached
    outs = llm.generate(prompts, GREEDY)
    assert [o.outputs[0].token_ids for o in outs] == reference
    for o, ids in zip(outs, prompts):
        # every token but the last: the full blocks, then the partial block kept as a tail by the warm-up
        assert o.num_cached_tokens == len(ids) - 1
    assert llm.stats().kv.used == 0


def test_text_is_the_decoded_tokens(llm, prompts):
    (out,) = llm.generate(prompts[0], GREEDY)
    assert out.outputs[0].text == llm.tokenizer.decode(out.outputs[0].token_ids, skip_special_tokens=True)


def test_n_replies_equal_independent_requests_with_derived_seeds(llm, prompts):
    params = dict(temperature=0.9, top_p=0.95, max_tokens=24, ignore_eos=True)
    (forked,) = llm.generate(prompts[2], SamplingParams(n=4, seed=11, **params))
    assert len({tuple(o.token_ids) for o in forked.outputs}) > 1  # the replies differ
    for k, reply in enumerate(forked.outputs):
        (alone,) = llm.generate(prompts[2], SamplingParams(n=1, seed=11 + k, **params))
        assert reply.index == k
        assert reply.token_ids == alone.outputs[0].token_ids


def test_n_replies_allocate_the_prompt_blocks_once(llm, prompts):
    engine = llm.engine
    engine.reset_prefix_cache()
    ids = prompts[2]  # 52 tokens: three full blocks and a partial one
    assert len(ids) % 16 != 0
    engine.add_request(ids, SamplingParams(n=4, seed=3, temperature=1.0, max_tokens=8, ignore_eos=True))
    while len(engine.scheduler.running) < 4:
        engine.step()  # prefill once (in chunks the pace allows), fork, sample four first tokens
    prompt_blocks = -(-len(ids) // 16)
    assert len(engine.scheduler.running) == 4
    assert engine.scheduler.kv.pool.num_used == prompt_blocks
    engine.step()  # each reply writes its token: the shared partial block is copied for all but the last writer
    assert engine.scheduler.kv.pool.num_used == prompt_blocks + 3
    while engine.has_unfinished_requests():
        engine.step()
    assert engine.scheduler.kv.pool.num_used == 0


def test_preemption_lets_every_request_finish_with_the_same_outputs(prompts):
    params = SamplingParams(temperature=0, max_tokens=48, ignore_eos=True)
    roomy = LLM(dtype="float32").generate(prompts, params)
    tight = LLM(dtype="float32", num_kv_blocks=24)  # 384 token slots for 8 requests of up to ~110 tokens
    outs = tight.generate(prompts, params)
    assert tight.stats().num_preemptions > 0
    assert [o.outputs[0].token_ids for o in outs] == [o.outputs[0].token_ids for o in roomy]
    assert tight.stats().kv.used == 0


def test_second_turn_reuses_every_computed_token_of_the_first(llm):
    engine = llm.engine
    turn1 = engine.apply_chat_template([{"role": "user", "content": QUESTIONS[1]}])
    (first,) = llm.generate(turn1, SamplingParams(temperature=0, max_tokens=40))
    history = turn1 + first.outputs[0].token_ids
    followup = engine.tokenize("\n<|im_start|>user\nNow make it shorter.<|im_end|>\n<|im_start|>assistant\n")
    (second,) = llm.generate(history + followup, SamplingParams(temperature=0, max_tokens=8))
    # the reply's last token was sampled but never fed back, so its KV does not exist yet; every token before it
    # is reused: the full blocks by their hashes, the rest from the first turn's partial block, kept as a tail
    computed = len(history) - 1
    assert computed % 16 and second.num_cached_tokens == computed
    stats = llm.stats()
    assert stats.cached_prompt_tokens > 0 and stats.prompt_tokens >= stats.cached_prompt_tokens


def test_stop_strings_and_stop_token_ids(llm, prompts):
    (free,) = llm.generate(prompts[3], SamplingParams(temperature=0, max_tokens=40))
    text = free.outputs[0].text
    stop = text[10:14]
    (stopped,) = llm.generate(prompts[3], SamplingParams(temperature=0, max_tokens=40, stop=[stop]))
    assert stopped.outputs[0].text == text[: text.index(stop)]
    assert stopped.outputs[0].finish_reason == "stop"
    third = free.outputs[0].token_ids[2]
    (by_id,) = llm.generate(prompts[3], SamplingParams(temperature=0, max_tokens=40, stop_token_ids=[third]))
    assert by_id.outputs[0].token_ids == free.outputs[0].token_ids[: free.outputs[0].token_ids.index(third) + 1]
    (short,) = llm.generate(prompts[3], SamplingParams(temperature=0, max_tokens=5))
    assert short.outputs[0].finish_reason == "length" and len(short.outputs[0].token_ids) == 5


def test_logprobs(llm, prompts):
    (out,) = llm.generate(prompts[0], SamplingParams(temperature=0, max_tokens=6, logprobs=3))
    reply = out.outputs[0]
    assert len(reply.logprobs) == 6
    for token, lp in zip(reply.token_ids, reply.logprobs):
        assert lp.token_id == token and len(lp.top) == 3
        assert lp.top[0][0] == token and lp.logprob == pytest.approx(lp.top[0][1])  # greedy: the best token


@pytest.mark.parametrize("bad, message", [
    (dict(max_tokens=0), "max_tokens"),
    (dict(top_p=0.0), "top_p"),
    (dict(top_p=1.5), "top_p"),
    (dict(n=0), "n must"),
    (dict(temperature=-1), "temperature"),
    (dict(temperature=1e-320), "temperature must be 0 \\(greedy\\) or at least 0.01"),
    (dict(temperature=float("nan")), "temperature must be a number"),
    (dict(seed=2**64), "seed must be in"),
    (dict(seed=-(2**63) - 1), "seed must be in"),
    (dict(stop=["x"] * 17), "at most 16 stop strings"),
])
def test_bad_sampling_params_are_clear_errors(bad, message):
    with pytest.raises(ValueError, match=message):
        SamplingParams(**bad)


def test_reply_seeds_wrap_around_the_generator_range():
    params = SamplingParams(n=3, seed=2**64 - 2)
    assert [params.seed_for(k) for k in range(3)] == [2**64 - 2, 2**64 - 1, 0]
    assert SamplingParams(seed=-1).seed_for(0) == 2**64 - 1


def test_a_top_k_beyond_the_vocabulary_is_no_top_k_and_fails_no_step(llm, prompts):
    """top_k has no upper limit (any count of the best tokens): one past 64 bits overflowed the sampler's tensor and
    failed the step of every request in it (Schemathesis found it, issue 53). At least the vocabulary, it is none."""
    seeded = dict(temperature=1.0, seed=5, max_tokens=8, ignore_eos=True)
    huge, beside = llm.generate(prompts[:2], [SamplingParams(top_k=2**70, **seeded), SamplingParams(**seeded)])
    (unlimited,) = llm.generate(prompts[:1], SamplingParams(top_k=0, **seeded))
    assert huge.error is None and beside.error is None
    assert huge.outputs[0].token_ids == unlimited.outputs[0].token_ids and len(beside.outputs[0].token_ids) == 8


def test_prompt_longer_than_max_model_len_is_rejected_and_nothing_runs():
    llm = LLM(dtype="float32", quantization="none", max_model_len=64)
    with pytest.raises(ValueError, match="max_model_len"):
        llm.generate(["short", list(range(100, 164))])
    assert not llm.engine.has_unfinished_requests()
    with pytest.raises(ValueError, match="empty"):
        llm.generate([[]])


def test_unknown_model_path_is_a_clear_error(tmp_path):
    with pytest.raises(ValueError, match="not found"):
        LLM(str(tmp_path / "no-such-model"))


def test_abort_frees_the_blocks(llm, prompts):
    engine = llm.engine
    request_id = engine.add_request(prompts[2], SamplingParams(n=3, temperature=1.0, max_tokens=100))
    for _ in range(4):
        engine.step()
    assert engine.scheduler.kv.pool.num_used > 0
    delta = engine.abort(request_id)
    assert delta.finished and {o.finish_reason for o in delta.outputs} == {"abort"}
    assert engine.scheduler.kv.pool.num_used == 0 and not engine.has_unfinished_requests()


def test_a_reset_after_a_failed_step_reads_no_old_value_and_leaves_unused_memory_alone(llm, prompts, reference):
    """A failed step's reset: every block is new again and cleared at its first use (garbage in blocks a reply
    used before changes no token), while memory no block uses is left as it is: the cache (gigabytes) is not
    zeroed at once, which made every page of it resident."""
    engine, garbage = llm.engine, 256
    cache = engine.runner.kv_cache
    assert cache.shape[2] > garbage + 1
    cache[:, :, : garbage + 1] = float("nan")  # what a step cut short may leave, and more
    engine.reset()
    (out,) = llm.generate(prompts[0], GREEDY)
    assert out.outputs[0].token_ids == reference[0]
    used = set(range(cache.shape[2])) - engine.scheduler.kv.pool.never_used
    assert used and max(used) < garbage  # the reply ran on blocks that held garbage
    assert cache[:, :, garbage].isnan().all()  # a block not used since was not written


def test_a_prompt_longer_than_the_token_budget_prefills_in_chunks(prompts):
    small = LLM(dtype="float32", max_num_batched_tokens=16)  # steps that compute a chunk and sample nothing
    (out,) = small.generate(prompts[2], GREEDY)
    (whole,) = LLM(dtype="float32").generate(prompts[2], GREEDY)  # the same (packed) weights, in one step
    assert out.outputs[0].token_ids == whole.outputs[0].token_ids


def test_loading_reports_its_progress():
    seen = []
    converts = resolve_model(None).needs_conversion(packed=False)
    LLM(dtype="float32", num_kv_blocks=8, quantization="none",
        on_progress=lambda stage, fraction: seen.append((stage, fraction)))
    stages = list(dict.fromkeys(stage for stage, _ in seen))
    conversion = [stage for stage in stages if stage.startswith("converting")]
    assert len(conversion) == converts  # said only when the GGUF file is converted
    assert [stage for stage in stages if stage not in conversion] == [
        "reading the model files", "loading weights", "allocating the KV cache"]
    assert not resolve_model(None).needs_conversion(packed=False)
    fractions = [f for stage, f in seen if stage == "loading weights"]
    assert fractions == sorted(fractions) and fractions[0] == 0 and fractions[-1] > 0.99
