"""Multi-turn: 8 conversations interleaved round-robin for 8 turns each (user turns of 20-80 tokens,
replies of up to 128). Per turn: time to first token and prompt tokens actually computed.

Engine vs the engine with prefix caching off vs transformers re-running the whole history.

    python benchmarks/multiturn.py [--dtype D] [--skip-peer]
"""

import argparse
import random
import statistics
import time

import torch

from common import Timer, hf_model, report, result_name, set_threads, user_text
from localchat.engine import LLM, SamplingParams

CONVERSATIONS, TURNS = 8, 8


def user_turn(tokenizer, text: str, first: bool) -> list[int]:
    """One user turn in ChatML and the assistant header, as the token ids the conversation appends."""
    system = "<|im_start|>system\nYou are a helpful assistant.<|im_end|>\n" if first else "\n"
    return tokenizer.encode(f"{system}<|im_start|>user\n{text}<|im_end|>\n<|im_start|>assistant\n",
                            add_special_tokens=False)


def conversation_turns(tokenizer, seed: int) -> list[list[int]]:
    rng = random.Random(seed)
    return [user_turn(tokenizer, user_text(rng, tokenizer, rng.randint(20, 80)), t == 0) for t in range(TURNS)]


def run_engine(llm: LLM, turns: list[list[list[int]]]) -> list[dict]:
    """Round-robin over the conversations; each turn's prompt is the history's exact tokens plus the new turn."""
    engine = llm.engine
    engine.reset_prefix_cache()
    histories = [[] for _ in turns]
    per_turn = [[] for _ in range(TURNS)]
    prompts = [[] for _ in range(TURNS)]
    for t in range(TURNS):
        for c, conversation in enumerate(turns):
            prompt = histories[c] + conversation[t]
            prompts[t].append(prompt)
            engine.add_request(prompt, SamplingParams(temperature=0.7, seed=c * 100 + t, max_tokens=128))
            start, first, reply, cached = time.perf_counter(), None, [], 0
            while engine.has_unfinished_requests():
                for delta in engine.step():
                    reply += delta.outputs[0].token_ids if delta.outputs else []
                    cached = delta.num_cached_tokens
                    if first is None and reply:
                        first = time.perf_counter() - start
            per_turn[t].append({"ttft": first, "prompt": len(prompt), "computed": len(prompt) - cached})
            histories[c] = prompt + reply
    return [{"turn": t + 1, "ttft_ms": 1000 * statistics.mean(r["ttft"] for r in rows),
             "prompt_tokens": statistics.mean(r["prompt"] for r in rows),
             "computed_tokens": statistics.mean(r["computed"] for r in rows),
             "max_computed_minus_new": max(r["computed"] - len(turns[c][t]) for c, r in enumerate(rows))}
            for t, rows in enumerate(per_turn)], prompts


@torch.inference_mode()
def hf_ttft(model, prompts_per_turn: list[list[list[int]]]) -> list[float]:
    """transformers re-runs the whole history each turn: time to its first token."""
    result = []
    for prompts in prompts_per_turn:
        times = []
        for ids in prompts:
            with Timer() as t:
                model.generate(torch.tensor([ids]), do_sample=False, max_new_tokens=1, pad_token_id=2)
            times.append(t.seconds)
        result.append(1000 * statistics.mean(times))
    return result


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__)
    parser.add_argument("--quantization", default="auto", choices=("auto", "none"),
                        help="auto: the GGUF's own weights, packed (the default); none: dense float32")
    parser.add_argument("--dtype", default=None)
    parser.add_argument("--skip-peer", action="store_true")
    args = parser.parse_args()
    threads = set_threads()
    llm = LLM(dtype=args.dtype, quantization=args.quantization)
    tokenizer = llm.tokenizer
    turns = [conversation_turns(tokenizer, seed=c) for c in range(CONVERSATIONS)]
    cached_rows, prompts_per_turn = run_engine(llm, turns)
    cold = LLM(dtype=args.dtype, quantization=args.quantization, enable_prefix_caching=False)
    cold_rows, _ = run_engine(cold, turns)
    rows = []
    for a, b in zip(cached_rows, cold_rows):
        rows.append({**a, "no_cache_ttft_ms": b["ttft_ms"], "no_cache_computed": b["computed_tokens"]})
    summary = {"threads": threads,
               "turn 8 / turn 1 ttft": cached_rows[-1]["ttft_ms"] / cached_rows[0]["ttft_ms"],
               "max(computed - new tokens) over all turns": max(r["max_computed_minus_new"] for r in cached_rows)}
    if not args.skip_peer:
        model, _ = hf_model(torch.float32)
        for row, ms in zip(rows, hf_ttft(model, prompts_per_turn)):
            row["hf_rerun_ttft_ms"] = ms
        summary["turn 8: transformers re-run / engine ttft"] = rows[-1]["hf_rerun_ttft_ms"] / rows[-1]["ttft_ms"]
    report(result_name("multiturn", args.dtype, args.quantization), rows, summary)


if __name__ == "__main__":
    main()
