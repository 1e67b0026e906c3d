import atexit
import os
import shutil
import tempfile
from collections.abc import Iterator
from pathlib import Path

import httpx
import pytest

# Two test workers (`./dev test`) and their engine processes share the cores: one thread each (torch's default, a
# thread per core in every process, oversubscribed them: the speculator's tests spent 13 s in the kernel with two
# threads, 1 s with one), and threads that wait sleep instead of spinning. Tests of thread counts set their own.
os.environ.setdefault("OMP_NUM_THREADS", "1")
os.environ.setdefault("OMP_WAIT_POLICY", "PASSIVE")
import torch  # noqa: E402  (after OMP_*: OpenMP reads them when torch loads)

# Every test run gets its own LOCALCHAT_HOME, whatever LOCALCHAT_HOME says (README has users set it to their own
# folder), so no test reads or writes the user's folders; it is removed at exit. The run's first process makes it and
# names it in SUITE_HOME; its workers (pytest-xdist), which inherit the environment, take that one.
# Its cache folder's models/ (converted and packed models, ~700 MB), test-references/ (transformers' copy of the
# embedded model) and native/ (the compiled CPU kernels) are kept between runs in .test-cache/ (or
# $LOCALCHAT_TEST_CACHE), and every home a test makes links them: an entry is keyed by what made it (the loader's
# format and the file's size and time; the kernels' sources, flags and compiler), so a later run reuses it only where
# a fresh one would be the same, and a first start (seconds of conversion, three of compiling, for every fresh home)
# is paid once, not at every engine a test starts. The rest of the cache (the KV cache's disk tier) is each home's own.
SUITE_HOME = "LOCALCHAT_TEST_SUITE_HOME"
KEPT_CACHE_FOLDERS = ("models", "test-references", "native")
if not (os.environ.get("PYTEST_XDIST_WORKER") and os.environ.get(SUITE_HOME)):
    os.environ[SUITE_HOME] = tempfile.mkdtemp(prefix="localchat-test-home-")
    atexit.register(shutil.rmtree, os.environ[SUITE_HOME], ignore_errors=True)
    kept_cache = Path(os.environ.get("LOCALCHAT_TEST_CACHE", Path(__file__).resolve().parent.parent / ".test-cache"))
    cache = Path(os.environ[SUITE_HOME]) / "cache"
    cache.mkdir(mode=0o700)
    for name in KEPT_CACHE_FOLDERS:
        (kept_cache / name).mkdir(mode=0o700, parents=True, exist_ok=True)
        (cache / name).symlink_to(kept_cache / name)
os.environ["LOCALCHAT_HOME"] = os.environ[SUITE_HOME]
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


@pytest.fixture(scope="session")
def two_model_server(tmp_path_factory) -> Iterator:
    """A `localchat serve` of its own that finds a second model, `tiny-llama` (support.second_model_dir), for the
    tests that switch models; it starts on the embedded one, and serves Ollama's API without the token on
    `ollama_port` too."""
    from support import free_port, running_server, second_model_dir

    models = second_model_dir(Path(os.environ["LOCALCHAT_HOME"]) / "cache" / "test-references" / "second-model")
    ollama_port = free_port()
    with running_server(tmp_path_factory.mktemp("two-models-home"), kv_blocks=256,
                        args=["--ollama-port", str(ollama_port)], env={"LOCALCHAT_MODEL_DIRS": str(models)}) as process:
        process.ollama_port = ollama_port
        yield process


@pytest.fixture(scope="session")
def thinking_server(tmp_path_factory) -> Iterator:
    """A `localchat serve --model tiny-r1-thinking` of its own: a tiny thinking model whose replies start inside their
    thinking (support.thinking_model_dir); its folder also holds tiny-qwen3-thinking, to switch to."""
    from support import R1_THINKING, running_server, thinking_model_dir

    models = thinking_model_dir(Path(os.environ["LOCALCHAT_HOME"]) / "cache" / "test-references" / "thinking")
    with running_server(tmp_path_factory.mktemp("thinking-home"), kv_blocks=256,
                        args=["--model", str(models / R1_THINKING)], env={"LOCALCHAT_MODEL_DIRS": str(models)}
                        ) as process:
        yield process


@pytest.fixture(scope="session")
def small_context_server(tmp_path_factory) -> Iterator:
    """A `localchat serve --max-model-len 512` of its own (the embedded model): a few turns reach the edge of its
    context, where the conversation's context_overflow policy acts."""
    from support import SMALL_CONTEXT, running_server

    with running_server(tmp_path_factory.mktemp("small-context-home"), kv_blocks=256,
                        args=["--max-model-len", str(SMALL_CONTEXT)]) as process:
        yield process


@pytest.fixture(scope="session")
def fake_hub() -> Iterator:
    """The fake Hugging Face Hub on 127.0.0.1 (tests/fake_hub.py): a test adds the repos it pulls."""
    from fake_hub import FakeHub

    with FakeHub() as hub:
        yield hub


@pytest.fixture(scope="session")
def hub_server(tmp_path_factory, fake_hub) -> Iterator:
    """A `localchat serve` of its own whose Hugging Face Hub is the fake one, online, with a cache of its own
    (hub_cache): for the pulls of the UIs."""
    from support import running_server

    hub_cache = tmp_path_factory.mktemp("hub-cache")
    env = {"HF_ENDPOINT": fake_hub.url, "HF_HUB_CACHE": str(hub_cache), "HF_HUB_OFFLINE": "0",
           "TRANSFORMERS_OFFLINE": "0", "HF_HUB_DISABLE_TELEMETRY": "1"}
    with running_server(tmp_path_factory.mktemp("hub-home"), kv_blocks=128, env=env) as process:
        process.hub_cache = hub_cache
        yield process


@pytest.fixture
def api(server) -> httpx.Client:
    """An authorized HTTP client of the shared `server`."""
    with server.client() as client:
        yield client


# The test files that take longest (each over 40 s), started first so that the workers (`./dev test`) end together
# instead of one running a long file alone at the end.
LONGEST_FIRST = ["packaging/test_wheel.py", "engine/frontend/test_llm.py", "app/test_hardening.py",
                 "engine/loading/test_packed_model.py", "app/test_openapi_fuzz.py"]


def pytest_collection_modifyitems(items: list[pytest.Item]) -> None:
    def rank(item: pytest.Item) -> int:
        path = item.path.as_posix()
        return next((i for i, name in enumerate(LONGEST_FIRST) if path.endswith(name)), len(LONGEST_FIRST))
    items.sort(key=rank)  # stable: the order within a file and among the rest is kept
