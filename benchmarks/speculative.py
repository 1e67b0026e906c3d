"""Speculative decoding through the server: decode speed with drafts from the conversation on and off, and
llama-server with each of its draft-free modes, on the same workloads and the same GGUF file, one after another.

    .venv/bin/python benchmarks/speculative.py [--model PATH.gguf|embedded ...] [--cache-dir ~/.cache/localchat]
                                               [--llama-spec none,ngram-simple,...] [--max-tokens 256]

Workloads (one stream each, timed from its first token to its last):
- code_edit: a 15-line function, "rename it and return the whole function" (greedy);
- restate: a paragraph restated word for word (greedy);
- regenerate: a reply at temperature 0.8, then another to the same message with another seed (localchat: the
  conversations API's regenerate, which drafts from the first reply; llama-server: the same request again);
- edit: a limerick asked for, then the message edited (a name changed) and resent with the same seed (localchat:
  an edit, a sibling user message);
- story: free story writing at temperature 0.8;
- chats32 (localchat only): 32 concurrent chats of 64 tokens, output tok/s (`--ab-chats REPS` runs only this, on
  two servers side by side in alternating order, for a figure less at the mercy of one run's noise).
Each server starts fresh for its run. The decode rate is (tokens - 1) / (last token - first token), as the client
sees it; acceptance and draft tokens come from localchat's reply stats, and from llama-server's `timings` where it
reports them. Writes benchmarks/results/speculative.json and prints the ratios.
"""

import argparse
import contextlib
import json
import os
import shutil
import statistics
import sys
import tempfile
import threading
import time
from pathlib import Path

import httpx
from peers import (
    LLAMA_FLAGS,
    embedded_gguf,
    free_port,
    llama_server_path,
    load,
    localchat_serve,
    log,
    make_home,
    process,
    tail,
    wait_ready,
    write_result,
)

CODE = '''def total_price(items, tax_rate, discount=None):
    """The price of a basket of items, with tax and an optional discount."""
    subtotal = 0.0
    for item in items:
        if item.quantity <= 0:
            continue
        subtotal += item.price * item.quantity
    if discount is not None:
        if discount.kind == "percent":
            subtotal -= subtotal * discount.value / 100
        else:
            subtotal -= discount.value
    subtotal = max(subtotal, 0.0)
    tax = subtotal * tax_rate
    return round(subtotal + tax, 2)
'''
PARAGRAPH = ("The lighthouse keeper climbed the one hundred and twelve stairs every evening at dusk. He wound the "
             "clockwork that turned the lens, trimmed the wick, filled the reservoir with oil and polished the great "
             "glass until it shone. Then he sat by the small window with a mug of tea, wrote the weather in his "
             "log book and watched the fishing boats come home one by one, their lamps swaying on the dark water.")
CODE_EDIT = f"Rename the function to compute_total and return the whole function.\n\n```python\n{CODE}```"
RESTATE = f"Restate this paragraph word for word, changing nothing:\n\n{PARAGRAPH}"
EXPLAIN = "Explain in a few sentences what a hash map is and why lookups are fast."
LIMERICK = "Write a limerick about a cat named {name} who loves to sleep in the sun."
STORY = "Write a short story about a lighthouse keeper who finds a message in a bottle."
SPEC_TYPES = ["none", "ngram-simple", "ngram-map-k", "ngram-map-k4v", "ngram-mod", "ngram-cache"]


