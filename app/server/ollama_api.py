"""Ollama's API (its docs/api.md) on the embedded engine, for the clients written for Ollama: /api/chat and
/api/generate (NDJSON streams unless "stream": false, with Ollama's counters), the models (/api/tags, /api/show,
/api/ps, /api/version), and clear refusals for what this app never does (pull, push, create, delete, embed).

A request names its model as Ollama's clients do (ollama_models.py); naming another model of this machine's switches
to it (model_turns.py). Every error is Ollama's `{"error": "..."}`."""

import asyncio
import json
import logging
import time
from collections.abc import AsyncIterator
from dataclasses import dataclass, field
from datetime import UTC, datetime
from importlib.metadata import version

import msgspec
from litestar import Controller, MediaType, Request, Response, delete, get, post
from litestar.di import NamedDependency
from litestar.exceptions import HTTPException, NotFoundException, ValidationException
from litestar.openapi.datastructures import ResponseSpec
from litestar.params import JSONBody
from litestar.response import Stream

from localchat.app.protocol.ollama import (
    ChatRequest,
    ChatResponse,
    EmbedRequest,
    Error,
    FunctionCall,
    GenerateRequest,
    GenerateResponse,
    ModelList,
    ReplyMessage,
    RunningModels,
    ShowRequest,
    ShowResponse,
    Think,
    ToolCall,
    Version,
)
from localchat.app.protocol.openai import FunctionDefinition, Tool
from localchat.app.protocol.openai import ToolCall as OpenAIToolCall
from localchat.app.protocol.sampling import SamplingDefaults
from localchat.app.server.active_requests import ActiveRequests
from localchat.app.server.backends import Backend, BackendDep, BackendNotReady, BackendRequestError, failure_message
from localchat.app.server.chat_template import template_variables
from localchat.app.server.config import ServerConfig, quoted
from localchat.app.server.context_budget import ContextFull, fewest_left_out
from localchat.app.server.disconnect import while_connected
from localchat.app.server.engine_job import EngineJob
from localchat.app.server.error_text import error_message
from localchat.app.server.json_body import FORM_JSON
from localchat.app.server.model_turns import ModelTurns
from localchat.app.server.ollama_models import find_model, keep_alive_seconds, listed, running, shown
from localchat.app.server.openapi import JSONOrNDJSON
from localchat.app.server.sampling import Sampling, ollama_sampling
from localchat.app.server.store import StoreError
from localchat.app.server.template_messages import TemplateMessage, ollama_messages, prompt_messages
from localchat.app.server.tool_calls import template_chat
from localchat.engine.frontend.outputs import EngineFailed
from localchat.engine.loading.model_catalog import LocalModel, find_models, model_at

VERSION = version("localchat")
log = logging.getLogger("localchat.app")
NDJSON = "application/x-ndjson"
NUM_CTX_HEADER = "X-Localchat-Num-Ctx"  # the context a request ran in: its num_ctx, clamped to the engine's
NEVER_DOWNLOADS = ("localchat never downloads, uploads or changes model files: put a GGUF file or a model folder "
                   "where `localchat models` looks (see the README), and it is listed")


def _error(status: int, message: str) -> Response:
    return Response(Error(error=message), status_code=status)


def _http_error(request: Request, error: HTTPException) -> Response:
    if error.status_code >= 500:
        return _unexpected(request, error)
    return _error(error.status_code, error_message(error))


def _unexpected(request: Request, error: Exception) -> Response:
    log.error("%s %s failed", request.method, request.url.path, exc_info=error)
    return _error(500, "the server failed to answer this request (the engine log has the details)")


# the answers of the routes for what localchat never does, as the schema documents them: a refusal, always
REFUSED = {400: ResponseSpec(Error, description=f"always: {NEVER_DOWNLOADS}")}
CANNOT_EMBED = {400: ResponseSpec(Error, description="always, for a model of this machine: localchat runs text "
                                                     "generation models, none that embeds")}

