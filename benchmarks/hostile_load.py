"""Hostile load (issues 46, 53): one normal client streams a long reply while hostile clients cut streams after their
first chunk, give up on whole answers within a second, and send malformed or out-of-range bodies; then work that
grows with one request's size beside a stream (a search over 2 MB of chats, a grammar of 25 tools); then long lone
prefills (a prompt of --prefill-words words each, none cached) while three clients poll /health and one polls
/metrics each second, giving up after 0.5 s; then a `kill -9` in the middle of a conversation's reply.

Against a fresh `localchat serve` with its defaults (the embedded model). Reported: the hostile requests by kind and
status class ("gave up": the client's timeout came first; "cut": the client closed the stream after its first
chunk); errors (5xx answers, broken streams: 0); the normal stream's largest gap between two token deltas in the
quiet second before the load and while it runs (bar: under 0.5 s); the KV blocks still held once every request
has ended (polled for a few seconds: 0) and whether the engine still answers; the stream's largest gap while the
searches run (bar: within 0.5 s of its quiet second) and while the tool request is answered (bar: the engine's step
limit and 0.5 s); the prefills' failed replies
(bar: 0: a /metrics wait that gave up used to end every running reply) and the pollers' answers; after the kill and
a new start on the same home, the interrupted reply as far as the store had saved it and the earlier messages as they
were.

    python benchmarks/hostile_load.py [--clients 4] [--cut-streams 200] [--give-ups 40] [--bad 60]
                                      [--prefill-runs 5] [--prefill-words 2000]
"""

import argparse
import contextlib
import functools
import json
import os
import random
import shutil
import sqlite3
import sys
import tempfile
import threading
import time
from collections import Counter
from pathlib import Path

import httpx
from peers import free_port, make_home
from soak import data_events

from common import WORDS, Server, report
from localchat.app.protocol.conversations import Message, SamplingSettings
from localchat.app.server.store import Store, new_id
from localchat.engine.config import EngineConfig

CHAT, COMPLETIONS = "/v1/chat/completions", "/v1/completions"
LONG = 3000  # tokens a long reply asks for (ignore_eos keeps it going)
STORY = [{"role": "user", "content": "Tell me a long story about a river."}]
QUIET_S = 1.0  # of the normal stream before the load starts
GAP_BAR_S = 0.5
SETTLE_S = 5.0  # for the KV blocks to be freed once every request has ended
SEARCHES = ("paris OR prime", "the lazy dog", "qu*")  # over 8 messages of 250,000 characters
HEALTH_POLLERS, POLL_GIVE_UP_S = 3, 0.5  # beside the prefills; /metrics each second, /health as fast as it answers


class Tally:
    def __init__(self):
        self.lock = threading.Lock()
        self.counts: dict[str, dict[str, int]] = {}
        self.errors: list[str] = []

    def count(self, kind: str, outcome: str) -> None:
        with self.lock:
            by_outcome = self.counts.setdefault(kind, {})
            by_outcome[outcome] = by_outcome.get(outcome, 0) + 1
            if outcome == "5xx":
                self.errors.append(f"{kind}: 5xx")

    def error(self, what: str) -> None:
        with self.lock:
            self.errors.append(what)


def status_class(response: httpx.Response) -> str:
    return f"{response.status_code // 100}xx"


def is_token(event: dict) -> bool:
    return event.get("type") == "delta" or event.get("object") == "chat.completion.chunk"


