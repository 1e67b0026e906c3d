"""The files localchat keeps, where they live, and the API token: shared by the engine process and its
clients. Every file holding chats or secrets is readable by the user alone (folders 0700, files 0600)."""

import os
import secrets
import stat
from pathlib import Path

from localchat.engine.loading.dirs import user_dir


def db_path() -> Path:
    return user_dir("data") / "localchat.db"


def chosen_model_path() -> Path:
    """The model last chosen in a UI (POST /api/models/current): `localchat serve` loads it unless told otherwise."""
    return user_dir("data") / "model"


def token_path() -> Path:
    return user_dir("config") / "token"


def config_dir() -> Path:
    return user_dir("config")


def state_path() -> Path:
    return user_dir("runtime") / "engine.json"


def lock_path() -> Path:
    return user_dir("runtime") / "engine.lock"


def log_path() -> Path:
    return user_dir("state") / "engine.log"


def private_opener(path: str, flags: int) -> int:
    """open()'s opener for a file only the user can read, whatever the umask."""
    fd = os.open(path, flags, 0o600)
    os.fchmod(fd, 0o600)
    return fd


def load_or_create_token(path: Path | None = None) -> str:
    """The API token, created on first use in a file only the user can read (mode 0600)."""
    path = path or token_path()
    try:
        fd = os.open(path, os.O_WRONLY | os.O_CREAT | os.O_EXCL, 0o600)
    except FileExistsError:
        if stat.S_IMODE(path.stat().st_mode) & 0o077:
            path.chmod(0o600)
        token = path.read_text().strip()
        if not token:
            raise RuntimeError(f"the token file {path} is empty; delete it and a new token is created") from None
        return token
    token = secrets.token_urlsafe(32)
    with os.fdopen(fd, "w") as f:
        f.write(token + "\n")
    return token
