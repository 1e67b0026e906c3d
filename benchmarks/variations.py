"""A fork of 4 variations after a 2,000-token history, against the same 4 prompts sent as 4 separate requests, through
`localchat serve` (the embedded model by default):

- fork: POST /api/conversations/{id}/messages with 4 variations (3 instructions, 1 temperature of its own) in a chat
  whose system prompt is a ~1,950-token text; the history (system prompt and the message) is computed once, then each
  reply computes its own turn. Timed from the request to the stream's end (all 4 replies written).
  `cold`: the chat's first message (its history is computed in the fork); `warm`: the same after an earlier exchange in
  the chat (the history is in the cache but for the new message, as in a chat in progress).
- separate: the same 4 prompts (the history, then each variation's instruction as the last user turn) as 4
  /v1/chat/completions requests sent together (they batch), each prompt starting with a line of its own ("Request
  k.") so that the prefix cache finds nothing: each computes its whole prompt. Timed from the first request to the
  last answer.

Every reply writes REPLY_TOKENS tokens (ignore_eos). KV blocks: the most in use during a run (/metrics polled every
50 ms in runs of their own, not the timed ones), against one reply's (its prompt and reply in blocks).

    .venv/bin/python benchmarks/variations.py [--model PATH.gguf] [--runs 3] [--reply-tokens 32] [--cache-dir DIR]

Writes benchmarks/results/variations.json.
"""

import argparse
import json
import random
import tempfile
import threading
import time
from concurrent.futures import ThreadPoolExecutor
from pathlib import Path

import httpx
from peers import load, localchat_client, localchat_serve, log, make_home, write_result

from common import WORDS

HISTORY_TOKENS = 2000
MESSAGE = "Which three rules of the text above matter most, and why?"
VARIATIONS = [{"instruction": "Answer in one sentence."}, {"instruction": "Answer as a short list."},
              {"instruction": "Answer formally."}, {"temperature": 1.0}]
BLOCK = 16
POLL_S = 0.05


def text(tokens: int, seed: int) -> str:
    """Numbered rules of random words, about `tokens` tokens of the embedded model's (1.3 a word)."""
    rng = random.Random(seed)
    rules, words = [], 0
    while words < tokens / 1.35:
        rule = " ".join(rng.choice(WORDS) for _ in range(rng.randint(8, 16)))
        rules.append(f"Rule {len(rules) + 1}: {rule}.")
        words += rule.count(" ") + 3
    return "\n".join(rules)


def events(http: httpx.Client, path: str, body: dict) -> list[dict]:
    with http.stream("POST", path, json=body) as response:
        response.raise_for_status()
        return [json.loads(line[6:]) for line in response.iter_lines() if line.startswith("data: ")]


def fork(http: httpx.Client, system: str, warm: bool, reply_tokens: int) -> dict:
    """A chat with the system prompt, (warm: one exchange first,) then the message with the 4 variations."""
    settings = {"max_tokens": reply_tokens, "ignore_eos": True, "temperature": 0.7, "seed": 1}
    cid = http.post("/api/conversations", json={"system_prompt": system, "settings": settings}).json()["id"]
    parent = None
    if warm:
        first = events(http, f"/api/conversations/{cid}/messages", {"content": "Read the rules, please."})
        parent = next(e["message"]["id"] for e in first if e["type"] == "done")
    started = time.perf_counter()
    stream = events(http, f"/api/conversations/{cid}/messages",
                    {"content": MESSAGE, "parent_id": parent, "variations": VARIATIONS})
    seconds = time.perf_counter() - started
    order = next(e["message_ids"] for e in stream if e["type"] == "start")
    done = sorted((e["message"] for e in stream if e["type"] == "done"), key=lambda m: order.index(m["id"]))
    assert len(done) == 4 and all(m["stats"]["completion_tokens"] == reply_tokens for m in done), done
    return {"seconds": round(seconds, 3), "prompt_tokens": [m["stats"]["prompt_tokens"] for m in done],
            "cached_tokens": [m["stats"]["cached_tokens"] for m in done]}


