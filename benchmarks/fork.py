"""Fork: one prompt, n = 8 replies of 128 tokens in one request, vs 8 separate requests (submitted together, and one
after another). Time, and KV blocks in use at the peak.

    python benchmarks/fork.py [--dtype D] [--speculative on|off] [--prompt-tokens 500] [--temperature 0.8]
                              [--top-p 1.0] [--clock wall|cpu] [--name NAME]

The peers harness's workload d is `--speculative off --prompt-tokens 305 --temperature 0.7 --top-p 0.95` (its
defaults: without --speculative off). On a machine shared with other work, `--clock cpu` runs the engine on one
thread and times that thread's CPU time, which every kernel runs on: it leaves out the time other processes held the
core, where wall-clock figures of two threads scatter.
"""

import argparse
import time

from common import report, result_name, set_threads, synthetic_chats
from localchat.engine import LLM, SamplingParams

N, NEW = 8, 128
CLOCKS = {"wall": time.perf_counter, "cpu": time.thread_time}


def run(llm: LLM, requests: list[tuple[list[int], SamplingParams]], one_after_another: bool, clock) -> dict:
    engine = llm.engine
    engine.reset_prefix_cache()
    peak = 0
    start = clock()
    pending = list(requests)
    while pending or engine.has_unfinished_requests():
        if pending and (not one_after_another or not engine.has_unfinished_requests()):
            for prompt, params in pending if not one_after_another else pending[:1]:
                engine.add_request(prompt, params)
            pending = [] if not one_after_another else pending[1:]
        engine.step()
        peak = max(peak, engine.scheduler.kv_usage.used)
    return {"seconds": clock() - start, "peak_blocks": peak}


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("--quantization", default="auto", choices=("auto", "none"),
                        help="auto: the GGUF's own weights, packed (the default); none: dense float32")
    parser.add_argument("--dtype", default=None)
    parser.add_argument("--speculative", default="on", choices=("on", "off"), help="drafts (the engine's default: on)")
    parser.add_argument("--prompt-tokens", type=int, default=500)
    parser.add_argument("--temperature", type=float, default=0.8)
    parser.add_argument("--top-p", type=float, default=1.0)
    parser.add_argument("--clock", choices=tuple(CLOCKS), default="wall",
                        help="cpu: one thread, its CPU time (a shared machine)")
    parser.add_argument("--name", default=None, help="the results file's name (default: fork[-dtype][-dense])")
    args = parser.parse_args()
    threads = 1 if args.clock == "cpu" else set_threads()
    llm = LLM(dtype=args.dtype, quantization=args.quantization, speculative=args.speculative == "on",
              cpu_threads=threads if args.clock == "cpu" else None)
    clock = CLOCKS[args.clock]
    (prompt,) = synthetic_chats(llm.tokenizer, 1, args.prompt_tokens, args.prompt_tokens, seed=3)
    prompt = (prompt * 2)[:args.prompt_tokens]
    common = dict(temperature=args.temperature, top_p=args.top_p, max_tokens=NEW, ignore_eos=True)
    run(llm, [(prompt[:32], SamplingParams(n=2, seed=0, **{**common, "max_tokens": 4}))], False, clock)  # warm up
    forked = run(llm, [(prompt, SamplingParams(n=N, seed=0, **common))], False, clock)
    separate = [(prompt, SamplingParams(seed=k, **common)) for k in range(N)]
    together = run(llm, separate, False, clock)
    in_turn = run(llm, separate, True, clock)
    bs = llm.engine.config.block_size
    prompt_blocks = -(-args.prompt_tokens // bs)
    bound = prompt_blocks + N * (-(-(args.prompt_tokens + NEW) // bs) - prompt_blocks) + N
    rows = [{"system": f"n={N} in one request", **forked},
            {"system": f"{N} separate requests, submitted together", **together},
            {"system": f"{N} separate requests, one after another", **in_turn}]
    summary = {"threads": threads, "clock": args.clock, "dtype": str(llm.engine.dtype),
               "speculative": args.speculative, "prompt tokens": args.prompt_tokens,
               "temperature": args.temperature, "top_p": args.top_p,
               "fork / together time": forked["seconds"] / together["seconds"],
               "fork / one-after-another time": forked["seconds"] / in_turn["seconds"],
               "peak blocks bound (prompt once + each reply's own + one copy each)": bound,
               "fork peak within bound": forked["peak_blocks"] <= bound}
    report(args.name or result_name("fork", args.dtype, args.quantization), rows, summary)


if __name__ == "__main__":
    main()
