"""/health (whether the model is ready, and how loading goes), signing in, and the error body that every route
answers with (OpenAI's shape)."""

from typing import Literal

from msgspec import Struct

from localchat.app.protocol.sampling import SamplingDefaults


class LoadProgress(Struct, kw_only=True):
    stage: str
    fraction: float | None = None  # of the current stage, when it can be measured
    elapsed_s: float = 0.0


class Health(Struct, kw_only=True):
    # "unloaded": freed by a request's keep_alive 0 (Ollama's API); the next request that needs the model loads it
    status: Literal["loading", "ready", "error", "stopping", "unloaded"]
    model: str | None
    backend: Literal["embedded", "remote"]
    pid: int
    version: str
    progress: LoadProgress | None = None
    error: str | None = None
    # whether the model writes chat replies (None until it is ready); False: a base model, without a chat template,
    # that only continues text (/v1/completions)
    chat: bool | None = None
    # whether the model thinks before it answers, marking its thinking (<think>...</think>): replies carry it apart
    # (reasoning_content), and the enable_thinking and thinking_token_budget settings apply (None until it is ready)
    thinking: bool | None = None
    # what a request that names no sampling values samples with (None until it is ready), and what the KV cache holds
    # (None until it is ready, or a remote engine's)
    sampling: SamplingDefaults | None = None
    kv_cache: "KVCacheSize | None" = None
    # what pinned chats keep of the KV cache, and the most they may (None until it is ready, or a remote engine's)
    pins: "PinBudget | None" = None
    # what runs the model's matrix products, chosen by measuring this machine, and what its cores gave (None until it
    # is ready, or where the native kernels do not run)
    kernels: "Kernels | None" = None


class LoginCode(Struct):
    code: str
    url: str
    expires_in_s: int


class SessionsRevoked(Struct):
    revoked: int


class ErrorDetail(Struct):
    message: str
    type: str
    code: int | str | None = None
    param: str | None = None


class ErrorBody(Struct):
    error: ErrorDetail


class Kernels(Struct, kw_only=True):
    """What runs a step's matrix products (the engine's kernel_choice.py): decode rows and prompt rows (prefill chunks
    and large batches, from prompt_rows rows), and this machine's measured peaks (fp32_tflops, bf16_tflops, int8_tops,
    native_tops, read_gbs)."""

    decode: str
    prompt: str
    prompt_rows: int
    peaks: dict[str, float]


class KVCacheSize(Struct, kw_only=True):
    """What the KV cache holds, in a user's terms: the tokens of chats it keeps resident between turns, how many chats
    at the model's full context that is, and the memory it takes once full (it fills only as chats use it)."""

    tokens: int
    context_tokens: int  # the model's context
    full_context_chats: float  # tokens / context_tokens
    max_bytes: int
    summary: str  # the same in words, as the start line and both UIs say it (app/kv_cache_words.py)


class PinBudget(Struct, kw_only=True):
    """What pinned chats keep warm of the KV cache, and the budget they share (a pin beyond it is refused): tokens and
    memory; summary: the same in words (app/kv_cache_words.py)."""

    tokens: int
    limit_tokens: int
    bytes: int
    limit_bytes: int
    summary: str
