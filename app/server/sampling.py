"""The one place where a request's settings become what the engine runs, for every API: a conversation's reply
(SamplingSettings), a /v1 request (its sampling fields, response_format, tools and tool_choice) and an Ollama request
(its options, format and tools) give SamplingParams, the grammar its replies must match (JSON, or a required or named
tool call) and the tools they may call. A sampling value a request leaves out is the model's default
(SamplingDefaults, app/sampling_defaults.py), whichever API it came through. And the way back, for the remote
backend: the OpenAI body fields that ask another server for SamplingParams.

Every function here raises ValueError for settings that cannot work; each API answers it with a 400 in its words.
"""

from dataclasses import dataclass, field

from localchat.app.protocol.conversations import SAMPLING_FIELDS, SamplingDefaults, SamplingSettings, filled
from localchat.app.protocol.ollama import Options as OllamaOptions
from localchat.app.protocol.openai import (
    ChatCompletionRequest,
    CompletionRequest,
    JSONObjectFormat,
    JSONSchemaFormat,
    JSONSchemaResponseFormat,
    NamedToolChoice,
    ResponseFormat,
    SamplingFields,
    TextFormat,
    Tool,
)
from localchat.app.sampling_defaults import UNKNOWN_MODEL
from localchat.app.server.tool_calls import IN_SYSTEM_PROMPT, CallReader, ToolSyntax, call_grammar, check_tool_choice
from localchat.engine.frontend.structured_output import StructuredOutput
from localchat.engine.sampling_params import SamplingParams

# SamplingParams' fields that a /v1 request and a conversation's settings name alike, with the value that changes
# nothing (what the way back leaves out): OpenAI's own fields, then the extensions vLLM and SGLang take
OPENAI_FIELDS = {"temperature": 1.0, "top_p": 1.0, "presence_penalty": 0.0, "frequency_penalty": 0.0}
EXTENDED_FIELDS = {"top_k": 0, "min_p": 0.0, "repetition_penalty": 1.0}
SHARED_FIELDS = OPENAI_FIELDS | EXTENDED_FIELDS
COMPLETIONS_DEFAULT_MAX_TOKENS = 16  # as OpenAI's /v1/completions


@dataclass(frozen=True)
class ReplyShape:
    """What shapes a request's replies beyond sampling, whichever API it came through."""

    tools: list[Tool] = field(default_factory=list)
    tool_choice: str = "auto"  # "auto", "none" (the tools are not offered) or "required" (a reply is calls only)
    named: str | None = None  # the function every reply calls (a /v1 named tool choice)
    parallel: bool = False  # a required call may be several
    format: ResponseFormat | None = None  # JSON: a conversation's json_mode is a JSONObjectFormat
    format_field: str = "response_format"  # the format's name, as an error says it


@dataclass(frozen=True)
class Sampling:
    """What the engine is asked for: the parameters (the grammar among them), the tools the replies may call (None:
    none, or tool_choice "none") and the reader of their calls."""

    params: SamplingParams
    tools: list[Tool] | None = None
    calls: CallReader | None = None


def reply_sampling(settings: SamplingSettings, n: int, syntax: ToolSyntax = IN_SYSTEM_PROMPT,
                   thinking_token_budget: int | None = None, defaults: SamplingDefaults = UNKNOWN_MODEL) -> Sampling:
    """A conversation's n replies, written in the model's tool syntax; thinking_token_budget: the server's default,
    where the settings name none."""
    settings = filled(settings, defaults)
    values = {name: getattr(settings, name) for name in SHARED_FIELDS}
    values |= {"n": n, "seed": settings.seed, "max_tokens": settings.max_tokens, "stop": list(settings.stop),
               "ignore_eos": settings.ignore_eos,
               "thinking_token_budget": _or(settings.thinking_token_budget, thinking_token_budget)}
    shape = ReplyShape(tools=settings.tools, tool_choice=settings.tool_choice,
                       format=JSONObjectFormat() if settings.json_mode else None, format_field="json_mode")
    return _build(values, shape, syntax)


def chat_sampling(req: ChatCompletionRequest, syntax: ToolSyntax, thinking_token_budget: int | None = None,
                  defaults: SamplingDefaults = UNKNOWN_MODEL) -> Sampling:
    """A /v1/chat/completions request (max_completion_tokens is OpenAI's newer name for max_tokens);
    thinking_token_budget: the server's default, where the request names none."""
    max_tokens = req.max_completion_tokens if req.max_completion_tokens is not None else req.max_tokens
    choice = req.tool_choice
    shape = ReplyShape(tools=req.tools or [], tool_choice=choice if isinstance(choice, str) else "auto",
                       named=choice.function.name if isinstance(choice, NamedToolChoice) else None,
                       parallel=req.parallel_tool_calls, format=req.response_format)
    values = _openai_values(req, max_tokens, (req.top_logprobs or 0) if req.logprobs else None, defaults)
    values["thinking_token_budget"] = _or(req.thinking_token_budget, thinking_token_budget)
    return _build(values, shape, syntax)


