"""The OpenAI-compatible shapes under /v1: chat completions and completions (whole and streamed), the tools a
reply may call, and the model list."""

from typing import Annotated, Any, Literal

from msgspec import Meta, Struct

from localchat.app.protocol.limits import (
    FrequencyPenalty,
    Logprobs,
    MaxTokens,
    MinP,
    PresencePenalty,
    RepetitionPenalty,
    ReplyCount,
    Seed,
    StopString,
    StopStrings,
    Temperature,
    ThinkingBudget,
    TopK,
    TopP,
)
from localchat.app.protocol.sampling import SamplingDefaults


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
    reasoning_content: str | None = None  # an assistant's thinking, sent back (the template decides what it keeps)
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
    name: Annotated[str, Meta(min_length=1, description="unique among the tools of a request or a conversation")]
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
    messages: Annotated[list[ChatMessageIn], Meta(min_length=1)]
    max_completion_tokens: MaxTokens | None = None
    logprobs: bool = False
    top_logprobs: Logprobs | None = None
    response_format: ResponseFormat | None = None
    tools: list[Tool] | None = None
    tool_choice: Literal["none", "auto", "required"] | NamedToolChoice | None = None
    parallel_tool_calls: bool = True
    # thinking models: values of the chat template's own variables (enable_thinking, ...), as vLLM and llama.cpp
    # take them; OpenAI's reasoning_effort, given to the template's variable of that name where it has one ("none":
    # enable_thinking false where it has that one instead); vLLM's thinking_token_budget
    chat_template_kwargs: dict[str, Any] | None = None
    reasoning_effort: Literal["none", "minimal", "low", "medium", "high"] | None = None
    thinking_token_budget: ThinkingBudget | None = None


TOKEN_ID = {"type": "integer", "minimum": 0}
# a string, strings, token ids, or lists of token ids, none empty: what the handler takes of the looser union that
# msgspec decodes (it states both; a prompt must also fit the context and the vocabulary)
PROMPT_SCHEMA = {"anyOf": [
    {"type": "string", "minLength": 1},
    {"type": "array", "minItems": 1, "items": {"type": "string", "minLength": 1}},
    {"type": "array", "minItems": 1, "items": TOKEN_ID},
    {"type": "array", "minItems": 1, "items": {"type": "array", "minItems": 1, "items": TOKEN_ID}},
]}


class CompletionRequest(SamplingFields, kw_only=True):
    prompt: Annotated[str | list[str | int | list[int]], Meta(extra_json_schema={"allOf": [PROMPT_SCHEMA]})]
    logprobs: Logprobs | None = None
    echo: bool = False


class PromptTokensDetails(Struct):
    cached_tokens: int = 0


class CompletionTokensDetails(Struct):
    reasoning_tokens: int = 0  # of completion_tokens, a thinking model's thinking (OpenAI's and vLLM's field)


class Usage(Struct, kw_only=True):
    prompt_tokens: int
    completion_tokens: int
    total_tokens: int
    prompt_tokens_details: PromptTokensDetails
    completion_tokens_details: CompletionTokensDetails | None = None


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


class AssistantMessage(Struct, omit_defaults=True):
    role: Literal["assistant"]
    content: str | None  # None when the reply is tool calls only
    reasoning_content: str | None = None  # a thinking model's thinking (llama.cpp's and DeepSeek's name)
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
    reasoning_content: str | None = None
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


class Model(Struct, kw_only=True):
    id: str
    created: int
    owned_by: str = "localchat"
    object: str = "model"
    # localchat's (a remote engine's list is relayed as it is): the context in tokens, as vLLM names it, and what a
    # request that names no sampling values samples with
    max_model_len: int | None = None
    sampling: SamplingDefaults | None = None


class ModelList(Struct):
    data: list[Model]
    object: str = "list"
