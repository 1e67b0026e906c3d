import atexit
import os
import shutil
import tempfile

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


@pytest.fixture
def api(server) -> httpx.Client:
    """An authorized HTTP client of the `server` fixture of the test's folder (a real `localchat serve`)."""
    with server.client() as client:
        yield client