class Client:
    """One server: its base URL and bearer token, streamed requests timed as the client sees them."""

    def __init__(self, url: str, token: str | None):
        headers = {"Authorization": f"Bearer {token}"} if token else {}
        self.http = httpx.Client(base_url=url, headers=headers, timeout=httpx.Timeout(30, read=600))

    def chat(self, messages: list[dict], max_tokens: int, temperature: float, seed: int) -> dict:
        """One /v1/chat/completions stream: its decode rate, tokens, text and the server's timings. A connection
        the server closed while it was idle (llama-server's keep-alive) is opened again, once."""
        try:
            return self._chat(messages, max_tokens, temperature, seed)
        except httpx.RemoteProtocolError:  # "Server disconnected without sending a response": nothing was sent
            return self._chat(messages, max_tokens, temperature, seed)

    def _chat(self, messages: list[dict], max_tokens: int, temperature: float, seed: int) -> dict:
        body = {"messages": messages, "max_tokens": max_tokens, "temperature": temperature, "seed": seed,
                "stream": True, "stream_options": {"include_usage": True}}
        started, first, last, text, usage, timings = time.perf_counter(), None, None, "", {}, {}
        with self.http.stream("POST", "/v1/chat/completions", json=body) as response:
            response.raise_for_status()
            for line in response.iter_lines():
                if not line.startswith("data: ") or line == "data: [DONE]":
                    continue
                chunk = json.loads(line[6:])
                usage = chunk.get("usage") or usage
                timings = chunk.get("timings") or timings
                for choice in chunk.get("choices") or []:
                    piece = (choice.get("delta") or {}).get("content")
                    if piece:
                        now = time.perf_counter()
                        first, last = first or now, now
                        text += piece
        tokens = usage.get("completion_tokens") or 0
        return {"tokens": tokens, "ttft_s": first - started if first else None, "decode_tps": rate(tokens, first, last),
                "text": text, "draft_tokens": timings.get("draft_n"), "accepted": timings.get("draft_n_accepted")}

    def drafts(self) -> tuple[float, float]:
        """localchat's /metrics: draft tokens scored and kept so far."""
        values = {}
        for line in self.http.get("/metrics").text.splitlines():
            name, _, value = line.partition(" ")
            values[name] = value
        return (float(values["localchat_draft_tokens_total"]), float(values["localchat_accepted_draft_tokens_total"]))

    def counted_chat(self, *args, **kwargs) -> dict:
        """chat, with the draft tokens its request scored and kept (localchat: /metrics before and after)."""
        before = self.drafts()
        result = self.chat(*args, **kwargs)
        after = self.drafts()
        return {**result, "draft_tokens": int(after[0] - before[0]), "accepted": int(after[1] - before[1])}

    def conversation(self, settings: dict) -> str:
        response = self.http.post("/api/conversations", json={"settings": settings})
        response.raise_for_status()
        return response.json()["id"]

    def events(self, path: str, body: dict) -> dict:
        """One /api stream (a message or a regenerate): its reply timed, with its stats."""
        started, first, last, message = time.perf_counter(), None, None, None
        with self.http.stream("POST", path, json=body) as response:
            response.raise_for_status()
            for line in response.iter_lines():
                if not line.startswith("data: "):
                    continue
                event = json.loads(line[6:])
                if event["type"] == "delta":
                    now = time.perf_counter()
                    first, last = first or now, now
                elif event["type"] == "done":
                    message = event["message"]
        stats = message["stats"]
        tokens = stats["completion_tokens"]
        return {"tokens": tokens, "ttft_s": first - started if first else None, "decode_tps": rate(tokens, first, last),
                "text": message["content"], "draft_tokens": stats.get("draft_tokens"),
                "accepted": stats.get("accepted_draft_tokens"), "message_id": message["id"]}


def rate(tokens: int, first: float | None, last: float | None) -> float | None:
    return (tokens - 1) / (last - first) if first and last and last > first and tokens > 1 else None


def workloads(client: Client, localchat: bool, max_tokens: int) -> dict:
    """Every workload on one server, in turn."""
    greedy = {"max_tokens": max_tokens, "temperature": 0.0}
    sampled = {"max_tokens": max_tokens, "temperature": 0.8}
    chat = client.counted_chat if localchat else client.chat
    results = {"code_edit": chat([{"role": "user", "content": CODE_EDIT}], seed=1, **greedy),
               "restate": chat([{"role": "user", "content": RESTATE}], seed=1, **greedy)}
    if localchat:  # the conversations API: regenerate and edit draft from the replies they replace
        cid = client.conversation({**sampled, "seed": 1})
        first = client.events(f"/api/conversations/{cid}/messages", {"content": EXPLAIN})
        results["regenerate"] = client.events(f"/api/conversations/{cid}/messages/{first['message_id']}/regenerate",
                                              {"settings": {**sampled, "seed": 2}})
        cid = client.conversation({**sampled, "seed": 3})
        client.events(f"/api/conversations/{cid}/messages", {"content": LIMERICK.format(name="Tom")})
        results["edit"] = client.events(f"/api/conversations/{cid}/messages",
                                        {"content": LIMERICK.format(name="Tim"), "parent_id": None})
    else:
        client.chat([{"role": "user", "content": EXPLAIN}], seed=1, **sampled)
        results["regenerate"] = client.chat([{"role": "user", "content": EXPLAIN}], seed=2, **sampled)
        client.chat([{"role": "user", "content": LIMERICK.format(name="Tom")}], seed=3, **sampled)
        results["edit"] = client.chat([{"role": "user", "content": LIMERICK.format(name="Tim")}], seed=3, **sampled)
    results["story"] = chat([{"role": "user", "content": STORY}], seed=5, **sampled)
    if localchat:
        results["chats32"] = concurrent_chats(client, 32)
    for result in results.values():
        result.pop("text", None)
        result.pop("message_id", None)
    return results


