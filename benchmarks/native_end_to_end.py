"""The native kernels end to end, in process: a GGUF's prefill and single-stream decode with them and without them
(torch's weight-only kernels and the PyTorch attention, LOCALCHAT_NATIVE=0), speculation off.

    python benchmarks/native_end_to_end.py [--model FILE.gguf] [--rounds 3] [--trials 2] [--cpu-threads N]
                                           [--isa avx2] [--name NAME]

Each path runs in a process of its own (the kernels load once a process, and each has its own packed file), the two
in turns for `rounds` rounds of `trials` trials each, so that both meet the same load. A trial is a cold ~1,000-token
prompt (prefill tok/s: prompt tokens / time to the first token) and then 128 greedy tokens (decode tok/s). The
machine may be shared: every trial's figures are kept, and the table gives their range and median; the load average
and the engine's thread count (by default it runs on fewer threads while other processes hold cores:
engine/worker/cpu_threads.py; --cpu-threads fixes it) are recorded beside them.
"""

import argparse
import json
import os
import statistics
import subprocess
import sys
import time

from common import cpu_description, report, set_threads, synthetic_chats

PROMPT_TOKENS = 1000
DECODE_TOKENS = 128


def trial(llm, prompt: list[int]) -> dict:
    from localchat.engine import SamplingParams

    engine = llm.engine
    engine.kv.forget_cached()  # a cold prompt: no prefix hit
    engine.add_request(prompt, SamplingParams(temperature=0, max_tokens=DECODE_TOKENS, ignore_eos=True))
    start = time.perf_counter()
    first = None
    while engine.has_unfinished_requests():
        engine.step()
        if first is None:
            first = time.perf_counter() - start
    total = time.perf_counter() - start
    return {"prefill_tok_s": len(prompt) / first, "decode_tok_s": (DECODE_TOKENS - 1) / (total - first),
            "threads": engine.runner.cpu_threads.threads, "load": os.getloadavg()[0]}


def child(model: str | None, trials: int, cpu_threads: int | None) -> None:
    """One path's trials, printed as one line of JSON."""
    from localchat.engine import LLM
    from localchat.engine.worker import native_kernels

    set_threads()
    llm = LLM(model=model, speculative=False, cpu_threads=cpu_threads)
    (prompt,) = synthetic_chats(llm.tokenizer, 1, PROMPT_TOKENS, PROMPT_TOKENS, seed=1)
    prompt = (prompt * 2)[:PROMPT_TOKENS]
    trial(llm, prompt[:64])  # warm up
    kernels = native_kernels.load()
    print(json.dumps({"kernels": kernels.isa if kernels else "torch", "trials": [trial(llm, prompt)
                                                                                for _ in range(trials)]}))


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("--model", default=None, help="a GGUF file (default: the embedded model)")
    parser.add_argument("--rounds", type=int, default=3)
    parser.add_argument("--trials", type=int, default=2, help="trials a round")
    parser.add_argument("--cpu-threads", type=int, default=None, help="fix the engine's thread count")
    parser.add_argument("--isa", choices=("avx512", "avx2"), help="the native build (default: the CPU's best)")
    parser.add_argument("--name", default="native_end_to_end")
    parser.add_argument("--child", action="store_true", help=argparse.SUPPRESS)
    args = parser.parse_args()
    if args.child:
        child(args.model, args.trials, args.cpu_threads)
        return
    results = {"1": [], "0": []}
    for _ in range(args.rounds):
        for native in results:
            env = {**os.environ, "LOCALCHAT_NATIVE": native}
            if args.isa:
                env["LOCALCHAT_NATIVE_ISA"] = args.isa
            command = [sys.executable, __file__, "--child", "--trials", str(args.trials)]
            command += ["--model", args.model] if args.model else []
            command += ["--cpu-threads", str(args.cpu_threads)] if args.cpu_threads else []
            output = subprocess.run(command, env=env, check=True, capture_output=True, text=True).stdout
            results[native].append(json.loads(output.strip().splitlines()[-1]))
            print(results[native][-1], flush=True)
    rows = []
    for runs in results.values():
        trials = [trial for run in runs for trial in run["trials"]]
        row = {"model": os.path.basename(args.model) if args.model else "embedded", "kernels": runs[0]["kernels"]}
        for key in ("prefill_tok_s", "decode_tok_s"):
            values = [t[key] for t in trials]
            row[key] = f"{min(values):.1f}-{max(values):.1f} (median {statistics.median(values):.1f})"
        loads = [t["load"] for t in trials]
        row["load average"] = f"{min(loads):.1f}-{max(loads):.1f}"
        row["threads"] = "/".join(str(n) for n in sorted({t["threads"] for t in trials}))
        row["trials"] = trials
        rows.append(row)
    report(args.name, [{k: v for k, v in row.items() if k != "trials"} for row in rows],
           {"cpu": cpu_description(), "trials": {row["kernels"]: row["trials"] for row in rows},
            "prompt_tokens": PROMPT_TOKENS,
            "decode_tokens": DECODE_TOKENS, "speculative": False})


if __name__ == "__main__":
    main()