# Ollama's error shape for every failure of its routes (the app's handlers answer in OpenAI's)
OLLAMA_EXCEPTION_HANDLERS = {
    HTTPException: _http_error,
    StoreError: lambda request, error: _error(404, str(error)),
    BackendNotReady: lambda request, error: _error(503, str(error)),
    BackendRequestError: lambda request, error: _error(error.status, str(error)),
    msgspec.ValidationError: lambda request, error: _error(400, str(error)),
    Exception: _unexpected,
}


class OllamaController(Controller):
    path = "/api"
    exception_handlers = OLLAMA_EXCEPTION_HANDLERS
    tags = ["ollama"]
    opt = {FORM_JSON: True}  # `curl -d` with no -H, as Ollama's documentation writes its examples (json_body.py)

    @get("/version")
    async def ollama_version(self) -> Version:
        return Version(VERSION)

    @get("/tags")
    async def local_models(self, backend: BackendDep) -> ModelList:
        """The models `localchat models` lists that localchat runs, under their Ollama names (`name:latest`)."""
        _check_embedded(backend)
        return ModelList([listed(m) for m in await _models(backend)])

    @post("/show", status_code=200)
    async def show(self, data: JSONBody[ShowRequest], backend: BackendDep) -> ShowResponse:
        _check_embedded(backend)
        model = await _model(backend, data.model or data.name)
        return await asyncio.to_thread(shown, model, data.verbose)

    @get("/ps")
    async def ps(self, backend: BackendDep, turns: NamedDependency[ModelTurns]) -> RunningModels:
        """The model loaded now (none while one loads or after keep_alive unloaded it)."""
        _check_embedded(backend)
        if not backend.loading.ready:
            return RunningModels([])
        model = next((m for m in await _models(backend) if m.name == backend.model_choice), None)
        if model is None:
            return RunningModels([])
        expires = None if turns.unload_at is None else time.time() + turns.unload_at - turns.clock()
        return RunningModels([running(model, backend.max_model_len, expires)])

    @post("/chat", status_code=200, operation_class=JSONOrNDJSON)
    async def chat(self, request: Request, data: JSONBody[ChatRequest], backend: BackendDep,
                   turns: NamedDependency[ModelTurns], active: NamedDependency[ActiveRequests],
                   config: NamedDependency[ServerConfig]) -> Response[ChatResponse]:
        """Streamed as NDJSON unless "stream": false; the last object has done true and the counters."""
        started = time.monotonic()
        req = data
        _check_embedded(backend)
        model = await _model(backend, req.model)
        keep_alive = _keep_alive(req.keep_alive)
        if any(m.images for m in req.messages):
            raise BackendRequestError(f"{req.model} does not take images: localchat runs text-only models")
        if not req.messages:
            return await _load_or_unload(turns, backend, model, req.model, keep_alive, chat=True)
        turn = await turns.enter(model)
        try:
            backend.check_chat()
            messages = ollama_messages(req.messages)
            variables = _think_variables(backend, req.think, req.model)
            tools = [Tool(type="function", function=FunctionDefinition(
                name=t.function.name, description=t.function.description, parameters=t.function.parameters))
                for t in req.tools or []]
            syntax = backend.tool_syntax
            num_ctx = _num_ctx(backend, req.options)
            prompt = await _fitted_chat(backend, messages, tools, syntax, variables, num_ctx)
            sampling = _sampling(req, tools, syntax, _max_tokens(req.options, len(prompt), num_ctx), config,
                                 backend.sampling)
            job = await EngineJob.open(backend, active, [prompt], sampling.params)
        except BaseException:
            await turns.leave(keep_alive)
            raise
        reply = _Reply(job, req.model, started, turn.load_s, sampling, chat=True)
        return await reply.answer(request, req.stream, turns, keep_alive, num_ctx)

    @post("/generate", status_code=200, operation_class=JSONOrNDJSON)
    async def generate(self, request: Request, data: JSONBody[GenerateRequest], backend: BackendDep,
                       turns: NamedDependency[ModelTurns], active: NamedDependency[ActiveRequests],
                       config: NamedDependency[ServerConfig]) -> Response[GenerateResponse]:
        """Streamed as NDJSON unless "stream": false. The prompt goes through the model's chat template (as a user
        message after `system`) unless `raw` or the model has none (a base model)."""
        started = time.monotonic()
        req = data
        _check_embedded(backend)
        model = await _model(backend, req.model)
        keep_alive = _keep_alive(req.keep_alive)
        if req.images:
            raise BackendRequestError(f"{req.model} does not take images: localchat runs text-only models")
        if req.template:
            raise ValidationException("template: localchat renders the model's own chat template (Jinja), not Ollama's "
                                      "Go templates; render the prompt yourself and send it with raw: true")
        if req.suffix:
            raise ValidationException("suffix: fill-in-the-middle is not supported")
        if not req.prompt and not req.context:
            return await _load_or_unload(turns, backend, model, req.model, keep_alive, chat=False)
        turn = await turns.enter(model)
        try:
            templated = not req.raw and backend.can_chat
            prompt = await _generate_prompt(backend, req, templated)
            num_ctx = _num_ctx(backend, req.options)
            if len(prompt) >= num_ctx:
                raise BackendRequestError(f"the prompt has {len(prompt)} tokens: more than fit in a context of "
                                          f"{num_ctx} tokens (num_ctx)")
            sampling = _sampling(req, [], backend.tool_syntax, _max_tokens(req.options, len(prompt), num_ctx),
                                 config, backend.sampling, separate_reasoning=templated)
            job = await EngineJob.open(backend, active, [prompt], sampling.params)
        except BaseException:
            await turns.leave(keep_alive)
            raise
        reply = _Reply(job, req.model, started, turn.load_s, sampling, chat=False,
                       context=prompt if not req.raw else None)
        return await reply.answer(request, req.stream, turns, keep_alive, num_ctx)

    @post(["/embed", "/embeddings"], status_code=400, responses=CANNOT_EMBED)
    async def embed(self, data: JSONBody[EmbedRequest], backend: BackendDep) -> Response[Error]:
        """Always refused (400), once the model is found: localchat runs no model that embeds."""
        _check_embedded(backend)
        await _model(backend, data.model)
        return _error(400, f"{data.model} cannot embed: localchat runs text generation models, none that embeds")

    @post(["/pull", "/push", "/create", "/copy"], status_code=400, responses=REFUSED)
    async def never_downloads(self) -> Response[Error]:
        """Always refused (400): localchat never downloads, uploads or changes model files."""
        return _error(400, NEVER_DOWNLOADS)

    @delete("/delete", status_code=400, responses=REFUSED)
    async def never_deletes(self) -> Response[Error]:
        """Always refused (400): localchat never deletes model files."""
        return _error(400, NEVER_DOWNLOADS)


