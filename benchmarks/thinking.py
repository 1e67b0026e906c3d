"""Thinking tokens against plain ones, through `localchat serve` with its defaults: the same prompt and seed asked as a
chat (the reply starts inside its <think> block: every token goes through the reasoning parser and streams as
reasoning_content) and as a completion of the same token ids (the text as written, nothing taken apart). The engine
samples the same tokens for both, so the decode rates differ only by what taking the thinking apart costs.

    .venv/bin/python benchmarks/synthetic_gguf.py /tmp/llama-1b-thinking.gguf --thinking
    .venv/bin/python benchmarks/thinking.py --model /tmp/llama-1b-thinking.gguf [--reps 3] [--cache-dir DIR]

One stream, then 8 at once, each way in alternating order; the decode rate is (tokens - 1) / (last token - first
token) as the client sees it, the medians are compared. Then a conversation of four turns, each reply thinking (a
budget of 32 tokens) before it answers: each turn's prompt drops the earlier replies' thinking, as the template
renders it, and the prompt and cached tokens of each turn are reported. Writes benchmarks/results/thinking.json.
"""

import argparse
import json
import shutil
import statistics
import sys
import tempfile
import threading
import time
from pathlib import Path

import httpx
from peers import (
    load,
    localchat_client,
    localchat_serve,
    log,
    make_home,
    write_result,
)

PROMPT = [{"role": "user", "content": "How many weeks are there in three and a half years? Think it through."}]
STREAMS = (1, 8)
SYSTEM = "You are a patient tutor. " * 12
TURNS = ["What is a prime number?", "Is 91 one?", "And 97?", "Name the next prime after 97."]


def stream(http: httpx.Client, path: str, body: dict) -> dict:
    """One streamed request: its tokens and decode rate, and how many of its tokens were thinking."""
    first = last = None
    usage = {}
    with http.stream("POST", path, json={**body, "stream": True, "stream_options": {"include_usage": True}}) as r:
        r.raise_for_status()
        for line in r.iter_lines():
            if not line.startswith("data: ") or line == "data: [DONE]":
                continue
            chunk = json.loads(line[6:])
            usage = chunk.get("usage") or usage
            for choice in chunk.get("choices") or []:
                delta = choice.get("delta") or {}
                if choice.get("text") or delta.get("content") or delta.get("reasoning_content"):
                    now = time.perf_counter()
                    first, last = first or now, now
    tokens = usage["completion_tokens"]
    reasoning = (usage.get("completion_tokens_details") or {}).get("reasoning_tokens", 0)
    return {"tokens": tokens, "reasoning_tokens": reasoning,
            "decode_tps": (tokens - 1) / (last - first) if first and last and last > first else None}


def concurrently(count: int, request) -> dict:
    """count requests at once: output tok/s over the whole run, and the median stream's decode rate."""
    results: list[dict] = [None] * count
    threads = [threading.Thread(target=lambda i=i: results.__setitem__(i, request(i))) for i in range(count)]
    started = time.perf_counter()
    for thread in threads:
        thread.start()
    for thread in threads:
        thread.join()
    seconds = time.perf_counter() - started
    return {"output_tps": sum(r["tokens"] for r in results) / seconds,
            "decode_tps": statistics.median(r["decode_tps"] for r in results),
            "reasoning_tokens": sum(r["reasoning_tokens"] for r in results)}


def main() -> int:
    parser = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("--model", type=Path, required=True, help="a GGUF whose template thinks (--thinking)")
    parser.add_argument("--reps", type=int, default=3)
    parser.add_argument("--max-tokens", type=int, default=128)
    parser.add_argument("--cache-dir", default=None, help="a kept cache of converted models")
    args = parser.parse_args()
    work = Path(tempfile.mkdtemp(prefix="thinking-bench-"))
    home = make_home(work, args.cache_dir)
    runs = {f"{way}x{n}": [] for way in ("thinking", "plain") for n in STREAMS}
    before = load()
    with localchat_serve(home, ["--model", str(args.model)], work / "serve.log") as serve:
        command = serve.command
        http = localchat_client(home, serve.port)
        prompt = prompt_text(args.model)
        common = {"max_tokens": args.max_tokens, "temperature": 0.8, "ignore_eos": True}
        ways = {"thinking": lambda seed: stream(http, "/v1/chat/completions", {"messages": PROMPT, "seed": seed,
                                                                                **common}),
                "plain": lambda seed: stream(http, "/v1/completions", {"prompt": prompt, "seed": seed, **common})}
        for rep in range(args.reps):
            for way in (("thinking", "plain") if rep % 2 == 0 else ("plain", "thinking")):
                for n in STREAMS:
                    result = concurrently(n, lambda i, way=way: ways[way](100 + i))
                    runs[f"{way}x{n}"].append(result)
                    log(f"rep {rep} {way} x{n}: {result['decode_tps']:.1f} tok/s a stream, "
                        f"{result['output_tps']:.1f} in all, {result['reasoning_tokens']} thinking tokens")
        turns = multi_turn(http)
    shutil.rmtree(work, ignore_errors=True)
    for k, turn in enumerate(turns, 1):
        print(f"turn {k}: {turn['prompt_tokens']} prompt tokens, {turn['cached_tokens']} from the cache")
    summary = {"turns": turns}
    for n in STREAMS:
        thinking = statistics.median(r["decode_tps"] for r in runs[f"thinkingx{n}"])
        plain = statistics.median(r["decode_tps"] for r in runs[f"plainx{n}"])
        summary[f"streams_{n}"] = {"thinking_decode_tps": round(thinking, 2), "plain_decode_tps": round(plain, 2),
                                   "thinking_over_plain": round(thinking / plain, 3)}
        print(f"{n} stream(s): thinking {thinking:.1f} tok/s, plain {plain:.1f} tok/s: {thinking / plain:.3f}x")
    write_result("thinking", {"model": str(args.model), "command": command, "max_tokens": args.max_tokens,
                              "load_before": before, "load_after": load(), "summary": summary, "runs": runs})
    return 0


def multi_turn(http: httpx.Client) -> list[dict]:
    """A conversation of len(TURNS) turns whose replies think: each turn's prompt and cached tokens."""
    settings = {"max_tokens": 64, "thinking_token_budget": 32, "temperature": 0.8, "seed": 1}
    conversation = http.post("/api/conversations", json={"system_prompt": SYSTEM, "settings": settings}).json()["id"]
    parent, turns = None, []
    for text in TURNS:
        with http.stream("POST", f"/api/conversations/{conversation}/messages",
                         json={"content": text, "parent_id": parent}) as response:
            events = [json.loads(line[6:]) for line in response.iter_lines() if line.startswith("data: ")]
        reply = next(e["message"] for e in events if e["type"] == "done")
        parent = reply["id"]
        turns.append({key: reply["stats"][key] for key in ("prompt_tokens", "cached_tokens", "reasoning_tokens",
                                                             "completion_tokens")})
    return turns


def prompt_text(gguf: Path) -> str:
    """The chat prompt as the model's template renders it (the server tokenizes a completion's text as it tokenizes
    that rendering: the same token ids)."""
    from localchat.engine.loading.loader import resolve_model

    return resolve_model(str(gguf)).tokenizer.apply_chat_template(PROMPT, tokenize=False, add_generation_prompt=True)


if __name__ == "__main__":
    sys.exit(main())
