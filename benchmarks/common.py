"""Shared pieces of the benchmarks: the peer (transformers) on the same weights, synthetic chats, reports, and a
`localchat serve` process."""

import json
import os
import platform
import random
import subprocess
import sys
import time
from pathlib import Path

import httpx
import torch

RESULTS = Path(__file__).parent / "results"
STREAM_TIMEOUT_S = 120.0  # a benchmark's reply stream that sends nothing for this long is hung
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

    from localchat.engine.loading.loader import resolve_model

    source = resolve_model(None)
    source.ensure_converted(packed=False)
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


def cpu_description() -> str:
    """The CPU as /proc/cpuinfo names it, with its family and model, the vector extensions the native kernels look
    for, and its cores: "AMD EPYC (family 25, model 1; avx2 fma f16c, no avx512f), 2 cores"."""
    fields = {}
    try:
        for line in open("/proc/cpuinfo"):
            key, _, value = line.partition(":")
            fields.setdefault(key.strip(), value.strip())
    except OSError:
        return platform.processor()
    flags = set(fields.get("flags", "").split())
    present = [f for f in ("avx512f", "avx512_vnni", "avx512_bf16", "amx_int8", "avx2", "fma", "f16c") if f in flags]
    missing = "" if "avx512f" in flags else ", no avx512f"
    family, model = fields.get("cpu family", "?"), fields.get("model", "?")
    return (f"{fields.get('model name', '?')} (family {family}, model {model}; {' '.join(present)}{missing}), "
            f"{os.cpu_count()} cores")


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


class Server:
    """`localchat serve` in its own process and LOCALCHAT_HOME, ready when constructed (its log: home/serve.log)."""

    def __init__(self, home: Path, port: int, extra_args: list[str] = ()):
        self.home, self.port = home, port
        self.url = f"http://127.0.0.1:{port}"
        env = {**os.environ, "LOCALCHAT_HOME": str(home)}
        self.log = open(home / "serve.log", "wb")
        self.process = subprocess.Popen([sys.executable, "-m", "localchat.app.cli", "serve", "--port", str(port),
                                         *extra_args], env=env, stdout=self.log, stderr=subprocess.STDOUT)
        deadline = time.monotonic() + 600
        while time.monotonic() < deadline:
            try:
                if httpx.get(f"{self.url}/health", timeout=2).json()["status"] == "ready":
                    break
            except httpx.HTTPError:
                pass
            time.sleep(0.5)
        else:
            raise RuntimeError("the server did not get ready")
        self.token = (home / "config" / "token").read_text().strip()

    def client(self) -> httpx.Client:
        return httpx.Client(base_url=self.url, headers={"Authorization": f"Bearer {self.token}"},
                            timeout=httpx.Timeout(30.0, read=STREAM_TIMEOUT_S))

    def rss_mb(self, field: str = "VmRSS") -> float:
        """Resident memory now (VmRSS) or at its peak (VmHWM)."""
        for line in open(f"/proc/{self.process.pid}/status"):
            if line.startswith(f"{field}:"):
                return int(line.split()[1]) / 1024
        return 0.0

    def metrics(self) -> dict[str, float]:
        text = httpx.get(f"{self.url}/metrics", timeout=30).text
        return {line.split()[0]: float(line.split()[1]) for line in text.splitlines() if line and line[0] != "#"}

    def stop(self) -> None:
        self.process.terminate()
        self.process.wait(timeout=60)
        self.log.close()
