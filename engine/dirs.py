"""Where localchat keeps its files. `LOCALCHAT_HOME` moves all of them under one folder."""

import os
import stat
import threading
from collections.abc import Callable
from pathlib import Path

import platformdirs

APP_NAME = "localchat"


def user_dir(kind: str) -> Path:
    """The folder for `kind` (one of "data", "config", "state", "cache", "runtime"), created on demand and
    private to the user (mode 0700 whatever the umask; an older install's folder is fixed)."""
    if kind not in ("data", "config", "state", "cache", "runtime"):
        raise ValueError(f"unknown directory kind {kind!r}")
    home = os.environ.get("LOCALCHAT_HOME")
    if home:
        path = Path(home).expanduser() / kind
    else:
        path = Path(getattr(platformdirs, f"user_{kind}_dir")(APP_NAME, appauthor=False))
    path.mkdir(mode=0o700, parents=True, exist_ok=True)
    if stat.S_IMODE(path.stat().st_mode) != 0o700:
        path.chmod(0o700)
    return path


def write_atomically(path: Path, write: Callable[[Path], None]) -> None:
    """write(tmp) a file beside `path`, then move it into place: a crash never leaves half a file (a crash's
    temporary file starts with a dot)."""
    tmp = path.with_name(f".{path.name}.{os.getpid()}-{threading.get_ident()}")
    try:
        write(tmp)
        tmp.replace(path)
    finally:
        tmp.unlink(missing_ok=True)
