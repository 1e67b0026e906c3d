"""Real `localchat serve` processes for the app tests, and small helpers to talk to them.

Each server gets its own LOCALCHAT_HOME (its own token, database, state and lock files); their `cache` folder
is the test session's, so the embedded model is converted once per session at most.
"""

import json
import os
import shutil
import signal
import socket
import subprocess
import sys
import threading
import time
from collections.abc import Iterator
from contextlib import contextmanager
from pathlib import Path

import httpx

SESSION_HOME = Path(os.environ["LOCALCHAT_TEST_SUITE_HOME"])  # the test run's own (tests/conftest.py)
READY_TIMEOUT_S = 240  # a first start in a fresh session converts the GGUF file


def free_port() -> int:
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        return s.getsockname()[1]


def make_home(root: Path) -> Path:
    """A LOCALCHAT_HOME of its own that shares the session's model cache (its KV disk tier is its own)."""
    (root / "cache").mkdir(mode=0o700, parents=True, exist_ok=True)
    for kept in (SESSION_HOME / "cache").iterdir():  # the kept folders (tests/conftest.py) are links
        if kept.is_symlink() and not (root / "cache" / kept.name).exists():
            (root / "cache" / kept.name).symlink_to(kept)
    return root


class Server:
    """One `localchat serve` process."""

    def __init__(self, home: Path, port: int | None = None, args: list[str] = (), env: dict[str, str] | None = None):
        self.home, self.port, self.args = home, port or free_port(), list(args)
        # OpenMP threads that sleep instead of spinning at barriers: on 2 cores shared with the test client (and
        # other test runs), spinning torch threads made one batch step take seconds instead of milliseconds
        self.env = {"OMP_WAIT_POLICY": "PASSIVE", **os.environ, "LOCALCHAT_HOME": str(home), **(env or {})}
        self.process: subprocess.Popen | None = None
        self.log = home / f"serve-{self.port}.log"

    @property
    def url(self) -> str:
        return f"http://127.0.0.1:{self.port}"

    @property
    def token(self) -> str:
        return (self.home / "config" / "token").read_text().strip()

    @property
    def db(self) -> Path:
        return self.home / "data" / "localchat.db"

    def command(self, *args: str) -> list[str]:
        return [sys.executable, "-m", "localchat.app.cli", *args]

    def start(self) -> "Server":
        with open(self.log, "ab") as log:
            self.process = subprocess.Popen(self.command("serve", "--port", str(self.port), *self.args),
                                            env=self.env, stdout=log, stderr=subprocess.STDOUT)
        return self.wait_ready()

    def wait_ready(self, timeout: float = READY_TIMEOUT_S) -> "Server":
        deadline = time.monotonic() + timeout
        while time.monotonic() < deadline:
            if self.process.poll() is not None:
                raise RuntimeError(f"localchat serve exited ({self.process.returncode}): {self.log.read_text()}")
            try:
                health = httpx.get(f"{self.url}/health", timeout=2).json()
                if health["status"] == "ready":
                    return self
                if health["status"] == "error":
                    raise RuntimeError(health["error"])
            except httpx.HTTPError:
                pass
            time.sleep(0.2)
        raise TimeoutError(f"localchat serve not ready in {timeout} s: {self.log.read_text()}")

    def client(self, **kwargs) -> httpx.Client:
        return httpx.Client(base_url=self.url, headers={"Authorization": f"Bearer {self.token}"},
                            timeout=httpx.Timeout(120.0), **kwargs)

    def run_cli(self, *args: str, timeout: float = 60) -> subprocess.CompletedProcess:
        return subprocess.run(self.command(*args), env=self.env, capture_output=True, text=True, timeout=timeout)

    def metrics(self) -> dict[str, float]:
        text = httpx.get(f"{self.url}/metrics", timeout=10).text
        return {line.split()[0]: float(line.split()[1]) for line in text.splitlines()
                if line and not line.startswith("#")}

    def wait_idle(self, timeout: float = 30.0) -> dict[str, float]:
        """Metrics once no request runs and no KV block is held."""
        deadline = time.monotonic() + timeout
        while True:
            metrics = self.metrics()
            idle = (metrics["localchat_kv_blocks_used"] == 0 and metrics["localchat_requests_running"] == 0
                    and metrics["localchat_requests_waiting"] == 0)
            if idle or time.monotonic() > deadline:
                return metrics
            time.sleep(0.1)

    def kill(self, sig: int = signal.SIGKILL) -> None:
        if self.process is not None and self.process.poll() is None:
            self.process.send_signal(sig)
            self.process.wait(timeout=60)

    def stop(self) -> None:
        if self.process is not None and self.process.poll() is None:
            self.process.terminate()
            try:
                self.process.wait(timeout=60)
            except subprocess.TimeoutExpired:
                self.kill()


@contextmanager
def running_server(home: Path, kv_blocks: int, args: list[str] = (), env: dict[str, str] | None = None
                   ) -> Iterator[Server]:
    """A started `localchat serve` with a KV cache of kv_blocks blocks in its own home (sharing the model cache),
    stopped at the end."""
    server = Server(make_home(home), args=["--kv-blocks", str(kv_blocks), *args], env=env).start()
    try:
        yield server
    finally:
        server.stop()


def sse_events(response: httpx.Response) -> Iterator[tuple[str | None, str]]:
    """(event, data) of each server-sent event of a streaming response."""
    event = None
    for line in response.iter_lines():
        if line.startswith("event:"):
            event = line[6:].strip()
        elif line.startswith("data:"):
            yield event, line[5:].strip()
            event = None