def separate(http: httpx.Client, system: str, reply_tokens: int) -> dict:
    """The fork's 4 prompts, each its own /v1 request with a first line of its own, sent together."""
    def ask(k: int) -> dict:
        variation = VARIATIONS[k]
        messages = [{"role": "system", "content": f"Request {k}.\n{system}"}, {"role": "user", "content": MESSAGE}]
        if "instruction" in variation:
            messages.append({"role": "user", "content": variation["instruction"]})
        body = {"messages": messages, "max_tokens": reply_tokens, "ignore_eos": True, "seed": 1,
                "temperature": variation.get("temperature", 0.7)}
        answer = http.post("/v1/chat/completions", json=body)
        answer.raise_for_status()
        return answer.json()["usage"]

    started = time.perf_counter()
    with ThreadPoolExecutor(4) as requests:
        usage = list(requests.map(ask, range(4)))
    return {"seconds": round(time.perf_counter() - started, 3),
            "prompt_tokens": [u["prompt_tokens"] for u in usage],
            "cached_tokens": [u["prompt_tokens_details"]["cached_tokens"] for u in usage]}


def peak_blocks(http: httpx.Client, run) -> tuple[dict, int]:
    """run()'s result, and the most KV blocks in use while it ran (/metrics every POLL_S)."""
    peak, stop = [0], threading.Event()

    def poll() -> None:
        while not stop.is_set():
            for line in http.get("/metrics").text.splitlines():
                if line.startswith("localchat_kv_blocks_used "):
                    peak[0] = max(peak[0], int(float(line.split()[1])))
            time.sleep(POLL_S)

    poller = threading.Thread(target=poll)
    poller.start()
    try:
        return run(), peak[0]
    finally:
        stop.set()
        poller.join()


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("--model", default=None, help="a GGUF file (default: the embedded model)")
    parser.add_argument("--runs", type=int, default=3)
    parser.add_argument("--reply-tokens", type=int, default=32)
    parser.add_argument("--cache-dir", default=None, help="a folder whose models/ holds converted models")
    args = parser.parse_args()
    work = Path(tempfile.mkdtemp(prefix="variations-"))
    home = make_home(work, args.cache_dir)
    flags = [*(["--model", args.model] if args.model else []), "--kv-disk-gb", "0"]
    record = {"history_tokens": HISTORY_TOKENS, "reply_tokens": args.reply_tokens, "variations": VARIATIONS,
              "load_before": load(), "runs": []}
    seed = iter(range(1000))
    with localchat_serve(home, flags, work / "serve.log") as serve:
        record["command"] = serve.command
        http = localchat_client(home, serve.port)
        fork(http, text(200, next(seed)), False, 4)  # the first steps measure the pace
        for _ in range(args.runs):
            run = {"fork_cold": fork(http, text(HISTORY_TOKENS - 50, next(seed)), False, args.reply_tokens),
                   "fork_warm": fork(http, text(HISTORY_TOKENS - 50, next(seed)), True, args.reply_tokens),
                   "separate": separate(http, text(HISTORY_TOKENS - 50, next(seed)), args.reply_tokens)}
            log(json.dumps(run))
            record["runs"].append(run)
        cold, cold_peak = peak_blocks(http, lambda: fork(http, text(HISTORY_TOKENS - 50, next(seed)), False,
                                                         args.reply_tokens))
        warm, warm_peak = peak_blocks(http, lambda: fork(http, text(HISTORY_TOKENS - 50, next(seed)), True,
                                                         args.reply_tokens))
        apart, apart_peak = peak_blocks(http, lambda: separate(http, text(HISTORY_TOKENS - 50, next(seed)),
                                                               args.reply_tokens))
    one_reply = -(-(max(cold["prompt_tokens"]) + args.reply_tokens) // BLOCK)
    record["kv_blocks"] = {"one reply (its prompt and reply)": one_reply, "fork, cold": cold_peak,
                           "fork, warm": warm_peak, "separate": apart_peak,
                           "fork cold / one reply": round(cold_peak / one_reply, 3),
                           "fork warm / one reply": round(warm_peak / one_reply, 3),
                           "separate / one reply": round(apart_peak / one_reply, 3)}
    ratios = {case: [round(r[case]["seconds"] / r["separate"]["seconds"], 3) for r in record["runs"]]
              for case in ("fork_cold", "fork_warm")}
    record["time_ratio_to_separate"] = {case: {"runs": values, "min": min(values), "max": max(values)}
                                        for case, values in ratios.items()}
    record["load_after"] = load()
    log(json.dumps({"time": record["time_ratio_to_separate"], "blocks": record["kv_blocks"]}))
    write_result("variations", record)


if __name__ == "__main__":
    main()
