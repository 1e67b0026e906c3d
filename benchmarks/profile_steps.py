"""Where an engine step spends its time, on any GGUF file: the prefill of a 1,000-token prompt (one step), a decode
step of one stream at that context and one of 32 streams of ~150-token chats (the peers benchmark's workloads),
each timed plainly and then under torch.profiler (top operators by self time).

    python benchmarks/profile_steps.py [--model FILE.gguf] [--attention native|torch] [--steps 32]

Beside each step: the machine's measured peaks (a 2048^3 bfloat16 and int8 matrix product through oneDNN) and
read bandwidth, and what the step would take at each: its linear layers' multiply-adds at the bf16 and int8 peaks,
the bytes it must read (weights as held, KV cache) at the bandwidth.
"""

import argparse
import contextlib
import time

import torch
from torch.profiler import ProfilerActivity, profile

from common import report, set_threads, synthetic_chats
from localchat.engine import LLM, SamplingParams
from localchat.engine.worker import native_kernels

TOP = 12
PROMPT = 1000
DECODES = {"1 stream, 1,000-token context": (1, PROMPT), "32 streams, ~150-token chats": (32, 150)}


def read_bandwidth_gbs() -> float:
    """Sum of a 512 MB tensor on the engine's threads: what the memory gives a streaming read."""
    x = torch.ones(128 * 2**20)
    x.sum()
    start = time.perf_counter()
    for _ in range(5):
        x.sum()
    return 5 * x.numel() * 4 / (time.perf_counter() - start) / 1e9


def gemm_peak_tflops(dtype: torch.dtype) -> float:
    """A 2048^3 product through torch (oneDNN): bfloat16 by bfloat16, or int8 by int8 into int32."""
    n = 2048
    if dtype == torch.int8:
        a, b = (torch.randint(-127, 128, (n, n), dtype=torch.int8) for _ in range(2))
        product = lambda: torch._int_mm(a, b)  # noqa: E731
    else:
        a, b = (torch.randn(n, n).to(dtype) for _ in range(2))
        product = lambda: a @ b  # noqa: E731
    start = time.perf_counter()
    product()
    repeats = 5 if time.perf_counter() - start < 1 else 1  # a CPU without the dtype's instructions: seconds a call
    start = time.perf_counter()
    for _ in range(repeats):
        product()
    return repeats * 2 * n**3 / (time.perf_counter() - start) / 1e12


def held_bytes(llm: LLM) -> int:
    """Bytes of everything the model holds (packed weights are plain attributes: counted through their parts)."""
    model = llm.engine.runner.model
    total = sum(p.numel() * p.element_size() for p in model.parameters())
    for module in model.modules():
        for part in getattr(module, "parts", []):
            total += sum(t.numel() * t.element_size() for t in vars(part).values() if isinstance(t, torch.Tensor))
    return total


def linear_weights(config) -> tuple[int, int]:
    """Weights of the decoder's linear layers (all layers), and of the logits head."""
    head_dim = getattr(config, "head_dim", None) or config.hidden_size // config.num_attention_heads
    q, kv = config.num_attention_heads * head_dim, config.num_key_value_heads * head_dim
    layer = config.hidden_size * (2 * q + 2 * kv) + 3 * config.hidden_size * config.intermediate_size
    return config.num_hidden_layers * layer, config.hidden_size * config.vocab_size


@contextlib.contextmanager
def native_kernels_labelled():
    """The native kernels are ctypes calls, unseen by torch.profiler: while profiling, each runs in a
    record_function of its name."""
    kernels = {name: getattr(native_kernels.Kernels, name) for name in ("quantize", "matmul", "attend")}
    for name, kernel in kernels.items():
        def labelled(*args, kernel=kernel, label=f"native::{name}"):
            with torch.profiler.record_function(label):
                return kernel(*args)
        setattr(native_kernels.Kernels, name, labelled)
    try:
        yield
    finally:
        for name, kernel in kernels.items():
            setattr(native_kernels.Kernels, name, kernel)


def profiled(steps: int, run) -> tuple[float, list, int]:
    """run(steps) timed plainly and then under the profiler: ms per step, operator events, profiled steps."""
    start = time.perf_counter()
    run(steps)
    wall_ms = (time.perf_counter() - start) / steps * 1e3
    with native_kernels_labelled(), profile(activities=[ProfilerActivity.CPU]) as prof:
        run(steps)
    return wall_ms, prof.key_averages(), steps