def stream_api(client: httpx.Client, path: str, body: dict) -> list[dict]:
    """POST an /api stream and return its events (decoded)."""
    with client.stream("POST", path, json=body) as response:
        assert response.status_code == 200, response.read()
        events = []
        for event, data in sse_events(response):
            payload = json.loads(data)
            assert payload["type"] == event
            events.append(payload)
    return events


def stream_in_background(api: httpx.Client, path: str, body: dict
                         ) -> tuple[threading.Thread, list[dict], threading.Event]:
    """Read an /api event stream on a thread: (the thread, the events so far, set at the first delta)."""
    events, writing = [], threading.Event()

    def listen():
        with api.stream("POST", path, json=body) as response:
            for event, data in sse_events(response):
                events.append(json.loads(data))
                if event == "delta":
                    writing.set()

    listener = threading.Thread(target=listen)
    listener.start()
    return listener, events, writing


SMALL_CONTEXT = 512  # the max_model_len of tests/conftest.py's small_context_server
SECOND_MODEL_NAME = "tiny-llama"
TOOLS_MODEL_NAME = "tiny-hermes"  # tiny-llama with a chat template that renders tools (tests/data/hermes_tools.jinja)


def second_model_dir(root: Path) -> Path:
    """A folder for $LOCALCHAT_MODEL_DIRS holding a second chat model, `tiny-llama`: a 2-layer Llama with random
    weights (seeded) and the embedded model's tokenizer and chat template, about 13 MB; and `tiny-hermes`, the same
    with a Qwen-style template that renders tools. Built once per test session (a file lock lets the test workers
    share them). Their replies are noise; switching models, and what a template does with tools, are the point."""
    import fcntl

    folder = root / SECOND_MODEL_NAME
    root.mkdir(parents=True, exist_ok=True)
    with open(root / ".lock", "w") as lock:
        fcntl.flock(lock, fcntl.LOCK_EX)
        if not (folder / "model.safetensors").is_file():
            from localchat.engine.loading.loader import resolve_model

            write_tiny_llama(folder, resolve_model(None).tokenizer, seed=0)
        hermes = root / TOOLS_MODEL_NAME
        if not hermes.is_dir():
            tmp = root / f".{TOOLS_MODEL_NAME}-{os.getpid()}"
            shutil.copytree(folder, tmp)
            tmp.rename(hermes)
        use_template(hermes, "hermes_tools.jinja")
    return root


def write_tiny_llama(folder: Path, tokenizer, seed: int) -> None:
    """A 2-layer Llama of random weights (seeded) for `tokenizer`'s vocabulary, with it, written whole or not at all
    (model.safetensors last, in a folder renamed into place)."""
    import torch
    from transformers import LlamaConfig, LlamaForCausalLM

    torch.manual_seed(seed)
    config = LlamaConfig(vocab_size=len(tokenizer), hidden_size=64, intermediate_size=128, num_hidden_layers=2,
                         num_attention_heads=4, num_key_value_heads=2, max_position_embeddings=2048,
                         tie_word_embeddings=True, bos_token_id=tokenizer.bos_token_id,
                         eos_token_id=tokenizer.eos_token_id)
    tmp = folder.with_name(f".{folder.name}-{os.getpid()}")
    tokenizer.save_pretrained(tmp)
    LlamaForCausalLM(config).save_pretrained(tmp)
    tmp.rename(folder)


def use_template(folder: Path, name: str) -> None:
    """The test template tests/data/<name> as the model's chat template (written again when it changed)."""
    template = (Path(__file__).parent / "data" / name).read_text()
    kept = folder / "chat_template.jinja"
    if not kept.is_file() or kept.read_text() != template:
        kept.write_text(template)


QWEN3_THINKING, R1_THINKING = "tiny-qwen3-thinking", "tiny-r1-thinking"


def thinking_model_dir(root: Path) -> Path:
    """A folder for $LOCALCHAT_MODEL_DIRS (or --model) holding two tiny thinking models, random weights (seeded) and
    the embedded model's tokenizer, each with a test template of one of the two common shapes (tests/data):
    `tiny-qwen3-thinking`, whose tokenizer has <think> and </think> as special tokens (its model has two more rows),
    and `tiny-r1-thinking` (tiny-llama's weights), whose template opens the block in the generation prompt and
    whose markers are plain text. Built once per test session; a template edited in tests/data is written again."""
    import fcntl

    root.mkdir(parents=True, exist_ok=True)
    with open(root / ".lock", "w") as lock:
        fcntl.flock(lock, fcntl.LOCK_EX)
        qwen3 = root / QWEN3_THINKING
        if not (qwen3 / "model.safetensors").is_file():
            from localchat.engine.loading.loader import resolve_model

            tokenizer = resolve_model(None).tokenizer
            tokenizer.add_tokens(["<think>", "</think>"], special_tokens=True)
            write_tiny_llama(qwen3, tokenizer, seed=1)
        r1 = root / R1_THINKING
        if not r1.is_dir():
            tmp = root / f".{R1_THINKING}-{os.getpid()}"
            shutil.copytree(second_model_dir(root.parent / "second-model") / SECOND_MODEL_NAME, tmp)
            tmp.rename(r1)
        use_template(qwen3, "qwen3_thinking.jinja")
        use_template(r1, "r1_thinking.jinja")
    return root
