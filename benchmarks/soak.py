"""Soak: 2,000 mixed requests against a fresh `localchat serve` with its defaults, from 8 client threads.

The mix: sends, forks (n=3), regenerations, edits, stops mid-reply, clients that disconnect mid-reply,
deletes (some while a reply streams), /v1 chat completions streamed and whole, and bad input. Reported:
the server's RSS at the start (after a warm-up) and at the end, sampled along the way; KV blocks used at
the end (0); errors (5xx answers or broken streams: 0); hung streams (0). Beside each RSS sample, the KV blocks that
hold a prefix (in use or cached): the cache's blocks become resident as they are first used, so RSS grows while they
do and levels off once every block has been used (its growth over the second half of the run: near 0). --kv-blocks
makes a smaller cache that fills sooner (default: the engine's, sized from the machine's memory), and
--max-model-len keeps a few of the longest chats within it (a chat that outgrows it is refused: a 4xx, not an
error).

    python benchmarks/soak.py [--requests 2000] [--clients 8] [--kv-blocks N --max-model-len TOKENS]
"""

import argparse
import json
import random
import shutil
import sys
import tempfile
import threading
import time
from pathlib import Path

import httpx

from common import Server, report

TRACEBACK_CHARS = 3000  # of the server log's first traceback, kept in the report
QUESTIONS = ["Hi!", "What is a cat?", "Tell me a story about a river.", "Why is the sky blue?", "Name a color.",
             "Write a haiku.", "How do I sort a list in Python?", "Thanks!"]


class Tally:
    def __init__(self):
        self.lock = threading.Lock()
        self.counts: dict[str, int] = {}
        self.errors: list[str] = []
        self.hung = 0

    def count(self, kind: str) -> None:
        with self.lock:
            self.counts[kind] = self.counts.get(kind, 0) + 1

    def error(self, what: str) -> None:
        with self.lock:
            self.errors.append(what)


def read_stream(api: httpx.Client, path: str, body: dict, tally: Tally, cut_after_delta: bool = False,
                on_delta=None) -> list[dict]:
    """The events of an /api stream (or of a /v1 stream: chunks as dicts). A 4xx is fine, a 5xx an error."""
    events = []
    try:
        with api.stream("POST", path, json=body) as response:
            if response.status_code >= 500:
                tally.error(f"{path}: {response.status_code} {response.read()[:200]!r}")
                return events
            if response.status_code >= 400:
                tally.count("refused")
                return events
            for line in response.iter_lines():
                if not line.startswith("data:") or line[5:].strip() == "[DONE]":
                    continue
                event = json.loads(line[5:])
                events.append(event)
                if event.get("type") == "error":
                    tally.error(f"{path}: error event {event}")
                if event.get("type") == "delta" or event.get("object") == "chat.completion.chunk":
                    if on_delta is not None:
                        on_delta()
                        on_delta = None
                    if cut_after_delta:
                        return events  # the client goes away mid-reply
    except httpx.ReadTimeout:
        with tally.lock:
            tally.hung += 1
    except httpx.HTTPError as error:
        tally.error(f"{path}: {type(error).__name__} {error}")
    return events


