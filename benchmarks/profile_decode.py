"""Where single-stream decoding spends its time: torch.profiler over decode steps, top operators by self time.

    python benchmarks/profile_decode.py [--dtype float32|bfloat16] [--quantization q4_1] [--steps 64]
"""

import argparse

from torch.profiler import ProfilerActivity, profile

from common import report, result_name, set_threads, synthetic_chats
from localchat.engine import LLM, SamplingParams

TOP = 15


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__)
    parser.add_argument("--dtype", default="float32")
    parser.add_argument("--quantization", default="auto", choices=("auto", "none"))
    parser.add_argument("--steps", type=int, default=64)
    args = parser.parse_args()
    threads = set_threads()
    llm = LLM(dtype=args.dtype, quantization=args.quantization)
    engine = llm.engine
    [prompt] = synthetic_chats(engine.tokenizer, 1, 200, 200, seed=0)
    engine.add_request(prompt, SamplingParams(temperature=0, max_tokens=args.steps + 8, ignore_eos=True))
    for _ in range(4):  # the prefill and a few warm-up decode steps
        engine.step()
    with profile(activities=[ProfilerActivity.CPU]) as prof:
        for _ in range(args.steps):
            engine.step()
    events = sorted(prof.key_averages(), key=lambda e: e.self_cpu_time_total, reverse=True)
    total = sum(e.self_cpu_time_total for e in events)
    rows = [{"operator": e.key, "calls per step": round(e.count / args.steps, 1),
             "self ms per step": round(e.self_cpu_time_total / 1e3 / args.steps, 3),
             "share": round(e.self_cpu_time_total / total, 3)} for e in events[:TOP]]
    report(result_name("profile_decode", args.dtype, args.quantization), rows,
           {"threads": threads, "dtype": args.dtype, "quantization": args.quantization,
            "profiled ms per step (self time, all ops)": round(total / 1e3 / args.steps, 2)})


if __name__ == "__main__":
    main()