@get("/", media_type=MediaType.TEXT, include_in_schema=False)
async def listener_root() -> str:
    """The tokenless listener's /: what Ollama answers there (some clients check it)."""
    return "Ollama is running"


def _check_embedded(backend: Backend) -> None:
    if not backend.can_switch_models:
        raise BackendRequestError("Ollama's API runs on the embedded engine; this one relays to another server "
                                  "(--engine-url): use its /v1 API", 501)


async def _models(backend: Backend) -> list[LocalModel]:
    """The models localchat runs of those `localchat models` lists, and the one the engine runs if `--model` named
    it by a path outside the model folders."""
    def catalog() -> list[LocalModel]:
        models = find_models()
        if all(m.name != backend.model_choice for m in models) and (running := model_at(backend.model_choice)):
            models.append(running)
        return models

    return [m for m in await asyncio.to_thread(catalog) if m.supported]


async def _model(backend: Backend, name: str) -> LocalModel:
    model = find_model(await _models(backend), name)
    if model is None:
        raise NotFoundException(f"model {quoted(name)} not found: GET /api/tags lists the models on this machine")
    return model


def _keep_alive(value) -> float | None:
    try:
        return keep_alive_seconds(value)
    except ValueError as error:
        raise ValidationException(str(error)) from None


async def _load_or_unload(turns: ModelTurns, backend: Backend, model: LocalModel, name: str, keep_alive: float | None,
                          chat: bool) -> Response:
    """Ollama's empty request: load the model, or with keep_alive 0 unload it."""
    if keep_alive == 0:
        if model.name == backend.model_choice:
            await turns.keep(0)
        reason = "unload"
    else:
        await turns.enter(model)
        await turns.leave(keep_alive)
        reason = "load"
    fields = {"model": name, "created_at": _now(), "done": True, "done_reason": reason}
    if chat:
        return Response(ChatResponse(message=ReplyMessage(role="assistant", content=""), **fields))
    return Response(GenerateResponse(response="", **fields))


