import os
import tempfile

import httpx
import pytest
import torch

# Every test run gets its own LOCALCHAT_HOME, so no test reads or writes the user's folders.
os.environ.setdefault("LOCALCHAT_HOME", tempfile.mkdtemp(prefix="localchat-test-home-"))
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
