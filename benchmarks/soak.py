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
            if response.status_code >= 400:
                refused(tally, path, response)
                return events
            for event in data_events(response):
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


def refused(tally: Tally, path: str, response: httpx.Response) -> None:
    """A 4xx is counted, a 5xx is an error."""
    if response.status_code >= 500:
        tally.error(f"{path}: {response.status_code} {response.read()[:200]!r}")
    else:
        tally.count("refused")


def data_events(response: httpx.Response):
    """Each server-sent event's data, decoded, up to `[DONE]`."""
    for line in response.iter_lines():
        if line.startswith("data:") and line[5:].strip() != "[DONE]":
            yield json.loads(line[5:])


class Client:
    """One client's requests of every kind against one conversation at a time (created or picked)."""

    def __init__(self, api: httpx.Client, rng: random.Random, conversations: list[str], lock: threading.Lock,
                 tally: Tally):
        self.api, self.rng, self.conversations, self.lock, self.tally = api, rng, conversations, lock, tally

    def one_request(self) -> None:
        rng = self.rng
        kind = rng.choices(list(KINDS), weights=list(KINDS.values()))[0]
        self.tally.count(kind)
        cid = self.conversation()
        if cid is None:
            return
        tree = self.api.get(f"/api/conversations/{cid}")
        if tree.status_code == 404:  # deleted by another client meanwhile
            return
        messages = tree.json()["messages"]
        self.base, self.question = f"/api/conversations/{cid}", rng.choice(QUESTIONS)
        self.replies = [m for m in messages if m["role"] == "assistant" and m.get("finish_reason")]
        self.users = [m for m in messages if m["role"] == "user"]
        self.settings = {"max_tokens": rng.randint(4, 24), "temperature": rng.choice([0.0, 0.7, 1.0])}
        if kind in ("regenerate", "edit") and not self.users:
            kind = "send"
        getattr(self, kind.replace("-", "_"))(cid)

    def conversation(self) -> str | None:
        """One of the conversations, or (now and then) a new one; None if it could not be made."""
        with self.lock:
            cid = self.rng.choice(self.conversations) if self.conversations and self.rng.random() < 0.8 else None
        if cid is not None:
            return cid
        created = self.api.post("/api/conversations", json={"system_prompt": self.rng.choice(["", "Be brief."])})
        if created.status_code >= 500:
            self.tally.error(f"create: {created.status_code}")
            return None
        with self.lock:
            self.conversations.append(created.json()["id"])
        return created.json()["id"]

    def message(self, n: int = 1, max_tokens: int | None = None) -> dict:
        parent = self.rng.choice(self.replies)["id"] if self.replies and self.rng.random() < 0.7 else None
        return {"content": self.question, "parent_id": parent, "n": n,
                "settings": {**self.settings, **({"max_tokens": max_tokens} if max_tokens else {})}}

    def send(self, cid: str) -> None:
        read_stream(self.api, f"{self.base}/messages", self.message(), self.tally)

    def fork(self, cid: str) -> None:
        read_stream(self.api, f"{self.base}/messages", self.message(n=3), self.tally)

    def disconnect(self, cid: str) -> None:
        read_stream(self.api, f"{self.base}/messages", self.message(), self.tally, cut_after_delta=True)

    def stop(self, cid: str) -> None:
        stop = threading.Timer(self.rng.uniform(0.0, 0.5), lambda: self.api.post(f"{self.base}/stop", json={}))
        stop.start()
        read_stream(self.api, f"{self.base}/messages", self.message(max_tokens=300), self.tally)
        stop.join()

    def regenerate(self, cid: str) -> None:
        target = self.rng.choice(self.replies or self.users)["id"]
        read_stream(self.api, f"{self.base}/messages/{target}/regenerate",
                    {"n": self.rng.choice([1, 2]), "settings": self.settings}, self.tally)

    def edit(self, cid: str) -> None:
        read_stream(self.api, f"{self.base}/messages/{self.rng.choice(self.users)['id']}/edit",
                    {"content": self.question, "settings": self.settings}, self.tally)

    def delete(self, cid: str) -> None:
        if self.rng.random() < 0.5:  # while a reply streams
            writing = threading.Event()
            body = {"content": self.question, "settings": {**self.settings, "max_tokens": 300}}
            reader = threading.Thread(target=read_stream, args=(self.api, f"{self.base}/messages", body, self.tally),
                                      kwargs={"on_delta": writing.set})
            reader.start()
            writing.wait(30)
            deleted = self.api.delete(self.base)
            reader.join()
        else:
            deleted = self.api.delete(self.base)
        if deleted.status_code >= 500:
            self.tally.error(f"delete: {deleted.status_code}")
        with self.lock:
            if cid in self.conversations:
                self.conversations.remove(cid)

    def v1(self, cid: str, stream: bool = False) -> None:
        body = {"messages": [{"role": "user", "content": self.question}], "n": self.rng.choice([1, 1, 2]),
                **self.settings, "stream": stream}
        if stream:
            read_stream(self.api, "/v1/chat/completions", body, self.tally)
            return
        response = self.api.post("/v1/chat/completions", json=body)
        if response.status_code >= 500:
            self.tally.error(f"v1: {response.status_code}")

    def v1_stream(self, cid: str) -> None:
        self.v1(cid, stream=True)

    def bad(self, cid: str) -> None:
        response = self.api.post("/v1/chat/completions", json=self.rng.choice(BAD_REQUESTS))
        if response.status_code != 400:
            self.tally.error(f"bad input answered {response.status_code}")


