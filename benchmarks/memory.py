"""Memory of a GGUF model against its file's size: the peak resident memory (VmHWM) of the first load (packing the
file into the cache), of a later load (reading the cache), and of `localchat serve` after a few replies, each in a
fresh process with the default configuration. Beside each: the same process's memory with the libraries
imported and no model (the Python, torch and transformers runtime), and what is above it.

    python benchmarks/memory.py [MODEL.gguf ...]      (default: the embedded model)
    python benchmarks/synthetic_gguf.py /tmp/synthetic-1b.gguf && python benchmarks/memory.py /tmp/synthetic-1b.gguf
"""

import argparse
import json
import os
import subprocess
import sys
import tempfile
from pathlib import Path

from common import Server, report

LOAD = """
import json, sys, time
started = time.monotonic()
from localchat.engine import LLM, SamplingParams
llm = LLM(None if sys.argv[1] == "embedded" else sys.argv[1])
loaded = time.monotonic() - started
llm.generate([1, 2, 3], SamplingParams(max_tokens=4))
peak = next(int(line.split()[1]) for line in open("/proc/self/status") if line.startswith("VmHWM:"))
print(json.dumps({"seconds": round(loaded, 2), "peak_mb": round(peak / 1024, 1), "packed": llm.engine.packed}))
"""
RUNTIME = """
import json
import torch, transformers, localchat.engine.llm_engine, localchat.app.server.app
peak = next(int(line.split()[1]) for line in open("/proc/self/status") if line.startswith("VmHWM:"))
print(json.dumps({"peak_mb": round(peak / 1024, 1)}))
"""


def run(code: str, *args: str, env: dict) -> dict:
    out = subprocess.run([sys.executable, "-c", code, *args], env=env, capture_output=True, text=True, check=True)
    return json.loads(out.stdout.strip().splitlines()[-1])


def serve_peak(model: str, home: Path) -> tuple[float, float]:
    """`localchat serve` after three replies: (peak resident MB, KV cache MB in use by then)."""
    server = Server(home, 8795, [] if model == "embedded" else ["--model", model])
    try:
        with server.client() as client:
            for question in ("Hi!", "Name three rivers.", "Write a haiku about memory."):
                client.post("/v1/chat/completions", timeout=300,
                            json={"messages": [{"role": "user", "content": question}], "max_tokens": 32})
        metrics = server.metrics()
        block_bytes = metrics["localchat_kv_cache_bytes"] / metrics["localchat_kv_blocks_total"]
        touched = metrics["localchat_kv_blocks_cached"] + metrics["localchat_kv_blocks_used"]
        return round(server.rss_mb("VmHWM"), 1), round(touched * block_bytes / 2**20, 1)
    finally:
        server.stop()


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("models", nargs="*", default=["embedded"])
    args = parser.parse_args()
    rows = []
    for model in args.models:
        from localchat.engine.model_catalog import embedded_gguf_path

        path = embedded_gguf_path() if model == "embedded" else Path(model)
        file_mb = path.stat().st_size / 2**20
        with tempfile.TemporaryDirectory(prefix="localchat-memory-") as home:
            env = {**os.environ, "LOCALCHAT_HOME": home, "OMP_WAIT_POLICY": "PASSIVE"}
            runtime = run(RUNTIME, env=env)["peak_mb"]
            first = run(LOAD, model, env=env)
            later = run(LOAD, model, env=env)
            serving, kv_mb = serve_peak(model, Path(home))
        rows.append({"model": path.name, "file_mb": round(file_mb, 1), "runtime_mb": runtime,
                     "first_load_s": first["seconds"], "first_load_peak_mb": first["peak_mb"],
                     "later_load_s": later["seconds"], "later_load_peak_mb": later["peak_mb"],
                     "serve_peak_mb": serving, "serve_kv_in_use_mb": kv_mb,
                     "model_above_runtime_x_file": round((later["peak_mb"] - runtime) / file_mb, 2),
                     "serve_above_runtime_x_file": round((serving - runtime - kv_mb) / file_mb, 2),
                     "packed": first["packed"]})
    report("memory", rows, {"bar": "at most 1.3x the file plus the KV cache"})


if __name__ == "__main__":
    main()
