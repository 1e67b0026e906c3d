"""Memory of a GGUF model against its file's size: the peak resident memory (VmHWM) of the first load (packing the
file into the cache), of a later load (reading the cache), and of `localchat serve` after a few replies (its peak,
and its resident memory then: steady), each in a fresh process with the default configuration. Beside each: the
same process's memory with the libraries imported and no model (the Python, torch and transformers runtime), what is
above it, the KV cache's size (sized from the machine, touched only as blocks are used) and its blocks in use.

    python benchmarks/memory.py [MODEL ...]      (default: embedded gemma3-270m)

MODEL: a GGUF file, "embedded", or "gemma3-270m": synthetic_gguf.py's Gemma 3 270M Q4_K_M shape, built here (a
real file of that shape is 253 MB, its tied embedding 262,144 x 640). The 1B Llama shape:
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
import torch, transformers, localchat.engine.frontend.llm_engine, localchat.app.server.app
peak = next(int(line.split()[1]) for line in open("/proc/self/status") if line.startswith("VmHWM:"))
print(json.dumps({"peak_mb": round(peak / 1024, 1)}))
"""


def run(code: str, *args: str, env: dict) -> dict:
    out = subprocess.run([sys.executable, "-c", code, *args], env=env, capture_output=True, text=True, check=True)
    return json.loads(out.stdout.strip().splitlines()[-1])


def serve_memory(model: str, home: Path) -> dict:
    """`localchat serve` after three replies: its peak and resident MB, the KV cache's MB and those in use."""
    server = Server(home, 8795, [] if model == "embedded" else ["--model", model])
    try:
        with server.client() as client:
            for question in ("Hi!", "Name three rivers.", "Write a haiku about memory."):
                client.post("/v1/chat/completions", timeout=300,
                            json={"messages": [{"role": "user", "content": question}], "max_tokens": 32})
        metrics = server.metrics()
        block_bytes = metrics["localchat_kv_cache_bytes"] / metrics["localchat_kv_blocks_total"]
        touched = metrics["localchat_kv_blocks_cached"] + metrics["localchat_kv_blocks_used"]
        return {"peak_mb": round(server.rss_mb("VmHWM"), 1), "steady_mb": round(server.rss_mb(), 1),
                "kv_cache_mb": round(metrics["localchat_kv_cache_bytes"] / 2**20),
                "kv_in_use_mb": round(touched * block_bytes / 2**20, 1)}
    finally:
        server.stop()


def model_file(model: str, folder: Path) -> tuple[str, Path]:
    """The argument to load `model` by, and its file (gemma3-270m built in `folder`)."""
    from localchat.engine.loading.model_catalog import embedded_gguf_path

    if model == "embedded":
        return model, embedded_gguf_path()
    if model == "gemma3-270m":
        path = folder / "gemma-3-270m-synthetic-Q4_K_M.gguf"
        subprocess.run([sys.executable, str(Path(__file__).with_name("synthetic_gguf.py")), str(path), "--shape",
                        model], check=True, capture_output=True)
        return str(path), path
    return model, Path(model)


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("models", nargs="*", default=["embedded", "gemma3-270m"])
    args = parser.parse_args()
    rows = []
    for model in args.models:
        with tempfile.TemporaryDirectory(prefix="localchat-memory-") as home:
            model, path = model_file(model, Path(home))
            file_mb = path.stat().st_size / 2**20
            env = {**os.environ, "LOCALCHAT_HOME": home, "OMP_WAIT_POLICY": "PASSIVE"}
            runtime = run(RUNTIME, env=env)["peak_mb"]
            first = run(LOAD, model, env=env)
            later = run(LOAD, model, env=env)
            serving = serve_memory(model, Path(home))
        rows.append({"model": path.name, "file_mb": round(file_mb, 1), "runtime_mb": runtime,
                     "first_load_s": first["seconds"], "first_load_peak_mb": first["peak_mb"],
                     "later_load_s": later["seconds"], "later_load_peak_mb": later["peak_mb"],
                     "serve_peak_mb": serving["peak_mb"], "serve_steady_mb": serving["steady_mb"],
                     "serve_kv_cache_mb": serving["kv_cache_mb"], "serve_kv_in_use_mb": serving["kv_in_use_mb"],
                     "model_above_runtime_x_file": round((later["peak_mb"] - runtime) / file_mb, 2),
                     "serve_above_runtime_x_file": round(
                         (serving["peak_mb"] - runtime - serving["kv_in_use_mb"]) / file_mb, 2),
                     "packed": first["packed"]})
    report("memory", rows, {"bar": "at most 1.3x the file plus the KV cache"})


if __name__ == "__main__":
    main()
