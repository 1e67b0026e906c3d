"""Messages on the wire, shared by the engine process (server) and its clients.

Two families: the OpenAI-compatible shapes under /v1, and localchat's own conversation shapes under /api.
Every body is a msgspec.Struct. A request with a field localchat does not know (/v1: logit_bias, audio,
modalities, ...; /api: a typo) is refused with a 400 that names it, never silently ignored. The limits of a request's
values are on its fields (msgspec.Meta): msgspec checks them as it decodes a body, and the OpenAPI schema states them.
"""

from typing import Annotated, Literal

import msgspec
from msgspec import UNSET, Struct, UnsetType

from localchat.engine.sampling_limits import LIMITS, MAX_STOP_LENGTH, MAX_STOP_STRINGS, MIN_TEMPERATURE

# --- Limits of the values in a request -----------------------------------------------------------

INT64_MIN, INT64_MAX = -(2**63), 2**63 - 1  # msgspec checks the bounds of integers within these


def limited(name: str) -> msgspec.Meta:
    """The range of the sampling setting `name` (engine/sampling_params.py LIMITS). A range msgspec cannot check
    (the seed's, up to 2**64 - 1) is stated in the schema only: SamplingParams checks it."""
    low, high = LIMITS[name]
    if any(isinstance(bound, int) and not INT64_MIN <= bound <= INT64_MAX for bound in (low, high)):
        return msgspec.Meta(extra_json_schema={"minimum": low, "maximum": high})
    return msgspec.Meta(ge=low, le=high)


# the sampling settings, each with its range
ReplyCount = Annotated[int, limited("n")]
# a temperature is 0 (greedy) or at least MIN_TEMPERATURE: stated in the schema, checked by SamplingParams
Temperature = Annotated[float, limited("temperature"), msgspec.Meta(
    extra_json_schema={"not": {"type": "number", "exclusiveMinimum": 0, "exclusiveMaximum": MIN_TEMPERATURE}})]
TopP = Annotated[float, limited("top_p")]
TopK = Annotated[int, limited("top_k")]
MinP = Annotated[float, limited("min_p")]
RepetitionPenalty = Annotated[float, limited("repetition_penalty")]
PresencePenalty = Annotated[float, limited("presence_penalty")]
FrequencyPenalty = Annotated[float, limited("frequency_penalty")]
MaxTokens = Annotated[int, limited("max_tokens")]
Seed = Annotated[int, limited("seed")]
Logprobs = Annotated[int, limited("logprobs")]
StopString = Annotated[str, msgspec.Meta(min_length=1, max_length=MAX_STOP_LENGTH)]
StopStrings = Annotated[list[StopString], msgspec.Meta(max_length=MAX_STOP_STRINGS)]

# texts, without NUL characters
NO_NUL = r"^[^\x00]*$"
NOT_BLANK = r"^\s*[^\s\x00][^\x00]*$"  # some text that is not space, and no NUL
# what a text that fails a pattern lacks, as an error message says it
PATTERN_MEANINGS = {NO_NUL: "must not contain NUL characters", NOT_BLANK: "must have text (and no NUL characters)"}
Text = Annotated[str, msgspec.Meta(pattern=NO_NUL)]
NonBlankText = Annotated[str, msgspec.Meta(pattern=NOT_BLANK)]

# --- OpenAI-compatible (/v1) ---------------------------------------------------------------------


class ContentPart(Struct, forbid_unknown_fields=True):
    type: Literal["text"]  # images and audio are not supported
    text: str


class FunctionCall(Struct, forbid_unknown_fields=True):
    name: str
    arguments: str  # JSON text of an object


class ToolCall(Struct, forbid_unknown_fields=True):
    id: str
    function: FunctionCall
    type: Literal["function"] = "function"


class ChatMessageIn(Struct, forbid_unknown_fields=True):
    role: Literal["system", "developer", "user", "assistant", "tool"]  # "developer": OpenAI's newer name for system
    content: str | list[ContentPart] | None = None
    name: str | None = None
    tool_calls: list[ToolCall] | None = None  # an assistant's calls
    tool_call_id: str | None = None  # a tool message: the call it answers
    refusal: None = None  # sent back with an assistant message by some clients; localchat never refuses

    def text(self) -> str:
        if isinstance(self.content, list):
            return "".join(part.text for part in self.content)
        return self.content or ""

    @property
    def template_role(self) -> str:
        return "system" if self.role == "developer" else self.role