class NormalStream(threading.Thread):
    """A /v1 stream of a long greedy reply that records when each token delta came, until told to stop."""

    def __init__(self, server: Server):
        super().__init__()
        self.server, self.times, self.broken = server, [], None
        self.stop, self.first_token = threading.Event(), threading.Event()

    def run(self) -> None:
        body = {"messages": STORY, "max_tokens": LONG, "ignore_eos": True, "temperature": 0, "stream": True}
        try:
            with self.server.client() as api, api.stream("POST", CHAT, json=body) as response:
                if response.status_code != 200:
                    self.broken = f"answered {response.status_code}"
                    return
                for event in data_events(response):
                    if event["choices"][0]["delta"].get("content"):
                        self.times.append(time.monotonic())
                        self.first_token.set()
                    if self.stop.is_set():
                        return
                self.broken = "ended before the load did"
        except httpx.HTTPError as error:
            self.broken = f"{type(error).__name__}: {error}"
        finally:
            self.first_token.set()

    def largest_gap(self, start: float, end: float) -> float:
        """The longest wait between two deltas over [start, end] (a wait that straddles an end counts)."""
        return max((b - a for a, b in zip(self.times, self.times[1:]) if b > start and a < end), default=0.0)


class Hostile:
    """The hostile requests, shared out among client threads in a seeded random order."""

    def __init__(self, server: Server, tally: Tally, args, model: str):
        self.server, self.tally, self.model = server, tally, model
        self.rng = random.Random(1)
        cuts = [("cut /v1 stream", self.cut_v1), ("cut conversation stream", self.cut_conversation)]
        give_ups = [("gave up on /v1 chat", self.give_up_chat), ("gave up on /v1 completions", self.give_up_completion),
                    ("gave up on Ollama chat", self.give_up_ollama_chat),
                    ("gave up on Ollama generate", self.give_up_ollama_generate)]
        bad = [("bad input", functools.partial(self.bad, *request)) for request in bad_requests(model)]
        self.tasks = ([cuts[i % 2] for i in range(args.cut_streams)] + [give_ups[i % 4] for i in range(args.give_ups)]
                      + [bad[i % len(bad)] for i in range(args.bad)])
        self.rng.shuffle(self.tasks)
        self.lock = threading.Lock()

    def run(self, clients: int) -> None:
        threads = [threading.Thread(target=self.client) for _ in range(clients)]
        for thread in threads:
            thread.start()
        for thread in threads:
            thread.join()

    def client(self) -> None:
        with self.server.client() as api:
            while task := self.next_task():
                kind, send = task
                try:
                    self.tally.count(kind, send(api))
                except httpx.HTTPError as error:
                    self.tally.error(f"{kind}: {type(error).__name__} {error}")

    def next_task(self):
        with self.lock:
            return self.tasks.pop() if self.tasks else None

    def cut(self, api: httpx.Client, path: str, body: dict) -> str:
        """Streams until the first token, then goes away."""
        with api.stream("POST", path, json=body) as response:
            if response.status_code != 200:
                return status_class(response)
            for event in data_events(response):
                if event.get("type") == "error":
                    self.tally.error(f"{path}: error event {event}")
                if is_token(event):
                    return "cut"
        self.tally.error(f"{path}: the stream ended before its first token")
        return "2xx"

    def cut_v1(self, api: httpx.Client) -> str:
        return self.cut(api, CHAT, {"messages": STORY, "max_tokens": LONG, "ignore_eos": True, "stream": True})

    def cut_conversation(self, api: httpx.Client) -> str:
        created = api.post("/api/conversations", json={})
        if created.status_code != 201:
            return status_class(created)
        return self.cut(api, f"/api/conversations/{created.json()['id']}/messages",
                        {"content": STORY[0]["content"], "settings": {"max_tokens": LONG, "ignore_eos": True}})

    def give_up(self, api: httpx.Client, path: str, body: dict) -> str:
        """A whole answer of many tokens asked for by a client that waits 0.5-1 s."""
        try:
            return status_class(api.post(path, json=body, timeout=self.rng.uniform(0.5, 1.0)))
        except httpx.TimeoutException:
            return "gave up"

    def give_up_chat(self, api: httpx.Client) -> str:
        return self.give_up(api, CHAT, {"messages": STORY, "max_tokens": LONG, "ignore_eos": True})

    def give_up_completion(self, api: httpx.Client) -> str:
        return self.give_up(api, COMPLETIONS, {"prompt": "Once upon a time", "max_tokens": LONG, "ignore_eos": True})

    def give_up_ollama_chat(self, api: httpx.Client) -> str:  # num_predict -1: until the context is full
        return self.give_up(api, "/api/chat", {"model": self.model, "messages": STORY, "stream": False,
                                               "options": {"num_predict": -1}})

    def give_up_ollama_generate(self, api: httpx.Client) -> str:
        return self.give_up(api, "/api/generate", {"model": self.model, "prompt": "Once upon a time", "stream": False,
                                                   "options": {"num_predict": -1}})

    def bad(self, path: str, content: bytes, api: httpx.Client) -> str:
        return status_class(api.post(path, content=content, headers={"Content-Type": "application/json"}))


