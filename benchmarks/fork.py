"""Fork: one 500-token prompt, n = 8 replies of 128 tokens in one request, vs 8 separate requests
(submitted together, and one after another). Time, and KV blocks in use at the peak.

    python benchmarks/fork.py [--dtype D]
"""

import argparse
import time

from common import report, result_name, set_threads, synthetic_chats
from localchat.engine import LLM, SamplingParams

PROMPT, N, NEW = 500, 8, 128


def run(llm: LLM, requests: list[tuple[list[int], SamplingParams]], one_after_another: bool) -> dict:
    engine = llm.engine
    engine.reset_prefix_cache()
    peak = 0
    start = time.perf_counter()
    pending = list(requests)
    while pending or engine.has_unfinished_requests():
        if pending and (not one_after_another or not engine.has_unfinished_requests()):
            for prompt, params in pending if not one_after_another else pending[:1]:
                engine.add_request(prompt, params)
            pending = [] if not one_after_another else pending[1:]
        engine.step()
        peak = max(peak, engine.scheduler.kv_usage.used)
    return {"seconds": time.perf_counter() - start, "peak_blocks": peak}


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__)
    parser.add_argument("--quantization", default="auto", choices=("auto", "none"),
                        help="auto: the GGUF's own weights, packed (the default); none: dense float32")
    parser.add_argument("--dtype", default=None)
    args = parser.parse_args()
    threads = set_threads()
    llm = LLM(dtype=args.dtype, quantization=args.quantization)
    (prompt,) = synthetic_chats(llm.tokenizer, 1, PROMPT, PROMPT, seed=3)
    prompt = (prompt * 2)[:PROMPT]
    common = dict(temperature=0.8, max_tokens=NEW, ignore_eos=True)
    run(llm, [(prompt[:32], SamplingParams(n=2, seed=0, **{**common, "max_tokens": 4}))], False)  # warm up
    forked = run(llm, [(prompt, SamplingParams(n=N, seed=0, **common))], False)
    separate = [(prompt, SamplingParams(seed=k, **common)) for k in range(N)]
    together = run(llm, separate, False)
    in_turn = run(llm, separate, True)
    bs = llm.engine.config.block_size
    prompt_blocks = -(-PROMPT // bs)
    bound = prompt_blocks + N * (-(-(PROMPT + NEW) // bs) - prompt_blocks) + N
    rows = [{"system": f"n={N} in one request", **forked},
            {"system": f"{N} separate requests, submitted together", **together},
            {"system": f"{N} separate requests, one after another", **in_turn}]
    summary = {"threads": threads, "dtype": str(llm.engine.dtype),
               "fork / together time": forked["seconds"] / together["seconds"],
               "fork / one-after-another time": forked["seconds"] / in_turn["seconds"],
               "peak blocks bound (prompt once + each reply's own + one copy each)": bound,
               "fork peak within bound": forked["peak_blocks"] <= bound}
    report(result_name("fork", args.dtype, args.quantization), rows, summary)


if __name__ == "__main__":
    main()
