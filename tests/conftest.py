import atexit
import os
import shutil
import tempfile
from collections.abc import Iterator

import httpx
import pytest
import torch

# Every test run gets its own LOCALCHAT_HOME, so no test reads or writes the user's folders; it is removed at exit
# (its model cache alone is ~600 MB).
if "LOCALCHAT_HOME" not in os.environ:
    os.environ["LOCALCHAT_HOME"] = tempfile.mkdtemp(prefix="localchat-test-home-")
    atexit.register(shutil.rmtree, os.environ["LOCALCHAT_HOME"], ignore_errors=True)
os.environ["HF_HUB_OFFLINE"] = "1"
os.environ["TRANSFORMERS_OFFLINE"] = "1"
# Without a GPU the Triton kernels run in Triton's interpreter, which must be chosen before anything imports
# triton (transformers does, through torch._dynamo).
if not torch.cuda.is_available():
    os.environ.setdefault("TRITON_INTERPRET", "1")


@pytest.fixture(scope="session")
def server(tmp_path_factory) -> Iterator:
    """The one real `localchat serve` (embedded engine) that the app, terminal UI and browser tests share: it
    starts once per session. Tests that need a process of their own (a kill, a restart, other flags) start it."""
    from support import running_server  # after LOCALCHAT_HOME is set above: support reads it

    with running_server(tmp_path_factory.mktemp("serve-home"), kv_blocks=768) as process:
        yield process


@pytest.fixture
def api(server) -> httpx.Client:
    """An authorized HTTP client of the shared `server`."""
    with server.client() as client:
        yield client