class StreamOptions(Struct, forbid_unknown_fields=True):
    include_usage: bool = False


class SamplingFields(Struct, kw_only=True, forbid_unknown_fields=True):
    """The sampling fields both /v1 endpoints accept (the limits are the engine's, see SamplingParams)."""

    model: str | None = None
    n: ReplyCount = 1
    temperature: Temperature | None = None
    top_p: TopP | None = None
    top_k: TopK | None = None
    min_p: MinP | None = None
    repetition_penalty: RepetitionPenalty | None = None
    presence_penalty: PresencePenalty | None = None
    frequency_penalty: FrequencyPenalty | None = None
    seed: Seed | None = None
    stop: StopString | StopStrings | None = None
    max_tokens: MaxTokens | None = None
    stream: bool = False
    stream_options: StreamOptions | None = None
    ignore_eos: bool = False
    user: str | None = None  # an end-user id for abuse tracking: accepted, nothing to track locally


class FunctionDefinition(Struct, forbid_unknown_fields=True):
    name: str
    description: str | None = None
    parameters: dict | None = None  # a JSON Schema of the arguments (an object)
    strict: bool | None = None


class Tool(Struct, forbid_unknown_fields=True):
    type: Literal["function"]
    function: FunctionDefinition


class NamedFunction(Struct, forbid_unknown_fields=True):
    name: str


class NamedToolChoice(Struct, forbid_unknown_fields=True):
    type: Literal["function"]
    function: NamedFunction


class JSONSchemaFormat(Struct, forbid_unknown_fields=True):
    name: str
    schema: dict | None = None  # None: any JSON value
    description: str | None = None
    strict: bool | None = None


class TextFormat(Struct, tag="text", tag_field="type", forbid_unknown_fields=True):
    pass


class JSONObjectFormat(Struct, tag="json_object", tag_field="type", forbid_unknown_fields=True):
    pass


class JSONSchemaResponseFormat(Struct, tag="json_schema", tag_field="type", forbid_unknown_fields=True):
    json_schema: JSONSchemaFormat


ResponseFormat = TextFormat | JSONObjectFormat | JSONSchemaResponseFormat


class ChatCompletionRequest(SamplingFields, kw_only=True):
    messages: list[ChatMessageIn]
    max_completion_tokens: MaxTokens | None = None
    logprobs: bool = False
    top_logprobs: Logprobs | None = None
    response_format: ResponseFormat | None = None
    tools: list[Tool] | None = None
    tool_choice: Literal["none", "auto", "required"] | NamedToolChoice | None = None
    parallel_tool_calls: bool = True


class CompletionRequest(SamplingFields, kw_only=True):
    prompt: str | list[str | int | list[int]]  # a string, strings, token ids, or lists of token ids
    logprobs: Logprobs | None = None
    echo: bool = False


class PromptTokensDetails(Struct):
    cached_tokens: int = 0


class Usage(Struct):
    prompt_tokens: int
    completion_tokens: int
    total_tokens: int
    prompt_tokens_details: PromptTokensDetails


class TopLogprob(Struct):
    token: str
    logprob: float
    bytes: list[int]


class TokenLogprobOut(Struct):
    token: str
    logprob: float
    bytes: list[int]
    top_logprobs: list[TopLogprob]


class ChoiceLogprobs(Struct):
    content: list[TokenLogprobOut]


class AssistantMessage(Struct):
    role: str = "assistant"
    content: str | None = ""  # None when the reply is tool calls only
    tool_calls: list[ToolCall] | None = None


class ChatChoice(Struct):
    index: int
    message: AssistantMessage
    finish_reason: str | None
    logprobs: ChoiceLogprobs | None = None


class ChatCompletion(Struct):
    id: str
    created: int
    model: str
    choices: list[ChatChoice]
    usage: Usage
    object: str = "chat.completion"


class FunctionCallDelta(Struct, omit_defaults=True):
    name: str | None = None
    arguments: str | None = None


class ToolCallDelta(Struct, omit_defaults=True):
    index: int
    id: str | None = None
    type: str | None = None
    function: FunctionCallDelta | None = None


class ChunkDelta(Struct, omit_defaults=True):
    role: str | None = None
    content: str | None = None
    tool_calls: list[ToolCallDelta] | None = None


class ChunkChoice(Struct):
    index: int
    delta: ChunkDelta
    finish_reason: str | None = None
    logprobs: ChoiceLogprobs | None = None


