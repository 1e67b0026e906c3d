"""The test suite runs in a home of its own whatever LOCALCHAT_HOME says (README has users set it to their own
folder): a pytest run (two workers, as `./dev test` runs it) of tests/suite_home_probe.py with LOCALCHAT_HOME set to an
empty folder, and to a folder holding a database, passes and leaves that folder as it was."""

import hashlib
import os
import subprocess
import sys
from pathlib import Path

import pytest

from localchat.app.protocol.conversations import SamplingSettings
from localchat.app.server.store import Store

pytestmark = pytest.mark.slow  # two pytest runs of two workers each (a minute here)

TESTS = Path(__file__).resolve().parent


def fingerprint(folder: Path) -> dict[str, tuple[int, str]]:
    """Every path under the folder, with its mode and its content's hash (None for a folder)."""
    return {str(path.relative_to(folder)): (path.lstat().st_mode, hashlib.sha256(path.read_bytes()).hexdigest()
                                            if path.is_file() else None)
            for path in sorted(folder.rglob("*"))} | {".": (folder.lstat().st_mode, None)}


def users_home_with_a_database(root: Path) -> Path:
    (root / "data").mkdir(mode=0o700)
    store = Store(root / "data" / "localchat.db")
    try:
        store.create_conversation("the user's own chat", "", SamplingSettings())
    finally:
        store.close()
    (root / "config").mkdir(mode=0o700)
    (root / "config" / "token").write_text("the user's token\n")
    (root / "cache" / "models").mkdir(mode=0o700, parents=True)  # a used home's, as the suite's is
    return root


@pytest.mark.parametrize("make", [lambda root: root, users_home_with_a_database], ids=["empty", "with a database"])
def test_the_suite_leaves_the_folder_localchat_home_names_alone(tmp_path, make):
    users = tmp_path / "users-home"
    users.mkdir(mode=0o700)
    users = make(users)
    before = fingerprint(users)
    env = {name: value for name, value in os.environ.items()
           if not name.startswith(("PYTEST_", "LOCALCHAT_TEST_SUITE_HOME"))}  # a run of its own, not this one's worker
    env["LOCALCHAT_HOME"] = str(users)
    run = subprocess.run([sys.executable, "-m", "pytest", "-q", "-p", "no:randomly", "-p", "no:cacheprovider",
                          "-n", "2", str(TESTS / "suite_home_probe.py")],
                         cwd=TESTS.parent, env=env, capture_output=True, text=True, timeout=600)
    assert run.returncode == 0, run.stdout[-3000:] + run.stderr[-3000:]
    assert "2 passed" in run.stdout
    assert fingerprint(users) == before
