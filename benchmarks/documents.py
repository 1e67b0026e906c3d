"""A question about a document, through `localchat serve` with its defaults: the time to the first token of the
answer in a first chat that starts with a ~6,000-token document (its prompt computed), in a second chat on the same
document (its blocks served from memory), and in a chat after the server restarted (from the disk tier).

    .venv/bin/python benchmarks/documents.py [--model PATH.gguf|embedded ...] [--tokens 6000] [--cache-dir DIR]

Each model gets a fresh home (the converted model may come from --cache-dir); the document is synthetic text (the
benchmarks' words, numbered sentences). Writes benchmarks/results/documents.json.
"""

import argparse
import json
import random
import shutil
import sys
import tempfile
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

from common import WORDS

QUESTION = "Which sentence of the document mentions the river first? Answer with its number."


def document_text(num_tokens: int) -> str:
    """Numbered sentences of random words, about num_tokens tokens (at ~1.3 tokens a word)."""
    rng = random.Random(0)
    sentences, words = [], 0
    while words < num_tokens / 1.3:
        sentence = " ".join(rng.choice(WORDS) for _ in range(rng.randint(8, 16)))
        sentences.append(f"{len(sentences) + 1}. {sentence.capitalize()}.")
        words += sentence.count(" ") + 2
    return "\n".join(sentences)


def ask(http: httpx.Client, document_id: str) -> dict:
    """A new chat that starts with the document, one question: its time to first token and cached tokens."""
    conversation = http.post("/api/conversations", json={"documents": [document_id], "settings": {
        "temperature": 0.0, "max_tokens": 16}}).json()["id"]
    started, first, reply = time.perf_counter(), None, None
    with http.stream("POST", f"/api/conversations/{conversation}/messages", json={"content": QUESTION}) as response:
        response.raise_for_status()
        for line in response.iter_lines():
            if not line.startswith("data: "):
                continue
            event = json.loads(line[6:])
            if event["type"] == "delta" and first is None:
                first = time.perf_counter()
            elif event["type"] == "done":
                reply = event["message"]
    stats = reply["stats"]
    return {"ttft_s": round(first - started, 3), "prompt_tokens": stats["prompt_tokens"],
            "cached_tokens": stats["cached_tokens"]}


def run(model: str | None, args, work: Path) -> dict:
    home = make_home(Path(tempfile.mkdtemp(prefix="documents-", dir=work)), args.cache_dir)
    flags = ["--model", model] if model else []
    results = {"load_before": load()}
    with localchat_serve(home, flags, work / "serve.log") as serve:
        results["command"] = serve.command
        http = localchat_client(home, serve.port)
        uploaded = http.post("/api/documents", files={"file": ("notes.txt", document_text(args.tokens).encode())})
        uploaded.raise_for_status()
        document = uploaded.json()
        results["document_tokens"] = document["tokens"]
        results["first_chat"] = ask(http, document["id"])
        results["second_chat"] = ask(http, document["id"])
        log(f"{model or 'embedded'}: first {results['first_chat']}, second {results['second_chat']}")
    with localchat_serve(home, flags, work / "serve.log") as serve:  # the same home: its store and disk tier
        results["after_restart"] = ask(localchat_client(home, serve.port), document["id"])
        log(f"{model or 'embedded'}: after a restart {results['after_restart']}")
    results["load_after"] = load()
    shutil.rmtree(home, ignore_errors=True)
    return results


def main() -> int:
    parser = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("--model", action="append", default=None, help="a GGUF file, or 'embedded' (repeatable)")
    parser.add_argument("--tokens", type=int, default=6000)
    parser.add_argument("--cache-dir", default=None, help="a kept cache of converted models")
    args = parser.parse_args()
    work = Path(tempfile.mkdtemp(prefix="documents-bench-"))
    runs = {}
    for model in args.model or ["embedded"]:
        runs[model] = run(None if model == "embedded" else model, args, work)
        r = runs[model]
        print(f"{model}: a {r['document_tokens']}-token document, time to first token: first chat "
              f"{r['first_chat']['ttft_s']} s, second {r['second_chat']['ttft_s']} s "
              f"({r['second_chat']['cached_tokens']} cached), after a restart {r['after_restart']['ttft_s']} s "
              f"({r['after_restart']['cached_tokens']} cached)")
    shutil.rmtree(work, ignore_errors=True)
    write_result("documents", {"runs": runs})
    return 0


if __name__ == "__main__":
    sys.exit(main())