def completion_sampling(req: CompletionRequest, defaults: SamplingDefaults = UNKNOWN_MODEL) -> Sampling:
    """A /v1/completions request: plain text as the model writes it (a thinking model's markers and all), no
    tools."""
    max_tokens = req.max_tokens if req.max_tokens is not None else COMPLETIONS_DEFAULT_MAX_TOKENS
    values = _openai_values(req, max_tokens, req.logprobs, defaults) | {"separate_reasoning": False}
    return _build(values, ReplyShape(), IN_SYSTEM_PROMPT)


# Ollama's option names for SamplingParams' fields, where they differ
OLLAMA_NAMES = {"repetition_penalty": "repeat_penalty"}


def ollama_sampling(options: OllamaOptions | None, format: str | dict | None, tools: list[Tool], syntax: ToolSyntax,
                    max_tokens: int, thinking_token_budget: int | None, separate_reasoning: bool,
                    defaults: SamplingDefaults = UNKNOWN_MODEL) -> Sampling:
    """An Ollama request (/api/chat, /api/generate): its options (num_predict already turned into max_tokens, which
    the caller fits to the context), format ("json" or a JSON Schema) and tools."""
    options = options or OllamaOptions()
    values = {name: _or(getattr(options, OLLAMA_NAMES.get(name, name)), getattr(defaults, name))
              for name in SAMPLING_FIELDS}
    values |= {"seed": options.seed, "stop": options.stop or [], "max_tokens": max_tokens,
               "thinking_token_budget": thinking_token_budget, "separate_reasoning": separate_reasoning}
    match format:
        case "json":
            shape_format = JSONObjectFormat()
        case dict():
            shape_format = JSONSchemaResponseFormat(JSONSchemaFormat(name="format", schema=format))
        case _:
            shape_format = None
    return _build(values, ReplyShape(tools=tools, format=shape_format, format_field="format"), syntax)


def _or(value, default):
    return default if value is None else value


def _openai_values(req: SamplingFields, max_tokens: int | None, logprobs: int | None,
                   defaults: SamplingDefaults) -> dict:
    """SamplingParams' fields from a /v1 request's, each one left out taking the model's default."""
    values = {name: _or(getattr(req, name), getattr(defaults, name)) for name in SHARED_FIELDS}
    return values | {"n": req.n, "seed": req.seed, "stop": req.stop or [], "max_tokens": max_tokens,
                     "logprobs": logprobs, "ignore_eos": req.ignore_eos}


def _build(values: dict, shape: ReplyShape, syntax: ToolSyntax) -> Sampling:
    """SamplingParams(**values) with the grammar of `shape`, once the tools are known to be usable as it asks."""
    json_format = None if isinstance(shape.format, TextFormat | None) else shape.format
    required = shape.tool_choice == "required"
    check_tool_choice(shape.tools, required, shape.named, shape.format_field if json_format else None)
    tools = shape.tools if shape.tools and shape.tool_choice != "none" else None
    params = SamplingParams(**values, structured=_grammar(shape, tools, json_format, syntax))
    calls = CallReader(syntax, tools, only_calls=required or shape.named is not None) if tools else None
    return Sampling(params, tools, calls)


def _grammar(shape: ReplyShape, tools: list[Tool] | None, json_format: ResponseFormat | None, syntax: ToolSyntax
             ) -> StructuredOutput | None:
    """The grammar the replies must match: a required (or the named) tool call, else the JSON format."""
    if tools and shape.tool_choice == "required":
        return call_grammar(tools, syntax, None, shape.parallel)
    if tools and shape.named is not None:
        return call_grammar(tools, syntax, shape.named, parallel=False)
    match json_format:
        case JSONObjectFormat():
            return StructuredOutput.json_object()
        case JSONSchemaResponseFormat(json_schema=spec):
            # strict either way: the reply matches the schema, and a small model cannot ramble in extra fields
            return StructuredOutput.json_schema(spec.schema or {}, strict=True)
    return None


def openai_fields(params: SamplingParams) -> dict:
    """The way back: the body fields of an OpenAI request for `params` (the remote backend's). The extensions go
    only where they change something, so that a server that does not know them takes the request."""
    fields = {"n": params.n, "max_tokens": params.max_tokens} | {name: getattr(params, name) for name in OPENAI_FIELDS}
    fields |= {name: value for name, neutral in EXTENDED_FIELDS.items() if (value := getattr(params, name)) != neutral}
    if params.seed is not None:
        fields["seed"] = params.seed
    if params.stop:
        fields["stop"] = params.stop
    if params.thinking_token_budget is not None:
        fields["thinking_token_budget"] = params.thinking_token_budget  # vLLM's name
    return fields