def concurrent_chats(client: Client, count: int) -> dict:
    """count chats at once, 64 tokens each: output tok/s over the whole run."""
    out: list[dict] = [None] * count

    def one(i: int) -> None:
        out[i] = client.chat([{"role": "user", "content": f"Tell me about the number {i + 7} in two sentences."}],
                             max_tokens=64, temperature=0.8, seed=i)

    started = time.perf_counter()
    threads = [threading.Thread(target=one, args=(i,)) for i in range(count)]
    for thread in threads:
        thread.start()
    for thread in threads:
        thread.join()
    seconds = time.perf_counter() - started
    tokens = sum(r["tokens"] for r in out)
    return {"tokens": tokens, "output_tps": tokens / seconds, "seconds": seconds}


@contextlib.contextmanager
def localchat_server(args, gguf: Path | None, speculative: str, work: Path):
    """`localchat serve --speculative ...` started fresh in its own home: (a client of it, its command)."""
    root = Path(tempfile.mkdtemp(prefix=f"spec-{speculative}-", dir=work))
    home = make_home(root, args.cache_dir)
    flags = ["--speculative", speculative, *(["--model", str(gguf)] if gguf else [])]
    with localchat_serve(home, flags, work / f"localchat-{speculative}.log") as serve:
        yield Client(serve.url, (home / "config" / "token").read_text().strip()), serve.command
    shutil.rmtree(root, ignore_errors=True)


def run_localchat(args, gguf: Path | None, speculative: str, work: Path) -> dict:
    before = load()
    with localchat_server(args, gguf, speculative, work) as (client, command):
        record = {"server": "localchat", "speculative": speculative, "command": command,
                  "workloads": workloads(client, True, args.max_tokens)}
    record["load_before"], record["load_after"] = before, load()
    return record


def ab_chats(args, gguf: Path | None, work: Path) -> dict:
    """32 concurrent chats against two servers running side by side, speculation on and off, in alternating
    order (on, off, then off, on, ...) args.ab_chats times each: output tok/s of every run, and the medians."""
    with localchat_server(args, gguf, "on", work) as (on, _), localchat_server(args, gguf, "off", work) as (off, _):
        clients, runs = {"on": on, "off": off}, {"on": [], "off": []}
        for rep in range(args.ab_chats):
            for name in ("on", "off") if rep % 2 == 0 else ("off", "on"):
                runs[name].append(round(concurrent_chats(clients[name], 32)["output_tps"], 1))
                log(f"32 chats, speculation {name}: {runs[name][-1]} tok/s")
    medians = {name: statistics.median(values) for name, values in runs.items()}
    return {"runs": runs, "medians": medians, "on_over_off": medians["on"] / medians["off"]}


def run_llama(args, gguf: Path, spec_type: str, work: Path) -> dict:
    port = free_port()
    command = [str(args.llama_server), "-m", str(gguf), "-t", str(args.threads), *LLAMA_FLAGS,
               "--host", "127.0.0.1", "--port", str(port), "--spec-type", spec_type]
    log_path = work / f"llama-{spec_type}.log"
    before = load()
    record = {"server": "llama.cpp", "spec_type": spec_type, "command": command}
    with process(command, log_path) as proc:
        log(" ".join(command))
        try:
            wait_ready(f"http://127.0.0.1:{port}/health", proc, log_path, lambda r: r.status_code == 200)
            record["workloads"] = workloads(Client(f"http://127.0.0.1:{port}", None), False, args.max_tokens)
        except (RuntimeError, TimeoutError, httpx.HTTPError) as error:  # a mode that fails is recorded as such
            log(f"llama-server --spec-type {spec_type}: {error!r}")
            record["error"] = f"{error!r}; log: {tail(log_path, 15)}"
    record["load_before"], record["load_after"] = before, load()
    return record


