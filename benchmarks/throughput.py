"""Throughput: 64 chat requests submitted at once (prompts of 30-400 tokens, replies of 32-256 tokens).

Engine vs transformers `generate_batch` (its continuous batching over a paged cache) vs transformers
`generate` one request at a time. Also reports the KV memory waste at steady state (benchmark 5).

    python benchmarks/throughput.py [--dtype D] [--requests 64] [--sequential-sample 6] [--skip-peer]
"""

import argparse
import random
import statistics
import time

import torch

from common import Timer, hf_model, report, result_name, set_threads, synthetic_chats
from localchat.engine import LLM, SamplingParams


def workload(tokenizer, count: int) -> tuple[list[list[int]], list[int]]:
    prompts = synthetic_chats(tokenizer, count, 30, 400, seed=0)
    rng = random.Random(1)
    return prompts, [rng.randint(32, 256) for _ in prompts]


def kv_waste(engine) -> tuple[float, float]:
    """Share of allocated KV slots that hold no token, and the share a contiguous reservation of
    max_model_len per running request would leave empty."""
    bs, filled = engine.kv.block_size, {}
    running = engine.scheduler.running
    for seq in running:
        for i, block in enumerate(seq.block_table):
            filled[block] = max(filled.get(block, 0), min(bs, max(0, len(seq) - i * bs)))
    slots = len(filled) * bs
    tokens = sum(filled.values())
    reserved = len(running) * engine.max_model_len
    return 1 - tokens / slots, 1 - sum(len(s) for s in running) / reserved


def run_engine(llm: LLM, prompts, lengths) -> dict:
    engine = llm.engine
    engine.reset_prefix_cache()
    for ids, n in zip(prompts, lengths):
        engine.add_request(ids, SamplingParams(temperature=0.8, seed=len(ids), max_tokens=n, ignore_eos=True))
    waste, generated, steps = [], 0, 0
    start = time.perf_counter()
    while engine.has_unfinished_requests():
        for delta in engine.step():
            generated += sum(len(o.token_ids) for o in delta.outputs)
        steps += 1
        if len(engine.scheduler.running) >= len(prompts) // 2 and steps % 8 == 0:
            waste.append(kv_waste(engine))
    seconds = time.perf_counter() - start
    waste = waste or [(float("nan"), float("nan"))]
    return {"seconds": seconds, "output_tokens": generated, "tok_s": generated / seconds,
            "kv_waste": statistics.mean(w for w, _ in waste), "contiguous_waste": statistics.mean(c for _, c in waste),
            "preemptions": engine.stats().num_preemptions}


@torch.inference_mode()
def run_generate_batch(model, prompts, lengths) -> dict:
    from transformers import GenerationConfig

    # generate_batch takes one max_new_tokens for all requests: the mean length keeps the total the same
    mean = round(statistics.mean(lengths))
    config = GenerationConfig(max_new_tokens=mean, do_sample=False, eos_token_id=-1, pad_token_id=2)
    model.generate_batch(prompts[:2], generation_config=config, max_new_tokens=4)  # warm up
    with Timer() as t:
        outputs = model.generate_batch(prompts, generation_config=config)
    tokens = sum(len(o.generated_tokens) for o in outputs.values())
    return {"seconds": t.seconds, "output_tokens": tokens, "tok_s": tokens / t.seconds}


@torch.inference_mode()
def run_sequential(model, prompts, lengths) -> dict:
    tokens, seconds = 0, 0.0
    for ids, n in zip(prompts, lengths):
        with Timer() as t:
            out = model.generate(torch.tensor([ids]), do_sample=False, max_new_tokens=n, min_new_tokens=n,
                                 pad_token_id=2)
        tokens += out.shape[1] - len(ids)
        seconds += t.seconds
    return {"seconds": seconds, "output_tokens": tokens, "tok_s": tokens / seconds}


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__)
    parser.add_argument("--quantization", default="auto", choices=("auto", "none"),
                        help="auto: the GGUF's own weights, packed (the default); none: dense float32")
    parser.add_argument("--dtype", default=None)
    parser.add_argument("--requests", type=int, default=64)
    parser.add_argument("--sequential-sample", type=int, default=6,
                        help="requests timed for sequential generate (all 64 would take ~7 minutes)")
    parser.add_argument("--skip-peer", action="store_true")
    args = parser.parse_args()
    threads = set_threads()
    llm = LLM(dtype=args.dtype, quantization=args.quantization)
    prompts, lengths = workload(llm.tokenizer, args.requests)
    run_engine(llm, prompts[:4], [8] * 4)  # warm up
    engine = run_engine(llm, prompts, lengths)
    rows = [{"system": f"localchat ({llm.engine.dtype}, {'packed' if llm.engine.packed else 'dense'})", **engine}]
    summary = {"threads": threads, "requests": len(prompts), "mean_prompt": statistics.mean(map(len, prompts)),
               "mean_output": statistics.mean(lengths)}
    if not args.skip_peer:
        model, _ = hf_model(torch.float32)
        batch = run_generate_batch(model, prompts, lengths)
        k = args.sequential_sample
        sequential = run_sequential(model, prompts[:k], lengths[:k])
        rows += [{"system": "transformers generate_batch (float32)", **batch},
                 {"system": f"transformers generate, one at a time (float32, first {k})", **sequential}]
        summary["vs generate_batch"] = engine["tok_s"] / batch["tok_s"]
        summary["vs sequential generate"] = engine["tok_s"] / sequential["tok_s"]
    report(result_name("throughput", args.dtype, args.quantization), rows, summary)


if __name__ == "__main__":
    main()
