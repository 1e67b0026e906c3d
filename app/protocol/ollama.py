"""Ollama's API shapes (its docs/api.md): /api/chat, /api/generate, the model list (/api/tags), /api/show, /api/ps
and /api/version, for the clients and libraries written for Ollama.

Unlike the rest of the protocol, a request's unknown fields and options are ignored, as Ollama ignores them
(num_gpu, mirostat, ...): its clients send them freely. The values localchat uses keep their limits."""

from typing import Annotated, Any, Literal

from msgspec import Meta, Struct

from localchat.app.protocol.limits import (
    FrequencyPenalty,
    MinP,
    PresencePenalty,
    RepetitionPenalty,
    Seed,
    StopStrings,
    Temperature,
    TopK,
    TopP,
)

# Ollama's routes, as its API (docs/api.md) names them: refusals on them are in its error shape
PATHS = ("/api/chat", "/api/generate", "/api/tags", "/api/show", "/api/ps", "/api/version", "/api/embed",
         "/api/embeddings", "/api/pull", "/api/push", "/api/create", "/api/copy", "/api/delete")

Think = bool | Literal["low", "medium", "high", "max"]
# keep_alive: seconds, as a number or a string ("3600", "-1"), or a duration of Go's units ("5m", "1h30m", "-1s"): what
# server/ollama_models.keep_alive_seconds reads, stated in the schema (anything else is a 400)
DURATION_UNITS = ("h", "m", "s", "ms", "us", "µs", "μs", "ns")
_UNIT = "|".join(sorted(DURATION_UNITS, key=len, reverse=True))  # "ms" before "m"
DURATION_PATTERN = rf"^-?([0-9]+(\.[0-9]+)?|([0-9]+(\.[0-9]+)?({_UNIT}))+)$"
KeepAlive = int | float | Annotated[str, Meta(pattern=DURATION_PATTERN)]


class Options(Struct, kw_only=True):
    """The options localchat uses; Ollama's others (num_gpu, mirostat, num_thread, ...) are ignored."""

    temperature: Temperature | None = None
    top_p: TopP | None = None
    top_k: TopK | None = None
    min_p: MinP | None = None
    seed: Seed | None = None
    num_predict: int | None = None  # -1: until the context is full, as left out; -2 likewise
    stop: StopStrings | None = None
    repeat_penalty: RepetitionPenalty | None = None
    presence_penalty: PresencePenalty | None = None
    frequency_penalty: FrequencyPenalty | None = None
    num_ctx: int | None = None  # clamped to the engine's context


class FunctionDefinition(Struct, kw_only=True):
    name: str
    description: str | None = None
    parameters: dict | None = None


class Tool(Struct, kw_only=True):
    function: FunctionDefinition
    type: Literal["function"] = "function"


class FunctionCall(Struct, kw_only=True):
    name: str
    arguments: dict[str, Any]  # an object, not JSON text as OpenAI's


class ToolCall(Struct, kw_only=True):
    function: FunctionCall


class Message(Struct, kw_only=True):
    role: Literal["system", "user", "assistant", "tool"]
    content: str = ""
    thinking: str | None = None
    images: list[str] | None = None
    tool_calls: list[ToolCall] | None = None
    tool_name: str | None = None


class ReplyMessage(Struct, kw_only=True, omit_defaults=True):
    """A reply's message: its content always there, "" in the last object of a stream, as Ollama sends it."""

    role: Literal["assistant"]
    content: str
    thinking: str | None = None
    tool_calls: list[ToolCall] | None = None


class ChatRequest(Struct, kw_only=True):
    model: str
    messages: list[Message] = []
    tools: list[Tool] | None = None
    format: Literal["", "json"] | dict | None = None
    options: Options | None = None
    stream: bool = True
    think: Think | None = None
    keep_alive: KeepAlive | None = None


class GenerateRequest(Struct, kw_only=True):
    model: str
    prompt: str = ""
    suffix: str | None = None
    system: str | None = None
    template: str | None = None
    raw: bool = False
    images: list[str] | None = None
    format: Literal["", "json"] | dict | None = None
    options: Options | None = None
    stream: bool = True
    think: Think | None = None
    keep_alive: KeepAlive | None = None
    context: list[int] | None = None  # deprecated in Ollama: earlier tokens, continued


class EmbedRequest(Struct, kw_only=True):
    """/api/embed and /api/embeddings: the model is looked up (a 404 names an unknown one), then refused: localchat
    runs no model that embeds. Their other fields (input, prompt, ...) are ignored."""

    model: str


class Reply(Struct, kw_only=True, omit_defaults=True):
    """What every object of a reply carries; the last (done) also the counters, durations in nanoseconds."""

    model: str
    created_at: str
    done: bool
    done_reason: str | None = None
    total_duration: int | None = None
    load_duration: int | None = None
    prompt_eval_count: int | None = None
    prompt_eval_duration: int | None = None
    eval_count: int | None = None
    eval_duration: int | None = None


class ChatResponse(Reply, kw_only=True, omit_defaults=True):
    message: ReplyMessage


class GenerateResponse(Reply, kw_only=True, omit_defaults=True):
    response: str
    thinking: str | None = None
    context: list[int] | None = None


class ModelDetails(Struct, kw_only=True):
    parent_model: str = ""
    format: str
    family: str
    families: list[str]
    parameter_size: str
    quantization_level: str


class ListedModel(Struct, kw_only=True):
    name: str
    model: str
    modified_at: str
    size: int
    digest: str
    details: ModelDetails


class ModelList(Struct):
    models: list[ListedModel]


class RunningModel(Struct, kw_only=True):
    name: str
    model: str
    size: int
    digest: str
    details: ModelDetails
    expires_at: str
    size_vram: int
    context_length: int


class RunningModels(Struct):
    models: list[RunningModel]


class ShowRequest(Struct, kw_only=True):
    model: str = ""
    name: str = ""  # Ollama's older name for model
    verbose: bool = False


class ShowResponse(Struct, kw_only=True):
    modelfile: str
    parameters: str
    template: str
    details: ModelDetails
    model_info: dict[str, Any]
    capabilities: list[str]
    modified_at: str
    license: str = ""


class Version(Struct):
    version: str


class Error(Struct):
    """Every error of Ollama's API: `{"error": "..."}`."""

    error: str