def prefill(llm: LLM, steps: int) -> tuple[float, list, int]:
    engine = llm.engine
    prompts = iter(synthetic_chats(engine.tokenizer, 2 * steps + 1, PROMPT, PROMPT, seed=7))

    def run(count: int) -> None:
        for _ in range(count):
            engine.reset_prefix_cache()
            engine.add_request(next(prompts), SamplingParams(temperature=0, max_tokens=1))
            engine.step()
            assert not engine.requests, "the prompt took more than one step"

    run(1)  # warm
    return profiled(steps, run)


def decode(llm: LLM, streams: int, context: int, steps: int) -> tuple[float, list, int]:
    engine = llm.engine
    engine.reset_prefix_cache()
    for prompt in synthetic_chats(engine.tokenizer, streams, context, context, seed=streams):
        engine.add_request(prompt, SamplingParams(temperature=0, max_tokens=2 * steps + 16, ignore_eos=True))
    while any(seq.num_output_tokens == 0 for seq in engine.scheduler.running + list(engine.scheduler.waiting)):
        engine.step()  # the prefills
    for _ in range(4):
        engine.step()
    result = profiled(steps, lambda count: [engine.step() for _ in range(count)])
    for request_id in list(engine.requests):
        engine.abort(request_id)
    return result


def summarize(wall_ms: float, events: list, steps: int, rows: int, sampled: int, context: int, llm: LLM,
              machine: dict) -> tuple[dict, list[dict]]:
    events = sorted(events, key=lambda e: e.self_cpu_time_total, reverse=True)
    total = sum(e.self_cpu_time_total for e in events)
    top = [{"operator": e.key, "calls per step": round(e.count / steps, 1),
            "self ms per step": round(e.self_cpu_time_total / 1e3 / steps, 3),
            "share": round(e.self_cpu_time_total / total, 3)} for e in events[:TOP]]
    decoder, head = linear_weights(llm.engine.runner.model.config)
    flops = 2 * (rows * decoder + sampled * head)
    kv = llm.engine.runner.kv_cache
    kv_bytes = rows * context * kv[:, :, 0].numel() * kv.element_size() // kv.shape[3]
    step_bytes = held_bytes(llm) + kv_bytes
    summary = {"step ms (no profiler)": round(wall_ms, 2), "tokens per step": rows,
               "tok/s": round(rows * 1e3 / wall_ms, 1),
               "operators' self ms per step (profiled)": round(total / 1e3 / steps, 2),
               "operator calls per step": round(sum(e.count for e in events) / steps),
               "linears' multiply-adds, GFLOP": round(flops / 1e9, 2),
               "ms at the bf16 peak": round(flops / machine["bf16 TFLOP/s"] / 1e9, 2),
               "ms at the int8 peak": round(flops / machine["int8 TFLOP/s"] / 1e9, 2),
               "bytes read (weights held + KV), MB": round(step_bytes / 1e6, 1),
               "ms at the read bandwidth": round(step_bytes / machine["read GB/s"] / 1e6, 2)}
    return summary, top


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("--model", default=None, help="a GGUF file (default: the embedded model)")
    parser.add_argument("--attention", default=None, choices=("native", "torch"))
    parser.add_argument("--steps", type=int, default=32)
    args = parser.parse_args()
    threads = set_threads()
    machine = {"bf16 TFLOP/s": round(gemm_peak_tflops(torch.bfloat16), 3),
               "int8 TFLOP/s": round(gemm_peak_tflops(torch.int8), 3), "read GB/s": round(read_bandwidth_gbs(), 1)}
    llm = LLM(args.model, cpu_threads=threads, attention_backend=args.attention)
    model = llm.engine.config.model or "embedded"
    summary = {"model": model, "threads": threads, "attention": llm.engine.runner.backend.__name__,
               "peaks": machine}
    rows = []
    workloads = {f"prefill, {PROMPT:,}-token prompt": (prefill(llm, max(2, args.steps // 8)), PROMPT, 1, 0)}
    for name, (streams, context) in DECODES.items():
        workloads[name] = (decode(llm, streams, context, args.steps), streams, streams, context)
    for name, (result, tokens, sampled, context) in workloads.items():
        summary[name], top = summarize(*result, tokens, sampled, context, llm, machine)
        rows += [{"workload": name, **row} for row in top]
    stem = "profile_steps" + ("" if args.model is None else "-" + args.model.rsplit("/", 1)[-1].removesuffix(".gguf"))
    report(stem + ("" if args.attention is None else f"-{args.attention}"), rows, summary)


if __name__ == "__main__":
    main()
