"""Latency for one user: prefill speed on a 1,000-token prompt, time to first token, single-stream decode.

    python benchmarks/latency.py [--dtype float32|bfloat16] [--skip-peer]
"""

import argparse
import time

import torch

from common import Timer, hf_model, report, result_name, set_threads, synthetic_chats
from localchat.engine import LLM, SamplingParams

PROMPT_TOKENS = 1000
DECODE_TOKENS = 256


def engine_latency(llm: LLM, prompt: list[int]) -> dict:
    engine = llm.engine
    engine.reset_prefix_cache()  # a cold prompt: no prefix hit
    engine.add_request(prompt, SamplingParams(temperature=0, max_tokens=DECODE_TOKENS, ignore_eos=True))
    start = time.perf_counter()
    first = None
    while engine.has_unfinished_requests():
        engine.step()
        if first is None:
            first = time.perf_counter() - start
    total = time.perf_counter() - start
    return {"ttft_s": first, "prefill_tok_s": len(prompt) / first,
            "decode_tok_s": (DECODE_TOKENS - 1) / (total - first)}


@torch.inference_mode()
def hf_latency(model, prompt: list[int]) -> dict:
    ids = torch.tensor([prompt])
    with Timer() as first:
        model.generate(ids, do_sample=False, max_new_tokens=1, pad_token_id=2)
    with Timer() as whole:
        model.generate(ids, do_sample=False, max_new_tokens=DECODE_TOKENS, min_new_tokens=DECODE_TOKENS,
                       pad_token_id=2)
    return {"ttft_s": first.seconds, "prefill_tok_s": len(prompt) / first.seconds,
            "decode_tok_s": (DECODE_TOKENS - 1) / (whole.seconds - first.seconds)}


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__)
    parser.add_argument("--quantization", default="auto", choices=("auto", "none"),
                        help="auto: the GGUF's own weights, packed (the default); none: dense float32")
    parser.add_argument("--dtype", default=None, help="engine dtype (default: the engine's CPU default)")
    parser.add_argument("--skip-peer", action="store_true")
    args = parser.parse_args()
    threads = set_threads()
    llm = LLM(dtype=args.dtype, quantization=args.quantization)
    (prompt,) = synthetic_chats(llm.tokenizer, 1, PROMPT_TOKENS, PROMPT_TOKENS, seed=1)
    prompt = (prompt * 2)[:PROMPT_TOKENS]
    engine_latency(llm, prompt[:64])  # warm up
    system = f"localchat ({llm.engine.dtype}, {'packed' if llm.engine.packed else 'dense'})"
    rows = [{"system": system, **engine_latency(llm, prompt)}]
    if not args.skip_peer:
        model, _ = hf_model(torch.float32)
        hf_latency(model, prompt[:64])
        rows.append({"system": "transformers generate (float32)", **hf_latency(model, prompt)})
    summary = {"threads": threads, "prompt_tokens": len(prompt), "decode_tokens": DECODE_TOKENS}
    if len(rows) == 2:
        for key in ("prefill_tok_s", "decode_tok_s"):
            summary[f"{key} ratio"] = rows[0][key] / rows[1][key]
    report(result_name("latency", args.dtype, args.quantization), rows, summary)


if __name__ == "__main__":
    main()
