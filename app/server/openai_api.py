"""The OpenAI-compatible API under /v1: models, chat completions and completions, whole or streamed.

With the embedded engine (OpenAIController) each prompt becomes one engine request (n replies share the prompt's
KV blocks); with a remote backend (OpenAIRelay) the request is validated here and relayed to that server as it is.
"""

import time
from collections.abc import AsyncIterator

import msgspec
from litestar import Controller, Request, Response, get, post
from litestar.di import NamedDependency
from litestar.exceptions import NotFoundException, ValidationException
from litestar.params import JSONBody
from litestar.response import ServerSentEvent, Stream

from localchat.app.protocol.openai import (
    AssistantMessage,
    ChatChoice,
    ChatCompletion,
    ChatCompletionChunk,
    ChatCompletionRequest,
    ChoiceLogprobs,
    ChunkChoice,
    ChunkDelta,
    Completion,
    CompletionChoice,
    CompletionLogprobs,
    CompletionRequest,
    CompletionTokensDetails,
    FunctionCallDelta,
    Model,
    ModelList,
    PromptTokensDetails,
    SamplingFields,
    TokenLogprobOut,
    ToolCallDelta,
    TopLogprob,
    Usage,
)
from localchat.app.protocol.system import ErrorBody, ErrorDetail
from localchat.app.server.active_requests import ActiveRequests
from localchat.app.server.backends import Backend, BackendDep, BackendRequestError, Update, failure_message
from localchat.app.server.chat_template import template_variables
from localchat.app.server.config import MAX_CHOICES, MAX_PROMPTS, ServerConfig, quoted
from localchat.app.server.disconnect import while_connected
from localchat.app.server.engine_job import EngineJob
from localchat.app.server.openapi import JSONOrEventStream
from localchat.app.server.sampling import Sampling, chat_sampling, completion_sampling
from localchat.app.server.template_messages import openai_messages
from localchat.app.server.tool_calls import CallReader, StreamedReply, finish_reason, template_chat
from localchat.engine.frontend.outputs import CompletionOutput, EngineFailed, TokenLogprob