class ChatCompletionChunk(Struct):
    id: str
    created: int
    model: str
    choices: list[ChunkChoice]
    usage: Usage | None = None
    object: str = "chat.completion.chunk"


class CompletionLogprobs(Struct):
    tokens: list[str]
    token_logprobs: list[float]
    top_logprobs: list[dict[str, float]]
    text_offset: list[int]


class CompletionChoice(Struct):
    index: int
    text: str
    finish_reason: str | None
    logprobs: CompletionLogprobs | None = None


class Completion(Struct):
    id: str
    created: int
    model: str
    choices: list[CompletionChoice]
    usage: Usage | None = None
    object: str = "text_completion"


class Model(Struct):
    id: str
    created: int
    owned_by: str = "localchat"
    object: str = "model"


class ModelList(Struct):
    data: list[Model]
    object: str = "list"


class ErrorDetail(Struct):
    message: str
    type: str
    code: int | str | None = None
    param: str | None = None


class ErrorBody(Struct):
    error: ErrorDetail


# --- Conversations (/api) ------------------------------------------------------------------------


class SamplingSettings(Struct, kw_only=True, forbid_unknown_fields=True):
    """A conversation's sampling settings (a request may override them)."""

    temperature: Temperature = 0.7
    top_p: TopP = 0.95
    top_k: TopK = 0
    min_p: MinP = 0.0
    repetition_penalty: RepetitionPenalty = 1.0
    presence_penalty: PresencePenalty = 0.0
    frequency_penalty: FrequencyPenalty = 0.0
    max_tokens: MaxTokens = 512
    seed: Seed | None = None
    stop: StopStrings = msgspec.field(default_factory=list)
    json_mode: bool = False  # every reply is a JSON object (grammar-constrained)
    tools: list[Tool] = msgspec.field(default_factory=list)  # functions the model may call (OpenAI's shape)
    tool_choice: Literal["auto", "required", "none"] = "auto"  # "required": every reply is one tool call


class Conversation(Struct, kw_only=True):
    id: str
    title: str
    system_prompt: str
    settings: SamplingSettings
    created_at: float
    updated_at: float  # last activity
    message_count: int = 0
    active_leaf: str | None = None  # the message that ends the branch last shown (a UI sets it)
    model: str | None = None  # the model that wrote its latest reply (None: no reply yet)


class ConversationCreate(Struct, kw_only=True, forbid_unknown_fields=True):
    title: Text | None = None  # None or "": a default title
    system_prompt: Text = ""
    settings: SamplingSettings | None = None


class ConversationUpdate(Struct, kw_only=True, forbid_unknown_fields=True):
    title: NonBlankText | UnsetType = UNSET
    system_prompt: Text | UnsetType = UNSET
    settings: SamplingSettings | UnsetType = UNSET
    active_leaf: str | UnsetType = UNSET  # a message of this conversation


class ReplyStats(Struct, kw_only=True):
    prompt_tokens: int
    cached_tokens: int
    completion_tokens: int
    time_to_first_token_s: float | None
    tokens_per_s: float | None
    duration_s: float


class Message(Struct, kw_only=True, omit_defaults=True):
    id: str
    conversation_id: str
    parent_id: str | None
    role: Literal["user", "assistant", "tool"]
    content: str  # an assistant's text without its tool calls; a tool message: the result
    created_at: float
    num_tokens: int = 0
    # assistant: "stop", "length", "abort" (stopped), "interrupted" (the engine died while writing it), or None
    # while it is being written (its content is saved every second)
    finish_reason: str | None = None
    stopped: bool = False  # assistant: ended before it finished (stop, disconnect, shutdown, a crash)
    model: str | None = None
    stats: ReplyStats | None = None
    token_ids: list[int] | None = None  # only when asked for (?token_ids=true)
    tool_calls: list[ToolCall] | None = None  # an assistant's calls of the conversation's tools
    tool_call_id: str | None = None  # a tool message: the call whose result it is

    @property
    def author(self) -> str:
        return {"user": "You", "assistant": "Assistant", "tool": "Tool result"}[self.role]

    def markdown(self) -> str:
        """The message as Markdown, for people (the UIs, an export): tool calls and results as code blocks."""
        if self.role == "tool":
            return f"```\n{self.content}\n```"
        calls = [f"Calls `{call.function.name}`:\n\n```json\n{call.function.arguments}\n```"
                 for call in self.tool_calls or []]
        return "\n\n".join(part for part in (self.content, *calls) if part)