def _think_variables(backend: Backend, think: Think | None, name: str) -> dict:
    """Ollama's think as the template's variables: true/false to enable_thinking, a level to reasoning_effort."""
    if think is None:
        return {}
    if think is not False and not backend.thinks:
        raise BackendRequestError(f"{name} does not support thinking")
    source = backend.template.tokenizer.chat_template if backend.template else None
    values = {}
    if think is True and isinstance(source, str) and "enable_thinking" in source:
        values["enable_thinking"] = True
    effort = "none" if think is False else None if think is True else {"max": "high"}.get(think, think)
    return template_variables(backend.template, values, effort)


async def _generate_prompt(backend: Backend, req: GenerateRequest, templated: bool) -> list[int]:
    """A generate request's tokens: its context, then its prompt (through the chat template where `templated`)."""
    if templated:
        chat, _ = template_chat(prompt_messages(req.system, req.prompt), None, backend.tool_syntax)
        prompt = await backend.apply_chat_template(chat, None, _think_variables(backend, req.think, req.model))
    else:
        prompt = await backend.tokenize(req.prompt) if req.prompt else []
    return list(req.context or []) + prompt


def _num_ctx(backend: Backend, options) -> int:
    """The context a request runs in: its num_ctx, at most the engine's."""
    engine = backend.max_model_len
    asked = options.num_ctx if options is not None else None
    return engine if asked is None or asked <= 0 else min(asked, engine)


def _max_tokens(options, prompt_tokens: int, num_ctx: int) -> int:
    """num_predict (-1 or -2 or none: until the context is full), fitted to what the context leaves."""
    room = max(num_ctx - prompt_tokens, 1)
    asked = options.num_predict if options is not None else None
    return room if asked is None or asked < 0 else max(min(asked, room), 1)


async def _fitted_chat(backend: Backend, messages: list[TemplateMessage], tools: list[Tool], syntax,
                       variables: dict, num_ctx: int) -> list[int]:
    """The chat's prompt, fitted to num_ctx as Ollama fits a chat (context_budget.fewest_left_out): its oldest
    messages but the system messages and the last are the ones it may leave out; a 400 where it cannot fit."""
    droppable = [i for i, m in enumerate(messages[:-1]) if m.role != "system"]

    async def prompt_without(count: int) -> list[int]:
        left_out = set(droppable[:count])
        try:
            chat, template_tools = template_chat([m for i, m in enumerate(messages) if i not in left_out], tools,
                                                 syntax)
        except ValueError as error:
            raise ValidationException(str(error)) from None
        return await backend.apply_chat_template(chat, template_tools, variables)

    try:
        return await fewest_left_out(len(droppable), num_ctx, prompt_without)
    except ContextFull as error:
        raise BackendRequestError(f"{error} (num_ctx)") from None


def _sampling(req: ChatRequest | GenerateRequest, tools: list[Tool], syntax, max_tokens: int, config: ServerConfig,
              defaults: SamplingDefaults, separate_reasoning: bool = True) -> Sampling:
    try:
        return ollama_sampling(req.options, req.format or None, tools, syntax, max_tokens,
                               config.thinking_token_budget, separate_reasoning, defaults)
    except ValueError as error:
        raise ValidationException(str(error)) from None


def _now() -> str:
    return datetime.now(UTC).isoformat().replace("+00:00", "Z")


def _done_reason(finish_reason: str | None) -> str:
    return "length" if finish_reason == "length" else "stop"