class OpenAIController(Controller):
    """/v1 on the embedded engine: each request becomes one engine request per prompt."""

    path = "/v1"

    @get("/models")
    async def models(self, backend: BackendDep) -> Response[ModelList]:
        backend.ensure_ready()
        return Response(ModelList(data=[Model(id=backend.model_name, created=int(time.time()),
                                              max_model_len=backend.max_model_len, sampling=backend.sampling)]))

    @post("/chat/completions", status_code=200, operation_class=JSONOrEventStream)
    async def chat_completions(self, request: Request, data: JSONBody[ChatCompletionRequest], backend: BackendDep,
                               active: NamedDependency[ActiveRequests], config: NamedDependency[ServerConfig]
                               ) -> Response[ChatCompletion]:
        """Streamed (stream: true) as server-sent events of ChatCompletionChunk, ending with `data: [DONE]`. A thinking
        model's thinking comes apart from its answer, as reasoning_content (max_tokens counts both)."""
        req = data
        _check_model(req, backend)
        if req.top_logprobs is not None and not req.logprobs:
            raise ValidationException("top_logprobs needs logprobs: true")
        syntax = backend.tool_syntax  # the model's: ready, _check_model asked
        sampling = _checked(chat_sampling, req, syntax, config.thinking_token_budget, backend.sampling)
        try:
            chat, template_tools = template_chat(openai_messages(req.messages), sampling.tools, syntax)
            variables = template_variables(backend.template, req.chat_template_kwargs, req.reasoning_effort)
        except ValueError as error:
            raise ValidationException(str(error)) from None
        prompt = await backend.apply_chat_template(chat, template_tools, variables)
        job = await EngineJob.open(backend, active, [prompt], sampling.params)
        if req.stream:
            include_usage = bool(req.stream_options and req.stream_options.include_usage)
            return ServerSentEvent(_chat_chunks(job, include_usage, sampling.calls))
        results = await while_connected(request, job.collect())
        choices = [_chat_choice(backend, o, sampling.calls) for o in results]
        return Response(ChatCompletion(id=job.id, created=job.created, model=job.model, choices=choices,
                                       usage=_usage(job)))

    @post("/completions", status_code=200, operation_class=JSONOrEventStream)
    async def completions(self, request: Request, data: JSONBody[CompletionRequest], backend: BackendDep,
                          active: NamedDependency[ActiveRequests]) -> Response[Completion]:
        """Streamed (stream: true) as server-sent events of Completion chunks, ending with `data: [DONE]`."""
        req = data
        _check_model(req, backend)
        if req.echo and req.logprobs is not None:
            raise ValidationException("echo with logprobs is not supported (prompt logprobs are not computed)")
        params = _checked(completion_sampling, req, backend.sampling).params
        texts = _prompts(req.prompt)
        if len(texts) > MAX_PROMPTS or len(texts) * params.n > MAX_CHOICES:
            raise ValidationException(f"at most {MAX_PROMPTS} prompts and {MAX_CHOICES} choices (prompts times n) "
                                      f"per request, got {len(texts)} prompts with n={params.n}")
        prompts = [await backend.tokenize(p) for p in texts]
        job = await EngineJob.open(backend, active, prompts, params)
        echoes = [backend.detokenize(p) if req.echo else "" for p in prompts]
        if req.stream:
            include_usage = bool(req.stream_options and req.stream_options.include_usage)
            return ServerSentEvent(_completion_chunks(job, echoes, include_usage))
        results = await while_connected(request, job.collect())
        choices = [CompletionChoice(index=o.index, text=echoes[o.index // params.n] + o.text,
                                    finish_reason=o.finish_reason,
                                    logprobs=_completion_logprobs(backend, o.logprobs))
                   for o in results]
        return Response(Completion(id=job.id, created=job.created, model=job.model, choices=choices,
                                   usage=_usage(job)))


def _check_model(req: SamplingFields, backend: Backend) -> None:
    backend.ensure_ready()
    if req.model is not None and req.model != backend.model_name:
        raise NotFoundException(f"model {quoted(req.model)} does not exist; this server serves {backend.model_name!r}")


def _chat_choice(backend: Backend, output: CompletionOutput, calls: CallReader | None) -> ChatChoice:
    """A whole reply, its tool calls read out of it."""
    content, tool_calls = calls.read(output.text) if calls else (output.text, [])
    message = AssistantMessage(role="assistant", content=content, reasoning_content=output.reasoning or None,
                               tool_calls=tool_calls or None)
    return ChatChoice(index=output.index, message=message,
                      finish_reason=finish_reason(output.finish_reason, tool_calls),
                      logprobs=_chat_logprobs(backend, output.logprobs))


def _checked(build, req: SamplingFields, *args) -> Sampling:
    """The request's sampling (sampling.py), or a 400 that says what cannot work."""
    try:
        return build(req, *args)
    except ValueError as error:
        raise ValidationException(str(error)) from None


def _prompts(prompt) -> list[str | list[int]]:
    """A string, a list of strings, a list of token ids, or a list of token id lists."""
    if isinstance(prompt, str):
        return [prompt]
    if prompt and all(isinstance(p, int) and not isinstance(p, bool) for p in prompt):
        return [prompt]
    if prompt and all(isinstance(p, str) for p in prompt):
        return list(prompt)
    if prompt and all(isinstance(p, list) for p in prompt):
        return [list(p) for p in prompt]
    raise ValidationException("prompt must be a string, a list of strings, a list of token ids "
                              "or a list of token id lists")


def _usage(job: EngineJob) -> Usage:
    prompt = sum(job.prompt_tokens)
    reasoning = sum(job.reasoning_tokens.values())
    return Usage(prompt_tokens=prompt, completion_tokens=job.completion_tokens,
                 total_tokens=prompt + job.completion_tokens,
                 prompt_tokens_details=PromptTokensDetails(cached_tokens=sum(job.cached_tokens)),
                 completion_tokens_details=CompletionTokensDetails(reasoning_tokens=reasoning)
                 if reasoning else None)


def _encode(value) -> str:
    return msgspec.json.encode(value).decode()


async def _chat_chunks(job: EngineJob, include_usage: bool, calls: CallReader | None) -> AsyncIterator[str]:
    first = [ChunkChoice(index=k, delta=ChunkDelta(role="assistant", content="")) for k in range(job.n)]
    yield _encode(ChatCompletionChunk(id=job.id, created=job.created, model=job.model, choices=first))
    replies = [calls.stream() for _ in range(job.n)] if calls else None
    async for update in _updates_or_error(job):
        if isinstance(update, str):
            yield update
            yield "[DONE]"
            return
        choices = []
        for o in update.outputs:
            if replies is None:
                delta, reason = ChunkDelta(content=o.text or None), o.finish_reason
            else:
                delta, reason = _tool_delta(replies[o.index], o.text, o.finish_reason)
            delta.reasoning_content = o.reasoning or None
            if delta.content or delta.reasoning_content or delta.tool_calls or reason or o.logprobs:
                choices.append(ChunkChoice(index=o.index, delta=delta, finish_reason=reason,
                                           logprobs=_chat_logprobs(job.backend, o.logprobs)))
        if choices:
            yield _encode(ChatCompletionChunk(id=job.id, created=job.created, model=job.model, choices=choices))
    if include_usage:
        yield _encode(ChatCompletionChunk(id=job.id, created=job.created, model=job.model, choices=[],
                                          usage=_usage(job)))
    yield "[DONE]"


async def _updates_or_error(job: EngineJob) -> AsyncIterator[Update | str]:
    """The job's updates; if it fails midway, the failure as one last event, an OpenAI error body, that the caller
    follows with `[DONE]` (as vLLM streams it): the client learns why instead of seeing the stream cut. The job is
    closed at the end, or when the client leaves."""
    async with job:
        try:
            async for _, update in job.updates():
                yield update
        except (BackendRequestError, EngineFailed) as error:
            kind = "invalid_request_error" if isinstance(error, BackendRequestError) else "server_error"
            yield _encode(ErrorBody(ErrorDetail(message=failure_message(error), type=kind,
                                                code=error.status if isinstance(error, BackendRequestError) else 500)))


def _tool_delta(reply: StreamedReply, text: str, reason: str | None) -> tuple[ChunkDelta, str | None]:
    """A reply's delta while tool calls may be in it: text that is surely content at once, the calls (each whole, in
    one delta) when the reply ends."""
    content = reply.feed(text)
    if reason is None:
        return ChunkDelta(content=content or None), None
    rest, tool_calls = reply.finish()
    deltas = [ToolCallDelta(index=i, id=call.id, type="function", function=FunctionCallDelta(
        name=call.function.name, arguments=call.function.arguments)) for i, call in enumerate(tool_calls)]
    return ChunkDelta(content=(content + rest) or None, tool_calls=deltas or None), finish_reason(reason, tool_calls)


async def _completion_chunks(job: EngineJob, echoes: list[str], include_usage: bool) -> AsyncIterator[str]:
    if any(echoes):
        choices = [CompletionChoice(index=i * job.n + k, text=echo, finish_reason=None)
                   for i, echo in enumerate(echoes) for k in range(job.n)]
        yield _encode(Completion(id=job.id, created=job.created, model=job.model, choices=choices))
    async for update in _updates_or_error(job):
        if isinstance(update, str):
            yield update
            yield "[DONE]"
            return
        choices = [CompletionChoice(index=o.index, text=o.text, finish_reason=o.finish_reason,
                                    logprobs=_completion_logprobs(job.backend, o.logprobs))
                   for o in update.outputs if o.text or o.finish_reason or o.logprobs]
        if choices:
            yield _encode(Completion(id=job.id, created=job.created, model=job.model, choices=choices))
    if include_usage:
        yield _encode(Completion(id=job.id, created=job.created, model=job.model, choices=[], usage=_usage(job)))
    yield "[DONE]"


def _chat_logprobs(backend: Backend, logprobs: list[TokenLogprob] | None) -> ChoiceLogprobs | None:
    if logprobs is None:
        return None
    content = []
    for lp in logprobs:
        token = backend.detokenize([lp.token_id])
        alternatives = [TopLogprob(token=(t := backend.detokenize([i])), logprob=v, bytes=list(t.encode()))
                        for i, v in lp.top]
        content.append(TokenLogprobOut(token=token, logprob=lp.logprob, bytes=list(token.encode()),
                                       top_logprobs=alternatives))
    return ChoiceLogprobs(content=content)


def _completion_logprobs(backend: Backend, logprobs: list[TokenLogprob] | None) -> CompletionLogprobs | None:
    if logprobs is None:
        return None
    tokens = [backend.detokenize([lp.token_id]) for lp in logprobs]
    offsets, at = [], 0
    for token in tokens:
        offsets.append(at)
        at += len(token)
    return CompletionLogprobs(tokens=tokens, token_logprobs=[lp.logprob for lp in logprobs],
                              top_logprobs=[{backend.detokenize([i]): v for i, v in lp.top} for lp in logprobs],
                              text_offset=offsets)


class OpenAIRelay(Controller):
    """/v1 in front of a remote server (--engine-url): each request is checked here, as the embedded engine's
    are, then relayed to that server as it is, and its answer streamed back."""

    path = "/v1"

    @get("/models")
    async def models(self, request: Request, backend: BackendDep) -> Response[ModelList]:
        return await _relay(request, backend, "GET", "/v1/models", None)

    @post("/chat/completions", status_code=200, operation_class=JSONOrEventStream)
    async def chat_completions(self, request: Request, data: JSONBody[ChatCompletionRequest],
                               backend: BackendDep) -> Response[ChatCompletion]:
        return await _relay(request, backend, "POST", "/v1/chat/completions", await request.body())

    @post("/completions", status_code=200, operation_class=JSONOrEventStream)
    async def completions(self, request: Request, data: JSONBody[CompletionRequest],
                          backend: BackendDep) -> Response[Completion]:
        return await _relay(request, backend, "POST", "/v1/completions", await request.body())


async def _relay(request: Request, backend: Backend, method: str, path: str, body: bytes | None) -> Response:
    """The remote server's answer, streamed back. A whole answer comes once it is written: a client that leaves
    meanwhile closes the relayed request, and the remote server aborts it."""
    response = await while_connected(request, backend.proxy(method, path, body))

    async def relay() -> AsyncIterator[bytes]:
        try:
            async for chunk in response.aiter_raw():
                yield chunk
        finally:
            await response.aclose()

    return Stream(relay(), status_code=response.status_code,
                  media_type=response.headers.get("content-type", "application/json"))