KINDS = {"send": 30, "fork": 8, "regenerate": 10, "edit": 6, "stop": 10, "disconnect": 10, "delete": 6, "v1": 8,
         "v1-stream": 7, "bad": 5}  # each kind's weight in the mix
BAD_REQUESTS = [{"messages": []}, {"messages": [{"role": "user", "content": "x"}], "seed": 2**70},
                {"messages": [{"role": "user", "content": "x"}], "temperature": -1}, {"messages": "x"},
                {"messages": [{"role": "user", "content": "x"}], "top_p": 0}]


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
    tally, rss = Tally(), []
    try:
        run = Run(server, args.requests, tally, rss)
        with server.client() as api:  # warm-up: a few requests before the first measurement
            for _ in range(10):
                Client(api, random.Random(0), run.conversations, run.lock, Tally()).one_request()
        metrics = server.metrics()
        kv_cache = {"kv_blocks_total": int(metrics["localchat_kv_blocks_total"]),
                    "kv_cache_mb": round(metrics["localchat_kv_cache_bytes"] / 2**20)}
        run.sample(0)
        seconds = run.clients(args.clients)
        metrics, still_generating = settled(server)
        run.sample(args.requests)
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


class Run:
    """The soak's requests shared out among client threads, with the server's RSS sampled every 100."""

    def __init__(self, server: Server, requests: int, tally: Tally, rss: list[dict]):
        self.server, self.requests, self.tally, self.rss = server, requests, tally, rss
        self.conversations: list[str] = []
        self.lock = threading.Lock()
        self.done = 0

    def sample(self, requests: int) -> None:
        metrics = self.server.metrics()
        self.rss.append({"requests": requests, "rss_mb": round(self.server.rss_mb(), 1),
                         "kv_blocks_holding_a_prefix": int(metrics["localchat_kv_blocks_used"]
                                                           + metrics["localchat_kv_blocks_cached"])})

    def clients(self, count: int) -> float:
        """Run every request from `count` threads; the seconds it took."""
        started = time.monotonic()
        threads = [threading.Thread(target=self.client, args=(seed,)) for seed in range(count)]
        for thread in threads:
            thread.start()
        for thread in threads:
            thread.join()
        return time.monotonic() - started

    def client(self, seed: int) -> None:
        with self.server.client() as api:
            client = Client(api, random.Random(seed), self.conversations, self.lock, self.tally)
            while self.take_one():
                try:
                    client.one_request()
                except httpx.HTTPError as error:
                    self.tally.error(f"{type(error).__name__}: {error}")

    def take_one(self) -> bool:
        """Whether a request is left to send (sampling RSS at every hundredth)."""
        with self.lock:
            if self.done >= self.requests:
                return False
            self.done += 1
            if self.done % 100 == 0:
                self.sample(self.done)
        return True


def settled(server: Server) -> tuple[dict, bool]:
    """The metrics once no KV block is held (a minute at most), and whether a reply is still generated then."""
    deadline = time.monotonic() + 60
    while (metrics := server.metrics())["localchat_kv_blocks_used"] and time.monotonic() < deadline:
        time.sleep(0.5)
    reply = httpx.post(f"{server.url}/v1/chat/completions", timeout=60, headers={
        "Authorization": f"Bearer {server.token}"}, json={"messages": [{"role": "user", "content": "Hi"}],
                                                          "max_tokens": 4})
    return metrics, reply.status_code == 200


if __name__ == "__main__":
    main()
