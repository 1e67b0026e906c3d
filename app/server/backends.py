"""What generates the replies: the embedded engine (embedded_backend.py), or a remote OpenAI-compatible server
(remote_backend.py), behind one interface, Backend.

    backend.start()                                  begin loading (returns at once; see health())
    stream = await backend.open(prompt, params, id)  validate and start a request, or raise
    async for update in stream: ...                  reply deltas, by reply index
    await backend.abort(id)                          its stream ends with finish_reason "abort"

The embedded backend takes prompts as token ids (its tokenizer and chat template are at hand, so
conversations reuse their exact prefix tokens); the remote one takes chat messages and leaves prefix
sharing to that server's own cache. Callers tell them apart by their capabilities, never by their class.
"""

import time
from collections.abc import AsyncIterator
from dataclasses import dataclass, field
from typing import Literal, Protocol

import httpx
from litestar.di import NamedDependency
from litestar.params import SkipValidation

from localchat.app.protocol.sampling import SamplingDefaults
from localchat.app.protocol.system import Kernels, KVCacheSize, LoadProgress
from localchat.app.server.chat_template import ChatTemplate
from localchat.app.server.tool_calls import ToolSyntax
from localchat.engine.frontend.outputs import CompletionOutput
from localchat.engine.sampling_params import SamplingParams
from localchat.engine.stats import EngineStats, PinUsage
from localchat.engine.stats import Warmth as EngineWarmth


class BackendNotReady(RuntimeError):
    """The model is still loading, failed to load, or the process is stopping."""


class BackendRequestError(ValueError):
    """The backend refused the request (bad input); status is the HTTP status to answer with."""

    def __init__(self, message: str, status: int = 400):
        super().__init__(message)
        self.status = status


def failure_message(error: Exception) -> str:
    """What the client of a stream that failed midway is told: its own request's fault in full (a grammar that gave
    up), nothing of the server's internals otherwise (the log has them)."""
    if isinstance(error, BackendRequestError):
        return str(error)
    return "the engine failed while writing this reply (the engine log has the details)"


@dataclass
class Update:
    outputs: list[CompletionOutput]  # the replies that changed, each with its new text and token ids
    prompt_tokens: int | None = None  # known from the first update (embedded) or the last (remote)
    cached_tokens: int | None = None
    finished: bool = False


@dataclass
class Loading:
    stage: str = "starting"
    fraction: float | None = None
    started: float = field(default_factory=time.monotonic)
    error: str | None = None
    ready: bool = False

    def report(self, stage: str, fraction: float | None) -> None:
        self.stage, self.fraction = stage, fraction

    def progress(self) -> LoadProgress:
        elapsed = round(time.monotonic() - self.started, 2)
        return LoadProgress(stage=self.stage, fraction=self.fraction, elapsed_s=elapsed)


class Backend(Protocol):
    """What the server needs of a backend (see the module docstring). Both backends implement all of it; where a
    capability is missing, its methods refuse with a BackendRequestError."""

    kind: Literal["embedded", "remote"]
    model_name: str | None  # the name it serves, once known
    parameters: int | None  # the weights of the model it runs or loads (None: not known): a new chat's defaults
    sampling: SamplingDefaults  # what a reply samples with where its request names no value (sampling_defaults.py)
    kv_cache: KVCacheSize | None  # what the KV cache holds, in a user's terms (None: not loaded, or not known)
    kernels: Kernels | None  # what runs the matrix products, measured (None: not loaded, or not the native kernels)
    loading: Loading
    stopping: bool
    unloaded: bool  # unload() freed the model: the next request that needs it loads it again (reload())

    # --- capabilities ---
    # prompts are token ids rendered here from the model's own chat template (`template`, tokenize, ...), and
    # messages keep their token ids; else prompts are chat messages, rendered by the server behind it
    renders_templates: bool
    can_switch_models: bool  # switch() loads another model of this machine's
    relays_openai: bool  # /v1 requests go as they are to the server behind it (proxy()), not through open()

    @property
    def can_chat(self) -> bool:
        """Whether the model writes chat replies (a base model, without a chat template, only continues text)."""

    @property
    def error(self) -> str | None:
        """Why the backend cannot serve (it failed to load, or failed for good later); None while it can."""

    @property
    def template(self) -> ChatTemplate | None:
        """The model's chat template (renders_templates: once the model is loaded; else None)."""

    @property
    def tool_syntax(self) -> ToolSyntax:
        """How the model writes tool calls: its template's syntax, or Hermes' taught in a system message."""

    @property
    def max_model_len(self) -> int | None:
        """The model's context in tokens, a prompt and its reply (None: not known, or not loaded)."""

    @property
    def thinks(self) -> bool | None:
        """Whether the model thinks before it answers, marking its thinking (None: not known, or not loaded)."""

    @property
    def model_choice(self) -> str | None:
        """The name of the model it runs or loads, as find_models() lists it (can_switch_models)."""

    def start(self) -> None: ...
    def ensure_ready(self) -> None: ...
    def check_chat(self) -> None: ...
    def check_text_size(self, num_chars: int) -> None: ...
    async def open(self, prompt: list[int] | list[dict], params: SamplingParams, request_id: str,
                   draft_sources: list[str] = ()) -> AsyncIterator[Update]: ...
    async def abort(self, request_id: str) -> None: ...
    async def end_thinking(self, request_id: str) -> bool: ...
    async def stats(self) -> EngineStats: ...
    async def forget(self, dropped: list[list[int]], kept: list[list[int]]) -> None: ...
    async def close(self) -> None: ...

    # --- where chats' histories are, and pins that keep them warm (a remote engine's cache is its own: its warmth
    # is None, its pin_usage None, and a pin is refused) ---
    def warmth(self, key: str, token_ids: list[int]) -> EngineWarmth | None: ...
    async def pin(self, key: str, token_ids: list[int]) -> None: ...
    async def unpin(self, key: str) -> None: ...
    def pin_usage(self) -> PinUsage | None: ...

    # --- prompts as token ids (renders_templates) ---
    async def apply_chat_template(self, messages: list[dict], tools: list[dict] | None = None,
                                  variables: dict | None = None) -> list[int]: ...
    async def tokenize(self, prompt: str | list[int]) -> list[int]: ...
    def detokenize(self, token_ids: list[int]) -> str: ...
    async def check_request(self, prompt: list[int], params: SamplingParams) -> None: ...

    # --- switching models (can_switch_models) ---
    def check_switch(self) -> None: ...
    async def switch(self, model: str) -> None: ...
    async def unload(self) -> None: ...
    def reload(self) -> None: ...
    async def loaded(self) -> None: ...  # wait until the model is loaded (reloaded if it was unloaded)

    # --- relaying /v1 (relays_openai) ---
    async def proxy(self, method: str, path: str, body: bytes | None) -> httpx.Response: ...


# A handler's backend parameter: injected by name, and not validated (a Protocol has no isinstance)
BackendDep = NamedDependency[SkipValidation[Backend]]
