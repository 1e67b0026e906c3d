"""Turn 9 of a long chat after a restart: the KV cache's disk tier against a warm engine and against recomputing.

An 8-turn conversation of about 4,000 tokens goes through `localchat serve` (its defaults: the disk tier on). Then
turn 9's time to first token is measured three ways, each with a question of its own (so that no turn-9 prompt is
cached by another measurement):
- warm: in the same engine, the history in memory;
- restarted: after `localchat stop` and `localchat serve`, the history read back from the disk tier's files (which
  the OS may still hold in its page cache, as after any restart but a reboot);
- after a reboot: the same with the OS page cache dropped first (where the benchmark may: root), so the blocks come
  from the disk itself;
- recomputed: after another restart with `--kv-disk-gb 0`, the whole history computed again.

    python benchmarks/kv_disk_tier.py [MODEL.gguf ...]     (default: the embedded model)
    python benchmarks/synthetic_gguf.py /tmp/synthetic-1b.gguf && python benchmarks/kv_disk_tier.py embedded \
        /tmp/synthetic-1b.gguf
"""

import argparse
import json
import os
import random
import subprocess
import sys
import tempfile
import time
from pathlib import Path

from common import WORDS, Server, report
from localchat.app.sse import data_lines
from localchat.engine.config import EngineConfig

PORT = 8797
TURNS = 8
USER_WORDS = 330  # about 400 tokens a user message
REPLY_TOKENS = 80


def words(rng: random.Random, count: int) -> str:
    return " ".join(rng.choice(WORDS) for _ in range(count))


def ask(client, messages: list[dict], max_tokens: int) -> tuple[str, float, dict]:
    """(reply, seconds to its first token, usage) of one streamed chat completion."""
    started, first, reply, usage = time.monotonic(), None, "", {}
    body = {"messages": messages, "max_tokens": max_tokens, "temperature": 0, "ignore_eos": True, "stream": True,
            "stream_options": {"include_usage": True}}
    with client.stream("POST", "/v1/chat/completions", json=body) as response:
        assert response.status_code == 200, response.read()
        for data in data_lines(response.iter_lines()):
            chunk = json.loads(data)
            for choice in chunk.get("choices", []):
                if choice["delta"].get("content") and first is None:
                    first = time.monotonic() - started
                reply += choice["delta"].get("content") or ""
            usage = chunk.get("usage") or usage
    return reply, first, usage


def localchat_stop(home: Path, server: Server) -> None:
    subprocess.run([sys.executable, "-m", "localchat.app.cli", "stop"], check=True, capture_output=True,
                   env={**os.environ, "LOCALCHAT_HOME": str(home)})
    server.process.wait(timeout=120)
    server.log.close()


def drop_page_cache() -> bool:
    """Drop the OS page cache (root only), so that files come from the disk; False where this is not allowed."""
    try:
        os.sync()
        Path("/proc/sys/vm/drop_caches").write_text("3\n")
        return True
    except OSError:
        return False


def measure(model: str, rng: random.Random) -> dict:
    args = [] if model == "embedded" else ["--model", model]
    with tempfile.TemporaryDirectory(prefix="localchat-kv-disk-") as folder:
        home = Path(folder)
        server = Server(home, PORT, args)
        history: list[dict] = []
        with server.client() as client:
            for _ in range(TURNS):
                history.append({"role": "user", "content": words(rng, USER_WORDS)})
                reply, _, usage = ask(client, history, REPLY_TOKENS)
                history.append({"role": "assistant", "content": reply})
            turn9 = [history + [{"role": "user", "content": words(rng, 40)}] for _ in range(4)]
            _, warm_s, usage = ask(client, turn9[0], 1)
        restarted = {}
        for i, drop in enumerate((False, True), start=1):  # as after `localchat stop`, then as after a reboot
            localchat_stop(home, server)
            dropped = drop and drop_page_cache()
            server = Server(home, PORT, args)
            with server.client() as client:
                restarted[drop] = ask(client, turn9[i], 1)
        metrics = server.metrics()
        localchat_stop(home, server)
        server = Server(home, PORT, [*args, "--kv-disk-gb", "0"])
        with server.client() as client:
            _, recomputed_s, recomputed_usage = ask(client, turn9[3], 1)
        server.stop()
    (_, restarted_s, restarted_usage), (_, cold_disk_s, _) = restarted[False], restarted[True]
    cached = restarted_usage.get("prompt_tokens_details", {}).get("cached_tokens", 0)
    stored_tokens = metrics["localchat_kv_disk_blocks"] * EngineConfig().block_size
    return {"model": Path(model).name if model != "embedded" else "embedded", "turn9_prompt_tokens":
            usage["prompt_tokens"], "warm_ttft_s": round(warm_s, 3), "restarted_ttft_s": round(restarted_s, 3),
            "recomputed_ttft_s": round(recomputed_s, 3), "restarted_vs_warm": round(restarted_s / warm_s, 2),
            "recompute_vs_restarted": round(recomputed_s / restarted_s, 1),
            "after_reboot_ttft_s": round(cold_disk_s, 3), "after_reboot_vs_warm": round(cold_disk_s / warm_s, 2),
            "restarted_cached_tokens": cached,
            "recomputed_cached_tokens": recomputed_usage.get("prompt_tokens_details", {}).get("cached_tokens", 0),
            "disk_blocks_read": int(metrics["localchat_kv_disk_hits_total"]),
            "disk_bytes_per_token": round(metrics["localchat_kv_disk_bytes"] / stored_tokens),
            "page_cache_dropped": dropped}


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("models", nargs="*", default=["embedded"])
    args = parser.parse_args()
    rng = random.Random(0)
    rows = [measure(model, rng) for model in args.models]
    report("kv_disk_tier", rows, {"bar": "restarted within 1.5x of warm, and at least 10x faster than recomputed",
                                  "met": all(r["restarted_vs_warm"] <= 1.5 and r["recompute_vs_restarted"] >= 10
                                             for r in rows)})


if __name__ == "__main__":
    main()