def one_request(api: httpx.Client, rng: random.Random, conversations: list[str], lock: threading.Lock,
                tally: Tally) -> None:
    kind = rng.choices(["send", "fork", "regenerate", "edit", "stop", "disconnect", "delete", "v1", "v1-stream",
                        "bad"], weights=[30, 8, 10, 6, 10, 10, 6, 8, 7, 5])[0]
    tally.count(kind)
    settings = {"max_tokens": rng.randint(4, 24), "temperature": rng.choice([0.0, 0.7, 1.0])}
    with lock:
        cid = rng.choice(conversations) if conversations and rng.random() < 0.8 else None
    if cid is None:
        created = api.post("/api/conversations", json={"system_prompt": rng.choice(["", "Be brief."])})
        if created.status_code >= 500:
            tally.error(f"create: {created.status_code}")
            return
        cid = created.json()["id"]
        with lock:
            conversations.append(cid)
    base = f"/api/conversations/{cid}"
    tree = api.get(base)
    if tree.status_code == 404:  # deleted by another client meanwhile
        return
    messages = tree.json()["messages"]
    replies = [m for m in messages if m["role"] == "assistant" and m.get("finish_reason")]
    users = [m for m in messages if m["role"] == "user"]
    question = rng.choice(QUESTIONS)
    if kind in ("send", "fork", "stop", "disconnect") or (kind in ("regenerate", "edit") and not users):
        parent = rng.choice(replies)["id"] if replies and rng.random() < 0.7 else None
        body = {"content": question, "parent_id": parent, "n": 3 if kind == "fork" else 1, "settings": settings}
        if kind == "stop":
            body["settings"] = {**settings, "max_tokens": 300}
            stop = threading.Timer(rng.uniform(0.0, 0.5), lambda: api.post(f"{base}/stop", json={}))
            stop.start()
            read_stream(api, f"{base}/messages", body, tally)
            stop.join()
        else:
            read_stream(api, f"{base}/messages", body, tally, cut_after_delta=kind == "disconnect")
    elif kind == "regenerate":
        target = rng.choice(replies or users)["id"]
        read_stream(api, f"{base}/messages/{target}/regenerate", {"n": rng.choice([1, 2]), "settings": settings},
                    tally)
    elif kind == "edit":
        read_stream(api, f"{base}/messages/{rng.choice(users)['id']}/edit", {"content": question,
                                                                             "settings": settings}, tally)
    elif kind == "delete":
        if rng.random() < 0.5:  # while a reply streams
            done = threading.Event()
            body = {"content": question, "settings": {**settings, "max_tokens": 300}}
            reader = threading.Thread(target=read_stream, args=(api, f"{base}/messages", body, tally),
                                      kwargs={"on_delta": done.set})
            reader.start()
            done.wait(30)
            deleted = api.delete(base)
            reader.join()
        else:
            deleted = api.delete(base)
        if deleted.status_code >= 500:
            tally.error(f"delete: {deleted.status_code}")
        with lock:
            if cid in conversations:
                conversations.remove(cid)
    elif kind in ("v1", "v1-stream"):
        body = {"messages": [{"role": "user", "content": question}], "n": rng.choice([1, 1, 2]), **settings,
                "stream": kind == "v1-stream"}
        if kind == "v1-stream":
            read_stream(api, "/v1/chat/completions", body, tally)
        else:
            response = api.post("/v1/chat/completions", json=body)
            if response.status_code >= 500:
                tally.error(f"v1: {response.status_code}")
    else:
        bad = rng.choice([{"messages": []}, {"messages": [{"role": "user", "content": "x"}], "seed": 2**70},
                          {"messages": [{"role": "user", "content": "x"}], "temperature": -1},
                          {"messages": "x"}, {"messages": [{"role": "user", "content": "x"}], "top_p": 0}])
        response = api.post("/v1/chat/completions", json=bad)
        if response.status_code != 400:
            tally.error(f"bad input answered {response.status_code}")


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("--requests", type=int, default=2000)
    parser.add_argument("--clients", type=int, default=8)
    parser.add_argument("--port", type=int, default=8790)
    parser.add_argument("--kv-blocks", type=int, default=None)
    parser.add_argument("--max-model-len", type=int, default=None)
    args = parser.parse_args()
    home = Path(tempfile.mkdtemp(prefix="localchat-soak-"))
    limits = {"--kv-blocks": args.kv_blocks, "--max-model-len": args.max_model_len}
    server = Server(home, args.port, [str(x) for flag, value in limits.items() if value is not None
                                      for x in (flag, value)])
    tally, conversations, lock = Tally(), [], threading.Lock()
    rss, done = [], [0]

    def sample(requests: int) -> None:
        metrics = server.metrics()
        rss.append({"requests": requests, "rss_mb": round(server.rss_mb(), 1), "kv_blocks_holding_a_prefix": int(
            metrics["localchat_kv_blocks_used"] + metrics["localchat_kv_blocks_cached"])})

    try:
        with server.client() as api:  # warm-up: a few requests before the first measurement
            for _ in range(10):
                one_request(api, random.Random(0), conversations, lock, Tally())
        metrics = server.metrics()
        kv_cache = {"kv_blocks_total": int(metrics["localchat_kv_blocks_total"]),
                    "kv_cache_mb": round(metrics["localchat_kv_cache_bytes"] / 2**20)}
        sample(0)
        started = time.monotonic()

        def client(seed: int) -> None:
            rng = random.Random(seed)
            with server.client() as api:
                while True:
                    with lock:
                        if done[0] >= args.requests:
                            return
                        done[0] += 1
                        if done[0] % 100 == 0:
                            sample(done[0])
                    try:
                        one_request(api, rng, conversations, lock, tally)
                    except httpx.HTTPError as error:
                        tally.error(f"{type(error).__name__}: {error}")

        threads = [threading.Thread(target=client, args=(seed,)) for seed in range(args.clients)]
        for thread in threads:
            thread.start()
        for thread in threads:
            thread.join()
        seconds = time.monotonic() - started
        deadline = time.monotonic() + 60
        while (metrics := server.metrics())["localchat_kv_blocks_used"] and time.monotonic() < deadline:
            time.sleep(0.5)
        still_generating = httpx.post(f"{server.url}/v1/chat/completions", timeout=60, headers={
            "Authorization": f"Bearer {server.token}"}, json={"messages": [{"role": "user", "content": "Hi"}],
                                                              "max_tokens": 4}).status_code == 200
        sample(args.requests)
    finally:
        server.stop()
        log = (home / "serve.log").read_text(errors="replace")
        shutil.rmtree(home, ignore_errors=True)
    halfway = next(row for row in rss if row["requests"] >= args.requests // 2)
    summary = {
        "requests": args.requests, "clients": args.clients, "seconds": round(seconds, 1), **kv_cache,
        "max_model_len": args.max_model_len,
        "rss_start_mb": rss[0]["rss_mb"], "rss_end_mb": rss[-1]["rss_mb"],
        "rss_growth_mb": round(rss[-1]["rss_mb"] - rss[0]["rss_mb"], 1),
        "rss_growth_second_half_mb": round(rss[-1]["rss_mb"] - halfway["rss_mb"], 1),
        "kv_blocks_used_at_end": metrics["localchat_kv_blocks_used"], "errors": len(tally.errors),
        "hung_streams": tally.hung, "still_generating": still_generating,
        "tracebacks_in_log": log.count("Traceback"),
        "first_traceback": log[log.index("Traceback"):][:TRACEBACK_CHARS] if "Traceback" in log else None,
        "mix": dict(sorted(tally.counts.items())),
        "first_errors": tally.errors[:10],
    }
    report("soak", rss, summary)
    if tally.errors or tally.hung or metrics["localchat_kv_blocks_used"] or not still_generating:
        sys.exit(1)


if __name__ == "__main__":
    main()
