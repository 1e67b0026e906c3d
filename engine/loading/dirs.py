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
    private_folder(path)
    if stat.S_IMODE(path.stat().st_mode) != 0o700:
        path.chmod(0o700)
    return path


def private_folder(path: Path) -> Path:
    """`path` and every missing folder above it, created private to the user (0700, whatever the umask)."""
    for folder in [*reversed(path.parents), path]:
        if not folder.exists():
            try:
                folder.mkdir(mode=0o700)
            except FileExistsError:  # made by another process meanwhile
                continue
            folder.chmod(0o700)
    return path


def write_atomically(path: Path, write: Callable[[Path], None]) -> None:
    """write(tmp) a file beside `path`, then move it into place, private to the user (0600, whatever the umask): a
    crash never leaves half a file (a crash's temporary file starts with a dot)."""
    tmp = path.with_name(f".{path.name}.{os.getpid()}-{threading.get_ident()}")
    try:
        os.close(os.open(tmp, os.O_WRONLY | os.O_CREAT | os.O_TRUNC, 0o600))  # write(tmp) keeps the mode
        write(tmp)
        tmp.chmod(0o600)  # in case write(tmp) made the file anew
        tmp.replace(path)
    finally:
        tmp.unlink(missing_ok=True)