def bad_requests(model: str) -> list[tuple[str, bytes]]:
    """Malformed JSON, bodies too big or too deep, and fields of the wrong type or out of range: each a 4xx."""
    def chat(**fields) -> bytes:
        return json.dumps({"messages": [{"role": "user", "content": "Hi"}], "max_tokens": 4, **fields}).encode()

    return [
        (CHAT, b'{"messages": [{"role": "user", "content": "Hi"}'), (CHAT, b"\xff\xfe\x00garbage"),
        (CHAT, b"[" * 100_000 + b"]" * 100_000), (CHAT, b"x" * (5 * 2**20)), (CHAT, b"null"),
        (CHAT, chat(messages=[{"role": "user", "content": "Hi " * 1_000_000}])),
        (CHAT, chat(n=10**6)), (CHAT, chat(temperature="hot")), (CHAT, chat(top_p=2)), (CHAT, chat(seed=2**70)),
        (CHAT, chat(stop=["x"] * 1000)), (CHAT, chat(logprobs=True, top_logprobs=10**6)),
        (CHAT, chat(messages=[{"role": "wizard", "content": "Hi"}])), (CHAT, chat(frobnicate=1)),
        (CHAT, chat(max_tokens=-5)), (COMPLETIONS, b'{"prompt": "x", "max_tokens": NaN}'),
        (COMPLETIONS, json.dumps({"prompt": ["x"] * 10_000, "max_tokens": 1}).encode()),
        ("/api/chat", b"[1, 2, 3]"), ("/api/chat", json.dumps({"model": "no-such-model", "messages": []}).encode()),
        ("/api/generate", json.dumps({"model": model, "prompt": "x", "options": {"temperature": "hot"}}).encode()),
        ("/api/conversations", b'{"system_prompt": '),
        ("/api/conversations", json.dumps({"settings": {"max_tokens": -1}}).encode()),
    ]


def settled(server: Server) -> tuple[int, float]:
    """The KV blocks still held once no request runs (polled for SETTLE_S at most), and the seconds it took."""
    started = time.monotonic()
    while True:
        metrics = server.metrics()
        held = int(metrics["localchat_kv_blocks_used"])
        if not (held or metrics["localchat_requests_running"]) or time.monotonic() - started > SETTLE_S:
            return held, round(time.monotonic() - started, 2)
        time.sleep(0.1)


def answers(server: Server) -> bool:
    with server.client() as api:
        reply = api.post(CHAT, json={"messages": [{"role": "user", "content": "Hi"}], "max_tokens": 8})
    return reply.status_code == 200 and bool(reply.json()["choices"][0]["message"]["content"])


def saved_content(db: Path, message_id: str) -> str:
    """A reply's text as the server's store holds it now (read-only, beside the writing server)."""
    with contextlib.closing(sqlite3.connect(f"file:{db}?mode=ro", uri=True, timeout=30)) as store:
        return store.execute("SELECT content FROM messages WHERE id = ?", (message_id,)).fetchone()[0]


def conversation_events(api: httpx.Client, path: str, body: dict):
    with api.stream("POST", path, json=body) as response:
        response.raise_for_status()
        yield from data_events(response)