@dataclass
class _Reply:
    """One request's reply, as Ollama's objects: the deltas, then a last one with done and the counters."""

    job: EngineJob
    model: str  # the name the request gave, which every object repeats
    started: float  # when the request came (total_duration)
    load_s: float
    sampling: Sampling
    chat: bool  # /api/chat's objects, else /api/generate's
    context: list[int] | None = None  # generate's prompt tokens, returned with the reply's (none for raw)
    opened: float = field(default_factory=time.monotonic)  # when the engine got it (prompt_eval_duration)
    first_token: float | None = None
    token_ids: list[int] = field(default_factory=list)
    finish_reason: str | None = None

    async def answer(self, request: Request, stream: bool, turns: ModelTurns, keep_alive: float | None,
                     num_ctx: int) -> Response:
        """The reply as a stream, or whole once written (aborted if its client leaves first: disconnect.py)."""
        headers = {NUM_CTX_HEADER: str(num_ctx)}
        if stream:
            return Stream(self._lines(turns, keep_alive), media_type=NDJSON, headers=headers)
        try:
            text, thinking = await while_connected(request, self._whole())
        finally:
            await turns.leave(keep_alive)
        content, calls = self._calls(text)
        return Response(self._object(content, thinking, calls, done=True), headers=headers)

    async def _whole(self) -> tuple[str, str]:
        """The reply's text and thinking, once it is written."""
        text, thinking = "", ""
        async for out in self._outputs():
            text += out.text
            thinking += out.reasoning or ""
        return text, thinking

    async def _outputs(self):
        """The reply's outputs as they come; the job is closed at the end, or when the client leaves."""
        async with self.job:
            async for _, update in self.job.updates():
                for out in update.outputs:
                    if self.first_token is None and out.token_ids:
                        self.first_token = time.monotonic()
                    self.token_ids += out.token_ids
                    self.finish_reason = out.finish_reason or self.finish_reason
                    yield out

    def _calls(self, text: str) -> tuple[str, list[ToolCall]]:
        if self.sampling.calls is None:
            return text, []
        content, calls = self.sampling.calls.read(text)
        return content or "", [_ollama_call(c) for c in calls]

    async def _lines(self, turns: ModelTurns, keep_alive: float | None) -> AsyncIterator[bytes]:
        reader = self.sampling.calls.stream() if self.sampling.calls else None
        try:
            async for out in self._outputs():
                content = reader.feed(out.text) if reader else out.text
                calls = []
                if reader and out.finish_reason:
                    rest, found = reader.finish()
                    content, calls = content + rest, [_ollama_call(c) for c in found]
                if content or out.reasoning or calls:
                    yield self._line(self._object(content, out.reasoning or "", calls, done=False))
            yield self._line(self._object("", "", [], done=True))
        except (BackendRequestError, EngineFailed) as error:
            yield self._line(Error(error=failure_message(error)))
        finally:
            await turns.leave(keep_alive)

    @staticmethod
    def _line(value) -> bytes:
        return msgspec.json.encode(value) + b"\n"

    def _object(self, content: str, thinking: str, calls: list[ToolCall], done: bool):
        fields = {"model": self.model, "created_at": _now(), "done": done}
        if done:
            now = time.monotonic()
            first = self.first_token or now
            fields |= {"done_reason": _done_reason(self.finish_reason),
                       "total_duration": _ns(now - self.started), "load_duration": _ns(self.load_s),
                       "prompt_eval_count": sum(self.job.prompt_tokens),
                       "prompt_eval_duration": _ns(first - self.opened),
                       "eval_count": len(self.token_ids), "eval_duration": _ns(now - first)}
        if self.chat:
            message = ReplyMessage(role="assistant", content=content, thinking=thinking or None,
                                   tool_calls=calls or None)
            return ChatResponse(message=message, **fields)
        context = self.context + self.token_ids if done and self.context is not None else None
        return GenerateResponse(response=content, thinking=thinking or None, context=context, **fields)


def _ollama_call(call: OpenAIToolCall) -> ToolCall:
    return ToolCall(function=FunctionCall(name=call.function.name, arguments=json.loads(call.function.arguments)))


def _ns(seconds: float) -> int:
    return max(int(seconds * 1e9), 0)
