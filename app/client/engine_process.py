"""The engine process from a client's side: find the running one, start one in the background, wait until its
model is loaded, stop it (the engine's own side: server/process.py)."""

import os
import signal
import subprocess
import sys
import time
from collections.abc import Callable
from pathlib import Path

import httpx
import msgspec

from localchat.app import paths
from localchat.app.engine_state import EngineState, lock_is_free, read_state
from localchat.app.protocol.system import Health

STOP_TIMEOUT_S = 30  # the engine's graceful shutdown (10 s) and some
POLL_S = 0.05  # how often a client waiting for the engine asks it again (a start takes about 2 s)


def health(url: str, timeout: float = 2.0) -> Health | None:
    try:
        response = httpx.get(f"{url}/health", timeout=timeout)
        return msgspec.json.decode(response.content, type=Health) if response.status_code == 200 else None
    except (httpx.HTTPError, msgspec.DecodeError, msgspec.ValidationError):
        return None


def start_in_background(serve_args: list[str] = ()) -> subprocess.Popen:
    """`localchat serve ARGS` as a detached process; its output goes to the engine log."""
    log = open(paths.log_path(), "ab", opener=paths.private_opener)
    try:
        return subprocess.Popen([sys.executable, "-m", "localchat.app.cli", "serve", *serve_args],
                                stdin=subprocess.DEVNULL, stdout=log, stderr=subprocess.STDOUT,
                                start_new_session=True)
    finally:
        log.close()


def wait_until_ready(on_progress: Callable[[Health], None] | None = None, timeout: float = 600.0,
                     process: subprocess.Popen | None = None) -> EngineState:
    """Poll the engine's /health until its model is loaded; on_progress sees each loading report."""
    deadline = time.monotonic() + timeout
    while time.monotonic() < deadline:
        state = read_state()
        report = health(state.url) if state else None
        if report is not None:
            if report.status in ("ready", "unloaded"):  # unloaded: the model loads again with the first request
                return state
            if report.status == "error":
                raise RuntimeError(f"the engine failed: {report.error}")
            if on_progress is not None:
                on_progress(report)
        if process is not None and process.poll() is not None and read_state() is None:
            raise RuntimeError(f"the engine exited ({_last_log_line() or f'status {process.returncode}'}); "
                               f"see {paths.log_path()}")
        time.sleep(POLL_S)
    raise RuntimeError(f"the engine did not get ready within {timeout:.0f} s; see {paths.log_path()}")


def start_unless_running(serve_args: list[str] = ()) -> subprocess.Popen | None:
    """A new engine in the background, unless one runs or is starting (it holds the lock before anything slow)."""
    return start_in_background(serve_args) if read_state() is None and lock_is_free() else None


def ensure_engine(serve_args: list[str] = (), on_progress: Callable[[Health], None] | None = None,
                  timeout: float = 600.0, started: subprocess.Popen | None = None) -> EngineState:
    """The running engine, or a new one started in the background (or `started`, one that a caller already started
    with start_unless_running); returns once its model is loaded."""
    process = started or start_unless_running(serve_args)
    return wait_until_ready(on_progress, timeout, process)


def stop_engine(timeout: float = STOP_TIMEOUT_S) -> int | None:
    """SIGTERM the running engine and wait until it has exited; its pid, or None if none was running."""
    state = read_state()
    if state is None:
        return None
    os.kill(state.pid, signal.SIGTERM)
    deadline = time.monotonic() + timeout
    while time.monotonic() < deadline:
        if lock_is_free():  # released when the process exits (even one not yet reaped)
            return state.pid
        time.sleep(0.1)
    raise RuntimeError(f"the engine (pid {state.pid}) did not stop within {timeout:.0f} s")


def _last_log_line() -> str:
    try:
        lines = Path(paths.log_path()).read_text(errors="replace").strip().splitlines()
    except FileNotFoundError:
        return ""
    return lines[-1] if lines else ""
