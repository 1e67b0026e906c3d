"""A multi-turn chat through Ollama's /api/chat on `localchat serve` with its defaults: per turn, the prompt's tokens,
those served from the prefix cache (the /metrics counter's change) and Ollama's own counters (prompt_eval_duration:
the time to the first token; eval_count over eval_duration: the decode rate).

    .venv/bin/python benchmarks/ollama_turns.py [--model PATH.gguf|embedded ...] [--turns 4] [--cache-dir DIR]

Each model gets a fresh home (the converted model may come from --cache-dir); greedy replies of 48 tokens after a
system prompt of ~60 tokens. Writes benchmarks/results/ollama_turns.json.
"""

import argparse
import shutil
import sys
import tempfile
from pathlib import Path

import httpx
from peers import localchat_client, localchat_serve, log, make_home, write_result

SYSTEM = "You are a helpful assistant who answers in two sentences. " * 4
QUESTIONS = ["Tell me about owls.", "And about hawks?", "Which one hunts at night?", "Summarize both.",
             "Which is larger?", "Where do they live?"]


def cached_tokens(http: httpx.Client) -> float:
    metrics = http.get("/metrics").text
    return next(float(line.split()[1]) for line in metrics.splitlines()
                if line.startswith("localchat_cached_prompt_tokens_total "))


def run(model: str | None, turns: int, args, work: Path) -> list[dict]:
    home = make_home(Path(tempfile.mkdtemp(prefix="ollama-turns-", dir=work)), args.cache_dir)
    with localchat_serve(home, ["--model", model] if model else [], work / "serve.log") as serve:
        http = localchat_client(home, serve.port)
        name = http.get("/health").json()["model"]
        messages, rows = [{"role": "system", "content": SYSTEM}], []
        for question in QUESTIONS[:turns]:
            messages.append({"role": "user", "content": question})
            before = cached_tokens(http)
            reply = http.post("/api/chat", json={"model": name, "messages": messages, "stream": False,
                                                 "options": {"temperature": 0, "num_predict": 48}})
            reply.raise_for_status()
            reply = reply.json()
            rows.append({"prompt_tokens": reply["prompt_eval_count"],
                         "cached_tokens": int(cached_tokens(http) - before),
                         "first_token_ms": round(reply["prompt_eval_duration"] / 1e6, 1),
                         "decode_tps": round(reply["eval_count"] / (reply["eval_duration"] / 1e9), 1)})
            log(f"{name}: {rows[-1]}")
            messages.append(reply["message"])
    shutil.rmtree(home, ignore_errors=True)
    return rows


def main() -> int:
    parser = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("--model", action="append", default=None, help="a GGUF file, or 'embedded' (repeatable)")
    parser.add_argument("--turns", type=int, default=4, choices=range(1, len(QUESTIONS) + 1))
    parser.add_argument("--cache-dir", default=None, help="a kept cache of converted models")
    args = parser.parse_args()
    work = Path(tempfile.mkdtemp(prefix="ollama-turns-bench-"))
    runs = {}
    for model in args.model or ["embedded"]:
        runs[model] = run(None if model == "embedded" else model, args.turns, args, work)
        for k, row in enumerate(runs[model], 1):
            print(f"{model} turn {k}: prompt {row['prompt_tokens']}, cached {row['cached_tokens']}, first token "
                  f"{row['first_token_ms']} ms, {row['decode_tps']} tok/s")
    shutil.rmtree(work, ignore_errors=True)
    write_result("ollama_turns", {"runs": runs})
    return 0


if __name__ == "__main__":
    sys.exit(main())