def kill_mid_reply(server: Server) -> tuple[Server, dict]:
    """A turn, then a long reply killed (SIGKILL) once the store has saved its text twice; the server started again on
    the same home, the reply must be there as far as it was saved (interrupted), the turn before as it was."""
    db = server.home / "data" / "localchat.db"
    with server.client() as api:
        cid = api.post("/api/conversations", json={}).json()["id"]
        base = f"/api/conversations/{cid}"
        list(conversation_events(api, f"{base}/messages", {"content": "Hi", "settings": {"max_tokens": 16}}))
        before = api.get(base).json()["messages"]
        text, saves = "", [""]
        for event in conversation_events(api, f"{base}/messages", {"content": STORY[0]["content"], "settings": {
                "max_tokens": LONG, "ignore_eos": True, "temperature": 0}}):
            if event["type"] == "start":
                reply_id = event["message_ids"][0]
            if event["type"] != "delta":
                continue
            text += event["text"]
            if (saved := saved_content(db, reply_id)) != saves[-1]:
                saves.append(saved)
            if len(saves) > 2:
                server.process.kill()
                break
    server.process.wait()
    server.log.close()
    log = (server.home / "serve.log").read_text(errors="replace")
    server = Server(server.home, free_port())
    with server.client() as api:
        after = {m["id"]: m for m in api.get(base).json()["messages"]}
    reply = after.get(reply_id, {})
    return server, {
        "streamed_chars": len(text), "saved_chars_at_kill": len(saves[-1]),
        "restored_chars": len(reply.get("content", "")), "restored_finish_reason": reply.get("finish_reason"),
        "restored_as_saved": reply.get("content", "").startswith(saves[-1]) and text.startswith(reply.get("content")),
        "earlier_messages_intact": all(after.get(m["id"], {}).get("content") == m["content"] for m in before),
        "tracebacks_in_log_before_kill": log.count("Traceback"),
    }


