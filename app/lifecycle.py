"""The engine process's life: one per user (a lock), a state file that tells clients where it listens,
starting it in the background, waiting for its model to load, and stopping it cleanly.
"""

import asyncio
import errno
import fcntl
import logging
import os
import signal
import socket
import subprocess
import sys
import time
from collections.abc import Callable
from pathlib import Path

import httpx
import msgspec
import uvicorn

from localchat.app import settings as paths
from localchat.app.protocol import Health
from localchat.app.settings import Settings, url_host

GRACEFUL_SHUTDOWN_S = 10


class EngineState(msgspec.Struct):
    pid: int
    host: str
    port: int
    url: str
    started_at: float
    backend: str


class AlreadyRunning(RuntimeError):
    pass


class EngineServer(uvicorn.Server):
    """uvicorn's server; on SIGTERM or SIGINT it first ends the running requests (their streams finish with
    "abort" and the replies are stored as stopped), then shuts down as usual and exits with status 0."""

    def __init__(self, config: uvicorn.Config, stop_all: Callable):
        super().__init__(config)
        self.stop_all = stop_all

    def handle_exit(self, sig, frame) -> None:
        if self.should_exit:
            self.force_exit = True
            return
        self.should_exit = True
        try:
            loop = asyncio.get_running_loop()
        except RuntimeError:
            return
        loop.call_soon_threadsafe(lambda: loop.create_task(self.stop_all()))


def serve(settings: Settings) -> None:
    """Run the engine process in the foreground until SIGTERM/SIGINT (or `localchat stop`)."""
    logging.basicConfig(level=logging.WARNING, stream=sys.stderr,
                        format="%(asctime)s %(levelname)s %(name)s: %(message)s")
    logging.getLogger("localchat").setLevel(logging.INFO)
    lock = _acquire_lock()
    try:
        sock = _bind(settings.host, settings.port)
        print(f"localchat: serving on {settings.url}", file=sys.stderr, flush=True)
        from localchat.app.server import create_app  # imports the engine (torch): after the quick checks

        app = create_app(settings)
        config = uvicorn.Config(app, log_level="warning", access_log=False, lifespan="on",
                                timeout_graceful_shutdown=GRACEFUL_SHUTDOWN_S)
        server = EngineServer(config, app.state["stop_all"])
        _write_state(EngineState(pid=os.getpid(), host=settings.host, port=sock.getsockname()[1],
                                 url=f"http://{url_host(settings.host)}:{sock.getsockname()[1]}",
                                 started_at=time.time(), backend="remote" if settings.engine_url else "embedded"))
        try:
            server.run(sockets=[sock])
        finally:
            _remove_state()
    finally:
        os.close(lock)


def _acquire_lock() -> int:
    fd = os.open(paths.lock_path(), os.O_RDWR | os.O_CREAT, 0o600)
    try:
        fcntl.flock(fd, fcntl.LOCK_EX | fcntl.LOCK_NB)
    except BlockingIOError:
        os.close(fd)
        state = read_state()
        where = f" (pid {state.pid}, {state.url})" if state else ""
        raise AlreadyRunning(f"an engine is already running{where}; `localchat stop` ends it") from None
    return fd


def _lock_is_free() -> bool:
    fd = os.open(paths.lock_path(), os.O_RDWR | os.O_CREAT, 0o600)
    try:
        fcntl.flock(fd, fcntl.LOCK_EX | fcntl.LOCK_NB)
        return True
    except BlockingIOError:
        return False
    finally:
        os.close(fd)


def _bind(host: str, port: int) -> socket.socket:
    family = socket.AF_INET6 if ":" in host else socket.AF_INET
    sock = socket.socket(family, socket.SOCK_STREAM)
    sock.setsockopt(socket.SOL_SOCKET, socket.SO_REUSEADDR, 1)
    try:
        sock.bind((host.strip("[]"), port))
    except OSError as error:
        sock.close()
        if error.errno == errno.EADDRINUSE:
            raise RuntimeError(f"port {port} on {host} is in use by another program; pick one with --port") from None
        raise RuntimeError(f"cannot listen on {host}:{port}: {error.strerror}") from None
    sock.listen(128)
    sock.set_inheritable(True)
    return sock


def _write_state(state: EngineState) -> None:
    path = paths.state_path()
    tmp = path.with_suffix(".tmp")
    with open(tmp, "wb", opener=_private) as f:
        f.write(msgspec.json.encode(state))
    tmp.replace(path)


def _private(path: str, flags: int) -> int:
    """open()'s opener for a file only the user can read, whatever the umask."""
    fd = os.open(path, flags, 0o600)
    os.fchmod(fd, 0o600)
    return fd


def _remove_state() -> None:
    state = read_state()
    if state is not None and state.pid == os.getpid():
        paths.state_path().unlink(missing_ok=True)


def read_state() -> EngineState | None:
    """The running engine's state file, or None (also for a stale file whose process is gone)."""
    try:
        state = msgspec.json.decode(paths.state_path().read_bytes(), type=EngineState)
    except (FileNotFoundError, msgspec.DecodeError, msgspec.ValidationError):
        return None
    if not _alive(state.pid) or _lock_is_free():
        return None
    return state


def _alive(pid: int) -> bool:
    try:
        os.kill(pid, 0)
    except ProcessLookupError:
        return False
    except PermissionError:
        return True
    return True


def health(url: str, timeout: float = 2.0) -> Health | None:
    try:
        response = httpx.get(f"{url}/health", timeout=timeout)
        return msgspec.json.decode(response.content, type=Health) if response.status_code == 200 else None
    except (httpx.HTTPError, msgspec.DecodeError, msgspec.ValidationError):
        return None


def start_in_background(serve_args: list[str] = ()) -> subprocess.Popen:
    """`localchat serve ARGS` as a detached process; its output goes to the engine log."""
    log = open(paths.log_path(), "ab", opener=_private)
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
            if report.status == "ready":
                return state
            if report.status == "error":
                raise RuntimeError(f"the engine could not load its model: {report.error}")
            if on_progress is not None:
                on_progress(report)
        if process is not None and process.poll() is not None and read_state() is None:
            raise RuntimeError(f"the engine exited ({_last_log_line() or f'status {process.returncode}'}); "
                               f"see {paths.log_path()}")
        time.sleep(0.2)
    raise RuntimeError(f"the engine did not get ready within {timeout:.0f} s; see {paths.log_path()}")


def ensure_engine(serve_args: list[str] = (), on_progress: Callable[[Health], None] | None = None,
                  timeout: float = 600.0) -> EngineState:
    """The running engine, or a new one started in the background; returns once its model is loaded."""
    process = None if read_state() is not None else start_in_background(serve_args)
    return wait_until_ready(on_progress, timeout, process)


def stop_engine(timeout: float = GRACEFUL_SHUTDOWN_S + 20) -> int | None:
    """SIGTERM the running engine and wait until it has exited; its pid, or None if none was running."""
    state = read_state()
    if state is None:
        return None
    os.kill(state.pid, signal.SIGTERM)
    deadline = time.monotonic() + timeout
    while time.monotonic() < deadline:
        if _lock_is_free():  # released when the process exits (even one not yet reaped)
            return state.pid
        time.sleep(0.1)
    raise RuntimeError(f"the engine (pid {state.pid}) did not stop within {timeout:.0f} s")


def _last_log_line() -> str:
    try:
        lines = Path(paths.log_path()).read_text(errors="replace").strip().splitlines()
    except FileNotFoundError:
        return ""
    return lines[-1] if lines else ""
