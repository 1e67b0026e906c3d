"""Run by tests/test_suite_home.py in a pytest of its own (not collected by the suite: its name is no test_*.py).
What the suite's tests do to a home, done here to whichever home the suite gave this run."""

import os
from pathlib import Path

import pytest

from localchat.app import paths
from localchat.app.protocol.conversations import SamplingSettings
from localchat.app.server.store import Store
from support import SESSION_HOME, make_home


@pytest.mark.parametrize("part", ["store", "token"])  # one to each worker with -n 2
def test_what_the_suite_does_to_a_home(tmp_path, part):
    assert Path(os.environ["LOCALCHAT_HOME"]) == SESSION_HOME
    make_home(tmp_path / "server-home")  # a server's home, linking the session's kept cache
    if part == "store":
        store = Store(paths.db_path())
        try:
            store.create_conversation("from the suite", "", SamplingSettings())
        finally:
            store.close()
    else:
        paths.load_or_create_token()
    (SESSION_HOME / "cache" / f"probe-{part}").touch()  # beside the kept folders, not in them