def store_long_messages(db: Path, count: int, chars: int) -> str:
    """A conversation of `count` user messages of `chars` characters each (more than a chat of the embedded model
    holds: written to the server's store directly, as a long chat of a bigger model would have left them)."""
    words = "the quick brown fox jumps over the lazy dog while paris sleeps and prime numbers count".split()
    text = " ".join(words[i % len(words)] for i in range(chars // 5))[:chars]
    with contextlib.closing(Store(db)) as store:
        conversation = store.create_conversation("long messages", "", SamplingSettings())
        parent = None
        for k in range(count):
            message = Message(id=new_id("m"), conversation_id=conversation.id, parent_id=parent, role="user",
                              content=f"{text} number{k}", created_at=time.time())
            parent = store.add_message(message, []).id
    return conversation.id


def many_tools(count: int) -> list[dict]:
    """Functions whose parameters a grammar must follow: a bounded string, a bounded number, an enum of its own
    (about 100 tokens of the prompt each: the embedded model's template teaches them in a system message)."""
    return [{"type": "function", "function": {"name": f"tool_{i}", "parameters": {
        "type": "object", "required": ["q"], "properties": {
            "q": {"type": "string", "maxLength": 40}, "n": {"type": "integer", "minimum": 0, "maximum": i + 1},
            "mode": {"enum": ["a", "b", f"mode_{i}"]}}}}} for i in range(count)]


def search_and_grammar(server: Server, tally: Tally) -> dict:
    """A stream's largest gap between two tokens while three searches over 2 MB of chats run, and while a request
    with 25 tools is answered (its grammar compiled, then its ~2,500-token prompt prefilled beside the stream), against
    its largest gap in the quiet second before. The search and the compile run off the event loop and the engine's
    thread (tests/app/test_isolation.py): the searches' bar is the quiet gap and GAP_BAR_S; the tool request's, the
    step limit and GAP_BAR_S (beside decodes a prompt waiting for its first token stretches a step up to the limit,
    by design: the engine's StepPace)."""
    store_long_messages(server.home / "data" / "localchat.db", 8, 250_000)
    normal = NormalStream(server)
    normal.start()
    normal.first_token.wait(60)
    time.sleep(QUIET_S + 0.5)
    started = time.monotonic()
    with server.client() as api:
        for query in SEARCHES:
            hits = api.get("/api/search", params={"q": query, "limit": 50})
            if hits.status_code != 200 or len([h for h in hits.json() if h["conversation_title"] == "long messages"
                                               ]) != 8:
                tally.error(f"search {query!r}: {hits.status_code} {hits.text[:200]}")
        searched = time.monotonic()
        tools = api.post(CHAT, json={"messages": [{"role": "user", "content": "Use a tool."}],
                                     "tools": many_tools(25), "tool_choice": "required", "max_tokens": 8})
        if tools.status_code != 200:
            tally.error(f"25 tools: {tools.status_code} {tools.text[:200]}")
    ended = time.monotonic()
    normal.stop.set()
    normal.join()
    if normal.broken:
        tally.error(f"the stream beside the search and the grammar: {normal.broken}")
    quiet = normal.largest_gap(started - QUIET_S, started)
    return {"searches_s": round(searched - started, 2), "tool_request_s": round(ended - searched, 2),
            "tool_prompt_tokens": tools.json()["usage"]["prompt_tokens"] if tools.status_code == 200 else None,
            "largest_gap_quiet_s": round(quiet, 3),
            "largest_gap_searching_s": round(normal.largest_gap(started, searched), 3),
            "searching_bar_s": round(quiet + GAP_BAR_S, 3),
            "largest_gap_tool_request_s": round(normal.largest_gap(searched, ended), 3),
            "tool_request_bar_s": EngineConfig().step_limit_s + GAP_BAR_S}


class Poller(threading.Thread):
    """A client that asks for `path` every `every` seconds (0: as soon as it has its answer) and gives up on an
    answer after POLL_GIVE_UP_S, until told to stop."""

    def __init__(self, server: Server, path: str, every: float):
        super().__init__()
        self.server, self.path, self.every = server, path, every
        self.outcomes, self.slowest, self.stop = Counter(), 0.0, threading.Event()

    def run(self) -> None:
        with httpx.Client(timeout=POLL_GIVE_UP_S) as client:
            while not self.stop.is_set():
                asked = time.monotonic()
                try:
                    self.outcomes[status_class(client.get(f"{self.server.url}{self.path}"))] += 1
                except httpx.TimeoutException:
                    self.outcomes["gave up"] += 1
                self.slowest = max(self.slowest, time.monotonic() - asked)
                self.stop.wait(self.every)


def lone_prefills_beside_pollers(server: Server, tally: Tally, runs: int, words: int) -> dict:
    """`runs` whole replies to prompts of `words` random words (a fresh prefill each: nothing cached), one at a time
    and alone in the engine, so that its steps take whole 2,048-token chunks (seconds here: nothing decodes beside
    them to pace them), while clients poll /health and /metrics and give up on slow answers. A /metrics that waited
    for such a step, given up, ended every running reply (issue 53): each reply must come whole."""
    pollers = [Poller(server, "/health", 0.0) for _ in range(HEALTH_POLLERS)] + [Poller(server, "/metrics", 1.0)]
    for poller in pollers:
        poller.start()
    rng, seconds, failed, prompt_tokens = random.Random(53), [], 0, 0
    with server.client() as api:
        for _ in range(runs):
            text = " ".join(rng.choice(WORDS) for _ in range(words))
            question = f"{text}\n\nSummarize this in one line."
            asked = time.monotonic()
            reply = api.post(CHAT, timeout=600, json={"messages": [{"role": "user", "content": question}],
                                                      "max_tokens": 16})
            seconds.append(round(time.monotonic() - asked, 1))
            if reply.status_code != 200 or not reply.json()["choices"][0]["message"]["content"]:
                failed += 1
                tally.error(f"a long prefill's reply: {reply.status_code} {reply.text[:200]}")
            else:
                prompt_tokens = reply.json()["usage"]["prompt_tokens"]
    for poller in pollers:
        poller.stop.set()
        poller.join()
    health, metrics = sum((p.outcomes for p in pollers[:-1]), Counter()), pollers[-1].outcomes
    return {"prefills": runs, "prompt_tokens_each": prompt_tokens, "reply_seconds": seconds,
            "failed_replies": failed, "health_polls": dict(health), "metrics_polls": dict(metrics),
            "slowest_health_s": round(max(p.slowest for p in pollers[:-1]), 3),
            "slowest_metrics_s": round(pollers[-1].slowest, 3)}


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("--clients", type=int, default=4)
    parser.add_argument("--cut-streams", type=int, default=200)
    parser.add_argument("--give-ups", type=int, default=40)
    parser.add_argument("--bad", type=int, default=60)
    parser.add_argument("--prefill-runs", type=int, default=5)
    parser.add_argument("--prefill-words", type=int, default=2000)
    parser.add_argument("--cache-dir", default="~/.cache/localchat", help="where the converted model is kept")
    args = parser.parse_args()
    root = Path(tempfile.mkdtemp(prefix="localchat-hostile-"))
    server = Server(make_home(root, args.cache_dir), free_port())
    tally = Tally()
    try:
        model = httpx.get(f"{server.url}/health").json()["model"]
        answers(server)  # warm-up
        load_at_start = os.getloadavg()[0]
        normal = NormalStream(server)
        normal.start()
        normal.first_token.wait(60)
        time.sleep(QUIET_S + 0.5)
        load_start = time.monotonic()
        Hostile(server, tally, args, model).run(args.clients)
        load_end = time.monotonic()
        normal.stop.set()
        normal.join()
        blocks_held, settle_s = settled(server)
        still_answers = answers(server)
        beside_search = search_and_grammar(server, tally)
        beside_pollers = lone_prefills_beside_pollers(server, tally, args.prefill_runs, args.prefill_words)
        blocks_held_after_all = settled(server)[0]
        server, kill = kill_mid_reply(server)
        log = (server.home / "serve.log").read_text(errors="replace")
    finally:
        server.stop()
        shutil.rmtree(root, ignore_errors=True)
    rows = [{"kind": kind, "requests": sum(by.values()), **dict(sorted(by.items()))}
            for kind, by in sorted(tally.counts.items())]
    totals = sum((Counter(by) for by in tally.counts.values()), Counter())
    gap_under_load = normal.largest_gap(load_start, load_end)
    summary = {
        "hostile_requests": sum(totals.values()), "clients": args.clients,
        "load_seconds": round(load_end - load_start, 1),
        "by_outcome": dict(sorted(totals.items())), "server_errors_5xx": totals.get("5xx", 0),
        "errors": len(tally.errors), "broken_normal_stream": normal.broken,
        "normal_stream_deltas": len(normal.times),
        "largest_gap_quiet_s": round(normal.largest_gap(load_start - QUIET_S, load_start), 3),
        "largest_gap_under_load_s": round(gap_under_load, 3), "gap_bar_s": GAP_BAR_S,
        "kv_blocks_held_after": blocks_held, "seconds_until_freed": settle_s, "engine_still_answers": still_answers,
        "stream_beside_search_and_grammar": beside_search, "lone_prefills_beside_pollers": beside_pollers,
        "kv_blocks_held_after_all": blocks_held_after_all,
        "kill_9": kill, "tracebacks_in_log_after_restart": log.count("Traceback"),
        "load_average_at_start_and_end": [round(load_at_start, 2), round(os.getloadavg()[0], 2)],
        "first_errors": tally.errors[:10],
    }
    report("hostile_load", rows, summary)
    failed = (tally.errors or normal.broken or gap_under_load >= GAP_BAR_S or blocks_held or not still_answers
              or beside_search["largest_gap_searching_s"] >= beside_search["searching_bar_s"]
              or beside_search["largest_gap_tool_request_s"] >= beside_search["tool_request_bar_s"]
              or beside_pollers["failed_replies"] or blocks_held_after_all
              or kill["restored_finish_reason"] != "interrupted" or not kill["restored_as_saved"]
              or not kill["earlier_messages_intact"])
    sys.exit(1 if failed else 0)


if __name__ == "__main__":
    main()
