"""How a client finds the running engine process: one process per user holds a lock file, and a state file
tells where it listens. The engine process writes both (server.process); clients read them."""

import fcntl
import os

import msgspec

from localchat.app import paths


class EngineState(msgspec.Struct):
    pid: int
    host: str
    port: int
    url: str
    started_at: float
    backend: str


class AlreadyRunning(RuntimeError):
    pass


def acquire_lock() -> int:
    """The lock's file descriptor, held for the life of the engine process; AlreadyRunning if another holds it."""
    fd = os.open(paths.lock_path(), os.O_RDWR | os.O_CREAT, 0o600)
    try:
        fcntl.flock(fd, fcntl.LOCK_EX | fcntl.LOCK_NB)
    except BlockingIOError:
        os.close(fd)
        state = read_state()
        where = f" (pid {state.pid}, {state.url})" if state else ""
        raise AlreadyRunning(f"an engine is already running{where}; `localchat stop` ends it") from None
    return fd


def lock_is_free() -> bool:
    fd = os.open(paths.lock_path(), os.O_RDWR | os.O_CREAT, 0o600)
    try:
        fcntl.flock(fd, fcntl.LOCK_EX | fcntl.LOCK_NB)
        return True
    except BlockingIOError:
        return False
    finally:
        os.close(fd)


def write_state(state: EngineState) -> None:
    path = paths.state_path()
    tmp = path.with_suffix(".tmp")
    with open(tmp, "wb", opener=paths.private_opener) as f:
        f.write(msgspec.json.encode(state))
    tmp.replace(path)


def remove_state() -> None:
    state = read_state()
    if state is not None and state.pid == os.getpid():
        paths.state_path().unlink(missing_ok=True)


def read_state() -> EngineState | None:
    """The running engine's state file, or None (also for a stale file whose process is gone)."""
    try:
        state = msgspec.json.decode(paths.state_path().read_bytes(), type=EngineState)
    except (FileNotFoundError, msgspec.DecodeError, msgspec.ValidationError):
        return None
    if not _alive(state.pid) or lock_is_free():
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
