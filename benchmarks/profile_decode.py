"""Where a decode step spends its time: one stream at a 1,000-token context and 32 streams of ~150-token chats (the
peers benchmark's workloads a and b), each timed plainly and then under torch.profiler (top operators by self time).

    python benchmarks/profile_decode.py [--dtype float32|bfloat16] [--quantization auto|none] [--steps 64]

Also prints the machine's memory read bandwidth and the bytes one single-stream step must read (weights as held,
KV cache at that context), the bound that step could reach.
"""

import argparse
import time

import torch
from torch.profiler import ProfilerActivity, profile

from common import report, result_name, set_threads, synthetic_chats
from localchat.engine import LLM, SamplingParams

TOP = 12
WORKLOADS = {"1 stream, 1,000-token context": (1, 1000), "32 streams, ~150-token chats": (32, 150)}


def read_bandwidth_gbs() -> float:
    """Sum of a 512 MB tensor on the engine's threads: what the memory gives a streaming read."""
    x = torch.ones(128 * 2**20)
    x.sum()
    start = time.perf_counter()
    for _ in range(5):
        x.sum()
    return 5 * x.numel() * 4 / (time.perf_counter() - start) / 1e9


def held_bytes(llm: LLM) -> int:
    """Bytes of everything the model holds (packed weights are plain attributes: counted through their parts)."""
    model = llm.engine.runner.model
    total = sum(p.numel() * p.element_size() for p in model.parameters())
    for module in model.modules():
        for part in getattr(module, "parts", []):
            total += sum(t.numel() * t.element_size() for t in vars(part).values() if isinstance(t, torch.Tensor))
    return total


def profile_workload(llm: LLM, streams: int, context: int, steps: int) -> tuple[dict, list[dict]]:
    engine = llm.engine
    engine.kv.forget_cached()
    prompts = synthetic_chats(engine.tokenizer, streams, context, context, seed=streams)
    for prompt in prompts:
        engine.add_request(prompt, SamplingParams(temperature=0, max_tokens=2 * steps + 16, ignore_eos=True))
    while any(seq.num_output_tokens == 0 for seq in engine.scheduler.running + list(engine.scheduler.waiting)):
        engine.step()  # the prefills
    for _ in range(4):
        engine.step()
    start = time.perf_counter()
    for _ in range(steps):
        engine.step()
    wall_ms = (time.perf_counter() - start) / steps * 1e3
    with profile(activities=[ProfilerActivity.CPU]) as prof:
        for _ in range(steps):
            engine.step()
    for request_id in list(engine.requests):
        engine.abort(request_id)
    events = sorted(prof.key_averages(), key=lambda e: e.self_cpu_time_total, reverse=True)
    total = sum(e.self_cpu_time_total for e in events)
    rows = [{"operator": e.key, "calls per step": round(e.count / steps, 1),
             "self ms per step": round(e.self_cpu_time_total / 1e3 / steps, 3),
             "share": round(e.self_cpu_time_total / total, 3)} for e in events[:TOP]]
    summary = {"step ms (no profiler)": round(wall_ms, 2), "output tok/s": round(streams * 1e3 / wall_ms, 1),
               "operators' self ms per step (profiled)": round(total / 1e3 / steps, 2),
               "operator calls per step": round(sum(e.count for e in events) / steps)}
    return summary, rows


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("--dtype", default="float32")
    parser.add_argument("--quantization", default="auto", choices=("auto", "none"))
    parser.add_argument("--steps", type=int, default=64)
    args = parser.parse_args()
    threads = set_threads()
    llm = LLM(dtype=args.dtype, quantization=args.quantization, cpu_threads=threads)
    rows, summary = [], {"threads": threads, "dtype": args.dtype, "quantization": args.quantization}
    for name, (streams, context) in WORKLOADS.items():
        workload, top = profile_workload(llm, streams, context, args.steps)
        summary[name] = workload
        rows += [{"workload": name, **row} for row in top]
    config = llm.engine.runner.model.config
    kv = llm.engine.runner.kv_cache
    kv_bytes_per_token = kv[:, :, 0].numel() * kv.element_size() // kv.shape[3]
    step_bytes = held_bytes(llm) + 1000 * kv_bytes_per_token
    bandwidth = read_bandwidth_gbs()
    summary["bound"] = {
        "read bandwidth GB/s": round(bandwidth, 1),
        "bytes read by a 1-stream step at 1,000 tokens (weights held + KV), MB": round(step_bytes / 1e6, 1),
        "bandwidth bound, ms per step": round(step_bytes / bandwidth / 1e6, 2),
        "layers": config.num_hidden_layers,
    }
    report(result_name("profile_decode", args.dtype, args.quantization), rows, summary)


if __name__ == "__main__":
    main()
