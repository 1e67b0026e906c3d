"""Shared pieces of the benchmarks: the peer (transformers) on the same weights, synthetic chats, reports."""

import json
import os
import platform
import random
import time
from pathlib import Path

import torch

RESULTS = Path(__file__).parent / "results"
WORDS = ("the a cache block token model engine chat reply branch prefix memory paged attention batch request "
         "fast local user turn question answer story river mountain city music garden light window coffee "
         "morning evening friend letter book travel ocean forest winter summer idea reason simple").split()


def set_threads() -> int:
    """All benchmarks run on the same thread count as the peers they are compared with."""
    threads = int(os.environ.get("LOCALCHAT_BENCH_THREADS", os.cpu_count() or 1))
    torch.set_num_threads(threads)
    return threads


def hf_model(dtype: torch.dtype = torch.float32):
    """transformers' model on exactly the engine's weights (the dequantized embedded GGUF)."""
    from transformers import AutoModelForCausalLM

    from localchat.engine.loader import resolve_model

    source = resolve_model(None)
    model = AutoModelForCausalLM.from_pretrained(source.dense_files()[0].parent, dtype=dtype).eval()
    return model, source.tokenizer


def user_text(rng: random.Random, tokenizer, num_tokens: int) -> str:
    """Random words that tokenize to about num_tokens tokens."""
    ids = tokenizer.encode(" ".join(rng.choice(WORDS) for _ in range(num_tokens)))[:num_tokens]
    return tokenizer.decode(ids)


def chat_prompt(tokenizer, text: str) -> list[int]:
    ids = tokenizer.apply_chat_template([{"role": "user", "content": text}], add_generation_prompt=True,
                                        tokenize=True)
    return list(ids["input_ids"] if hasattr(ids, "keys") else ids)


def synthetic_chats(tokenizer, count: int, low: int, high: int, seed: int) -> list[list[int]]:
    """count chat prompts whose lengths are drawn uniformly from [low, high] tokens (template included)."""
    rng = random.Random(seed)
    prompts = []
    for _ in range(count):
        target = rng.randint(low, high)
        ids = chat_prompt(tokenizer, user_text(rng, tokenizer, max(1, target - 30)))
        prompts.append(ids)
    return prompts


class Timer:
    def __enter__(self):
        self.start = time.perf_counter()
        return self

    def __exit__(self, *exc):
        self.seconds = time.perf_counter() - self.start


def machine() -> dict:
    cpu = platform.processor()
    try:
        for line in open("/proc/cpuinfo"):
            if line.startswith("model name"):
                cpu = line.split(":", 1)[1].strip()
                break
    except OSError:
        pass
    return {"cpu": cpu, "threads": torch.get_num_threads(), "torch": torch.__version__,
            "python": platform.python_version(), "date": time.strftime("%Y-%m-%d %H:%M")}


def result_name(benchmark: str, dtype: str, quantization: str) -> str:
    """results/<benchmark>[-<dtype>][-dense]: one file per configuration (float32 on the default weights is the
    plain name; -dense: quantization="none")."""
    return benchmark + (f"-{dtype}" if dtype not in ("float32", None) else "") + (
        "-dense" if quantization == "none" else "")


def report(name: str, rows: list[dict], summary: dict) -> None:
    """Print a table and write results/<name>.json."""
    columns = list(dict.fromkeys(k for row in rows for k in row))
    widths = {c: max(len(c), *(len(_fmt(r.get(c))) for r in rows)) for c in columns}
    print(" | ".join(c.ljust(widths[c]) for c in columns))
    print("-+-".join("-" * widths[c] for c in columns))
    for row in rows:
        print(" | ".join(_fmt(row.get(c)).ljust(widths[c]) for c in columns))
    for key, value in summary.items():
        print(f"{key}: {_fmt(value)}")
    RESULTS.mkdir(exist_ok=True)
    (RESULTS / f"{name}.json").write_text(json.dumps({"machine": machine(), "rows": rows, "summary": summary},
                                                     indent=2))


def _fmt(value) -> str:
    if isinstance(value, float):
        return f"{value:.3g}" if abs(value) < 100 else f"{value:.0f}"
    return "" if value is None else str(value)