class ConversationTree(Struct):
    conversation: Conversation
    messages: list[Message]  # every branch; children in the order they were written


class SendMessage(Struct, kw_only=True, forbid_unknown_fields=True):
    content: Text  # a user message has text; a tool's result may be empty
    parent_id: str | None = None  # None: a new root of the tree
    n: ReplyCount = 1
    settings: SamplingSettings | None = None  # this request only
    # a tool's result instead of a user message: the id of the parent's tool call it answers (the parent is the
    # assistant message that called, or a result sent before this one for another of its calls)
    tool_call_id: str | None = None
    reply: bool = True  # False: store the message, write no reply (a first result of several)


class Regenerate(Struct, kw_only=True, forbid_unknown_fields=True):
    n: ReplyCount = 1
    settings: SamplingSettings | None = None


class EditMessage(Struct, kw_only=True, forbid_unknown_fields=True):
    content: NonBlankText
    n: ReplyCount = 1
    settings: SamplingSettings | None = None


class StopRequest(Struct, kw_only=True, forbid_unknown_fields=True):
    message_id: str | None = None  # None: every running generation of the conversation


class StopResult(Struct):
    stopped: list[str]  # assistant message ids that were running


class SessionsRevoked(Struct):
    revoked: int


class Limit(Struct):
    min: int | float
    max: int | float | None  # None: no upper bound


class Limits(Struct, kw_only=True):
    """GET /api/limits: the range of each sampling setting (n, temperature, ...), as the server checks them."""

    sampling: dict[str, Limit]
    min_temperature: float  # a temperature is 0 (greedy) or at least this
    max_stop_strings: int


class LoginCode(Struct):
    code: str
    url: str
    expires_in_s: int


class SearchHit(Struct):
    conversation_id: str
    conversation_title: str
    message_id: str
    role: str
    snippet: str


# One event stream per send, edit or regenerate. The SSE `event:` line and the `type` field agree.


class UserEvent(Struct, tag="user", tag_field="type"):
    message: Message  # the stored user message (send and edit)


class StartEvent(Struct, tag="start", tag_field="type"):
    parent_id: str
    message_ids: list[str]  # one per branch, in reply order
    model: str | None = None  # the model writing the replies
    # the other models that wrote messages of this branch: their text was tokenized again for `model`
    retokenized_from: list[str] = msgspec.field(default_factory=list)


class DeltaEvent(Struct, tag="delta", tag_field="type"):
    message_id: str
    index: int
    text: str


class DoneEvent(Struct, tag="done", tag_field="type"):
    message: Message  # the stored assistant message, with finish_reason and stats


class ErrorEvent(Struct, tag="error", tag_field="type"):
    message: str


StreamEvent = UserEvent | StartEvent | DeltaEvent | DoneEvent | ErrorEvent


# --- /api/models: the models on this machine, and switching the engine's model ---------------------------


class ModelInfo(Struct, kw_only=True):
    name: str  # what POST /api/models/current takes (and `localchat serve --model`)
    served_name: str  # what the engine calls it once loaded: /health's model, a message's model
    source: Literal["embedded", "hf-cache", "folder"]
    format: Literal["gguf", "safetensors"]
    architecture: str | None
    quantization: str | None  # a GGUF's main tensor type ("Q4_K", ...)
    size_bytes: int
    memory_bytes: int | None  # its weights in memory, as the engine holds them
    supported: bool
    current: bool  # the one the engine runs (or loads) now


class ModelCatalog(Struct, kw_only=True):
    models: list[ModelInfo]
    current: str | None  # the name the engine runs or loads, as in `models`
    switchable: bool  # False with --engine-url: the remote server's model is its own


class ModelChoice(Struct, forbid_unknown_fields=True):
    model: str  # a name from GET /api/models


# --- /health ------------------------------------------------------------------------------------


class LoadProgress(Struct, kw_only=True):
    stage: str
    fraction: float | None = None  # of the current stage, when it can be measured
    elapsed_s: float = 0.0


class Health(Struct, kw_only=True):
    status: Literal["loading", "ready", "error", "stopping"]
    model: str | None
    backend: Literal["embedded", "remote"]
    pid: int
    version: str
    progress: LoadProgress | None = None
    error: str | None = None
    # whether the model writes chat replies (None until it is ready); False: a base model, without a chat template,
    # that only continues text (/v1/completions)
    chat: bool | None = None