WORKLOADS = ["code_edit", "restate", "regenerate", "edit", "story"]
BARS = {"code_edit": 1.5, "restate": 1.5, "edit": 1.3, "story": 0.95}  # issue 28's, speculation on / off


def table(model: str, runs: list[dict]) -> str:
    """Decode tok/s by workload for every server, localchat's on / off ratio, and on / llama.cpp's best."""
    def tps(run: dict, workload: str):
        return run["workloads"][workload].get("decode_tps")

    on = next(r for r in runs if r.get("speculative") == "on")
    off = next(r for r in runs if r.get("speculative") == "off")
    llamas = [r for r in runs if r["server"] == "llama.cpp" and "workloads" in r]
    header = ["workload", "localchat on", "off", "on / off", "bar", "kept / drafted"]
    header += [f"llama {r['spec_type']}" for r in llamas] + ["on / llama best"]
    lines = [f"### {model}", "", "| " + " | ".join(header) + " |", "|" + "---|" * len(header)]
    failed = [r["spec_type"] for r in runs if "error" in r]
    for workload in WORKLOADS:
        a, b = tps(on, workload), tps(off, workload)
        w = on["workloads"][workload]
        kept = f"{w['accepted']} / {w['draft_tokens']}" if w.get("draft_tokens") else "-"
        best = max((tps(r, workload) or 0 for r in llamas), default=0)
        cells = [workload, fmt(a), fmt(b), fmt(a / b if a and b else None, "x"), fmt(BARS.get(workload), "x"), kept]
        cells += [fmt(tps(r, workload)) for r in llamas] + [fmt(a / best if a and best else None, "x")]
        lines.append("| " + " | ".join(cells) + " |")
    a, b = on["workloads"]["chats32"]["output_tps"], off["workloads"]["chats32"]["output_tps"]
    lines.append(f"| chats32 output tok/s | {fmt(a)} | {fmt(b)} | {fmt(a / b, 'x')} | 1.00x | - |"
                 + " |" * (len(llamas) + 1))
    if failed:
        lines.append(f"\nllama-server failed with --spec-type {', '.join(failed)} (its log is in the JSON)")
    return "\n".join(lines)


def fmt(value, suffix: str = "") -> str:
    return "-" if value is None else f"{value:.2f}{suffix}"


def main() -> int:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--model", action="append", help="a GGUF file, or `embedded`; repeat it (default: embedded)")
    parser.add_argument("--cache-dir", default=None, help="localchat's cache folder to share (converted models)")
    parser.add_argument("--llama-server", default=None)
    parser.add_argument("--llama-spec", default=",".join(SPEC_TYPES), help="llama-server --spec-type values to run")
    parser.add_argument("--max-tokens", type=int, default=256)
    parser.add_argument("--threads", type=int, default=os.cpu_count())
    parser.add_argument("--ab-chats", type=int, default=0, metavar="REPS",
                        help="instead: only 32 concurrent chats, two servers (on, off) side by side, REPS runs each "
                             "in alternating order (benchmarks/results/speculative-ab.json)")
    args = parser.parse_args()
    if args.ab_chats:
        with tempfile.TemporaryDirectory(prefix="speculative-") as tmp:
            ab = {model: ab_chats(args, None if model == "embedded" else Path(model), Path(tmp))
                  for model in args.model or ["embedded"]}
        print(json.dumps(ab, indent=1))
        write_result("speculative-ab", {"ab": ab})
        return 0
    args.llama_server = llama_server_path(args.llama_server)
    meta = {"load_start": load(), "max_tokens": args.max_tokens}
    results, tables = {}, []
    with tempfile.TemporaryDirectory(prefix="speculative-") as tmp:
        for model in args.model or ["embedded"]:
            gguf = None if model == "embedded" else Path(model)
            name = "embedded" if gguf is None else gguf.name
            runs = [run_localchat(args, gguf, "on", Path(tmp)), run_localchat(args, gguf, "off", Path(tmp))]
            for spec_type in args.llama_spec.split(","):
                runs.append(run_llama(args, gguf or embedded_gguf(), spec_type, Path(tmp)))
            results[name] = runs
            tables.append(table(name, runs))
            print(tables[-1], flush=True)
    meta["load_end"] = load()
    write_result("speculative", {**meta, "runs": results, "tables": tables})
    return 0


if __name__ == "__main__":
    sys.exit(main())
