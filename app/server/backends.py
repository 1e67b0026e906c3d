"""What generates the replies: the embedded engine, or a remote OpenAI-compatible server, behind one small
interface.

    backend.start()                                  begin loading (returns at once; see health())
    stream = await backend.open(prompt, params, id)  validate and start a request, or raise
    async for update in stream: ...                  reply deltas, by reply index
    await backend.abort(id)                          its stream ends with finish_reason "abort"

The embedded backend takes prompts as token ids (its tokenizer and chat template are at hand, so
conversations reuse their exact prefix tokens); the remote one takes chat messages and leaves prefix
sharing to that server's own cache.
"""

import asyncio
import ctypes
import gc
import threading
import time
from collections.abc import AsyncIterator
from dataclasses import dataclass, field

import httpx
import msgspec

from localchat.app.protocol import LoadProgress
from localchat.app.server.chat_template import ChatTemplate
from localchat.app.server.config import MAX_CHARS_PER_TOKEN
from localchat.app.sse import async_data_lines
from localchat.engine.model_catalog import EMBEDDED_NAME
from localchat.engine.outputs import CompletionOutput, RequestFailed
from localchat.engine.sampling_params import SamplingParams
from localchat.engine.structured_output import StructuredOutput


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
class Counters:
    requests: int = 0
    running: int = 0
    generated_tokens: int = 0
    prompt_tokens: int = 0
    cached_prompt_tokens: int = 0


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


class Backend:
    """What the server needs of a backend (see the module docstring)."""

    kind: str
    model_name: str | None
    template: ChatTemplate | None  # None: prompts are chat messages, messages keep no token ids
    loading: Loading
    stopping: bool = False

    @property
    def error(self) -> str | None:
        """Why the backend cannot serve (it failed to load, or failed for good later); None while it can."""
        return self.loading.error

    @property
    def can_chat(self) -> bool:
        """Whether the model writes chat replies (a base model, without a chat template, only continues text)."""
        return True

    def start(self) -> None: ...
    def ensure_ready(self) -> None: ...
    def check_chat(self) -> None: ...
    def check_text_size(self, num_chars: int) -> None: ...
    async def open(self, prompt, params: SamplingParams, request_id: str) -> AsyncIterator[Update]: ...
    async def abort(self, request_id: str) -> None: ...
    async def stats(self) -> dict[str, float]: ...
    async def forget(self, dropped: list[list[int]], kept: list[list[int]]) -> None: ...
    async def close(self) -> None: ...


class EmbeddedBackend(Backend):
    kind = "embedded"

    def __init__(self, model: str | None = None, **engine_args):
        self.model_arg = model
        self.engine_args = {k: v for k, v in engine_args.items() if v is not None}
        self.llm = None
        self.template: ChatTemplate | None = None
        self.loading = Loading()
        self.model_name: str | None = None
        self.stopping = False

    def start(self) -> None:
        threading.Thread(target=self._load, name="localchat-load", daemon=True).start()

    def _load(self) -> None:
        from localchat.engine import AsyncLLM

        try:
            llm = AsyncLLM(self.model_arg, on_progress=self.loading.report, **self.engine_args)
            self.loading.stage, self.loading.fraction = "warming up", None
            asyncio.run(_warm_up(llm))
            self.template = ChatTemplate(llm.tokenizer)
            self.model_name = llm.engine.model_name
            self.llm = llm
            self.loading.stage, self.loading.fraction, self.loading.ready = "ready", 1.0, True
        except BaseException as error:  # shown by /health; the process keeps serving it
            self.loading.error = f"{type(error).__name__}: {error}"
            self.loading.stage = "failed"

    @property
    def model_choice(self) -> str:
        """The name of the model it runs or loads, as find_models() lists it."""
        return self.model_arg or EMBEDDED_NAME

    async def switch(self, model: str) -> None:
        """Unload the model and load `model` in its place; returns once loading has begun (see health()).
        The caller has ended the running requests."""
        if not (self.loading.ready or self.loading.error):
            raise BackendRequestError(f"{self.model_choice} is still loading: switch once it is ready", 409)
        old, self.llm, self.template = self.llm, None, None
        self.model_arg, self.model_name = model, None
        self.loading = Loading(stage="unloading the previous model")
        if old is not None:
            await asyncio.to_thread(old.shutdown)
            del old
            await asyncio.to_thread(release_memory)
        self.start()

    @property
    def max_model_len(self) -> int | None:
        return self.llm.engine.max_model_len if self.llm else None

    @property
    def error(self) -> str | None:
        if self.llm is not None and self.llm.error is not None:
            return f"the engine stopped after a failure: {self.llm.error}"
        return self.loading.error

    def ensure_ready(self):
        if self.stopping:
            raise BackendNotReady("the engine is stopping")
        if self.llm is None or self.error:
            raise BackendNotReady(f"the model failed to load: {self.loading.error}" if self.loading.error
                                  else self.error or f"the model is loading ({self.loading.stage})")
        return self.llm

    @property
    def can_chat(self) -> bool:
        return self.llm is not None and self.llm.tokenizer.chat_template is not None

    def check_chat(self) -> None:
        """A base model (no chat template in its files) serves /v1/completions only."""
        self.ensure_ready()
        if not self.can_chat:
            raise BackendRequestError(f"{self.model_name} has no chat template (a base model, not a chat model): "
                                      "it answers /v1/completions only; chats need a chat model")

    def check_text_size(self, num_chars: int) -> None:
        """Refuse a text that cannot fit in max_model_len tokens without tokenizing it (that takes seconds)."""
        limit = self.ensure_ready().engine.max_model_len * MAX_CHARS_PER_TOKEN
        if num_chars > limit:
            raise BackendRequestError(f"the text has {num_chars:,} characters: more than fit in this engine's "
                                      f"max_model_len of {self.max_model_len} tokens")

    async def apply_chat_template(self, messages: list[dict], tools: list[dict] | None = None) -> list[int]:
        """The chat's prompt token ids (with the tools, for a template that renders them), tokenized off the event
        loop."""
        engine = self.ensure_ready().engine
        self.check_chat()
        self.check_text_size(sum(len(m["content"]) for m in messages) + len(str(tools or "")))
        return await asyncio.to_thread(engine.apply_chat_template, messages, tools)

    async def tokenize(self, prompt: str | list[int]) -> list[int]:
        engine = self.ensure_ready().engine
        if isinstance(prompt, str):
            self.check_text_size(len(prompt))
        return await asyncio.to_thread(engine.tokenize, prompt)

    def detokenize(self, token_ids: list[int]) -> str:
        return self.ensure_ready().tokenizer.decode(token_ids)

    def token_text(self, token_id: int) -> str:
        return self.ensure_ready().tokenizer.decode([token_id])

    async def check_request(self, prompt: list[int], params: SamplingParams) -> None:
        """A clear BackendRequestError for a request the engine cannot run; its grammar is compiled here, off the
        event loop (a big one takes seconds)."""
        engine = self.ensure_ready().engine
        try:
            await asyncio.to_thread(engine.check_request, prompt, params)
        except ValueError as error:
            raise BackendRequestError(str(error)) from None

    async def open(self, prompt: list[int], params: SamplingParams, request_id: str) -> AsyncIterator[Update]:
        """The request is in the engine's queue when this returns: an abort that follows always finds it."""
        llm = self.ensure_ready()
        try:
            deltas = await llm.add_request(prompt, params, request_id)
        except ValueError as error:
            raise BackendRequestError(str(error)) from None
        return self._updates(deltas)

    async def _updates(self, deltas) -> AsyncIterator[Update]:
        """The engine's deltas; a request that failed alone (RequestFailed: its grammar) ends with a
        BackendRequestError, its client's fault."""
        try:
            async for out in deltas:
                yield Update(out.outputs, len(out.prompt_token_ids), out.num_cached_tokens, out.finished)
        except RequestFailed as error:
            raise BackendRequestError(str(error)) from None

    async def abort(self, request_id: str) -> None:
        if self.llm is not None:
            await self.llm.abort(request_id)

    async def stats(self) -> dict[str, float]:
        return await self.llm.stats() if self.llm is not None else {}

    async def forget(self, dropped: list[list[int]], kept: list[list[int]]) -> None:
        """Drop the cached KV blocks (memory and disk) of the token sequences `dropped` that `kept` do not share."""
        if self.llm is not None and self.llm.alive:
            await self.llm.forget(dropped, kept)

    async def close(self) -> None:
        self.stopping = True
        if self.llm is not None:
            await asyncio.to_thread(self.llm.shutdown)


def release_memory() -> None:
    """Free an unloaded model's memory now: its cycles collected, and glibc's freed pages given back to the
    system (without malloc_trim the process keeps them, and every switch of models grows it)."""
    gc.collect()
    try:
        ctypes.CDLL("libc.so.6").malloc_trim(0)
    except (OSError, AttributeError):  # not glibc
        pass


async def _warm_up(llm) -> None:
    """One short request, so that the first user's request does not pay for the first forward passes: a chat, or
    for a base model (no chat template) plain text. It asks for JSON: the grammar compiler's view of the vocabulary
    is built now (~0.3 s, holding the GIL), not while the first constrained request's neighbours stream."""
    engine = llm.engine
    prompt = (engine.apply_chat_template([{"role": "user", "content": "Hello"}]) if llm.tokenizer.chat_template
              else engine.tokenize("Hello"))
    params = SamplingParams(max_tokens=2, temperature=0, structured=StructuredOutput.json_object())
    async for _ in llm.generate(prompt, params, request_id="warm-up"):
        pass


class _StreamChoice(msgspec.Struct):
    index: int
    delta: dict = {}
    finish_reason: str | None = None


class _StreamChunk(msgspec.Struct):
    choices: list[_StreamChoice] = []
    usage: dict | None = None


class RemoteBackend(Backend):
    """An OpenAI-compatible server (vLLM, SGLang, another `localchat serve`) at `url`."""

    kind = "remote"
    template = None
    max_model_len = None

    def __init__(self, url: str, model: str | None = None, api_key: str | None = None):
        self.url = url.rstrip("/").removesuffix("/v1")
        self.model_name = model
        headers = {"Authorization": f"Bearer {api_key}"} if api_key else {}
        self.client = httpx.AsyncClient(base_url=self.url, headers=headers,
                                        timeout=httpx.Timeout(10.0, read=None))
        self.loading = Loading(stage=f"connecting to {self.url}")
        self.counters = Counters()
        self.responses: dict[str, httpx.Response] = {}
        self.stopping = False
        self._task: asyncio.Task | None = None

    def start(self) -> None:
        self._task = asyncio.get_running_loop().create_task(self._connect())

    async def _connect(self) -> None:
        while not self.stopping:
            try:
                response = await self.client.get("/v1/models")
                if response.status_code == 401:
                    raise BackendNotReady(f"{self.url} refused the API key (set LOCALCHAT_ENGINE_API_KEY)")
                response.raise_for_status()
                served = [m["id"] for m in response.json()["data"]]
                if self.model_name is None and served:
                    self.model_name = served[0]
                if self.model_name not in served:
                    raise BackendNotReady(f"{self.url} does not serve {self.model_name!r} (it serves {served})")
                self.loading.stage, self.loading.ready = "ready", True
                return
            except BackendNotReady as error:
                self.loading.error, self.loading.stage = str(error), "failed"
                return
            except (httpx.HTTPError, ValueError, KeyError) as error:
                # "loading" while the other server starts (a server still loading answers 503)
                self.loading.stage = f"connecting to {self.url} ({type(error).__name__})"
                await asyncio.sleep(0.5)

    def ensure_ready(self) -> None:
        if self.stopping:
            raise BackendNotReady("the engine is stopping")
        if not self.loading.ready:
            raise BackendNotReady(self.loading.error or f"waiting for {self.url}")

    async def open(self, prompt: list[dict], params: SamplingParams, request_id: str) -> AsyncIterator[Update]:
        self.ensure_ready()
        body = {"model": self.model_name, "messages": prompt, "n": params.n, "temperature": params.temperature,
                "top_p": params.top_p, "presence_penalty": params.presence_penalty,
                "frequency_penalty": params.frequency_penalty, "max_tokens": params.max_tokens,
                "stream": True, "stream_options": {"include_usage": True}}
        if params.top_k:
            body["top_k"] = params.top_k
        if params.min_p:
            body["min_p"] = params.min_p
        if params.repetition_penalty != 1.0:
            body["repetition_penalty"] = params.repetition_penalty
        if params.seed is not None:
            body["seed"] = params.seed
        if params.stop:
            body["stop"] = params.stop
        request = self.client.build_request("POST", "/v1/chat/completions", json=body)
        try:
            response = await self.client.send(request, stream=True)
        except httpx.HTTPError as error:
            raise BackendNotReady(f"{self.url} is unreachable: {error}") from None
        if response.status_code >= 400:
            text = (await response.aread()).decode(errors="replace")
            await response.aclose()
            try:
                text = msgspec.json.decode(text)["error"]["message"]
            except (msgspec.DecodeError, KeyError, TypeError):
                pass
            raise BackendRequestError(f"{self.url}: {text}", response.status_code if response.status_code < 500
                                      else 502)
        self.responses[request_id] = response
        return self._stream(response, params.n, request_id)

    async def _stream(self, response: httpx.Response, n: int, request_id: str) -> AsyncIterator[Update]:
        finished: set[int] = set()
        self.counters.requests += 1
        self.counters.running += 1
        try:
            try:
                async for data in async_data_lines(response.aiter_lines()):
                    chunk = msgspec.json.decode(data, type=_StreamChunk)
                    outputs = []
                    for choice in chunk.choices:
                        text = choice.delta.get("content") or ""
                        if text:
                            self.counters.generated_tokens += 1
                        outputs.append(CompletionOutput(choice.index, text, [], choice.finish_reason))
                        if choice.finish_reason:
                            finished.add(choice.index)
                    if chunk.usage:
                        prompt = chunk.usage.get("prompt_tokens") or 0
                        cached = (chunk.usage.get("prompt_tokens_details") or {}).get("cached_tokens") or 0
                        self.counters.prompt_tokens += prompt
                        self.counters.cached_prompt_tokens += cached
                        yield Update(outputs, prompt, cached, finished=len(finished) == n)
                    elif outputs:
                        yield Update(outputs)
            except (httpx.HTTPError, msgspec.DecodeError):
                if request_id in self.responses:  # else abort() closed the response
                    raise
            missing = [CompletionOutput(k, "", [], "abort") for k in range(n) if k not in finished]
            if missing:
                yield Update(missing, finished=True)
        finally:
            self.counters.running -= 1
            self.responses.pop(request_id, None)
            await response.aclose()

    async def abort(self, request_id: str) -> None:
        response = self.responses.pop(request_id, None)
        if response is not None:
            await response.aclose()  # the remote server aborts a request whose client went away

    async def proxy(self, method: str, path: str, body: bytes | None) -> httpx.Response:
        """Forward one /v1 request; the caller streams the response and closes it."""
        self.ensure_ready()
        request = self.client.build_request(method, path, content=body,
                                            headers={"Content-Type": "application/json"} if body else None)
        try:
            return await self.client.send(request, stream=True)
        except httpx.HTTPError as error:
            raise BackendNotReady(f"{self.url} is unreachable: {error}") from None

    def check_chat(self) -> None:
        """The remote server checks its own."""

    def check_text_size(self, num_chars: int) -> None:
        """The remote server checks its own limits."""

    async def stats(self) -> dict[str, float]:
        c = self.counters
        return {"num_running": c.running, "generated_tokens": c.generated_tokens, "prompt_tokens": c.prompt_tokens,
                "cached_prompt_tokens": c.cached_prompt_tokens,
                "prefix_hit_rate": c.cached_prompt_tokens / c.prompt_tokens if c.prompt_tokens else 0.0}

    async def forget(self, dropped: list[list[int]], kept: list[list[int]]) -> None:
        """The remote server's cache is its own: nothing is kept here."""

    async def close(self) -> None:
        self.stopping = True
        if self._task is not None:
            self._task.cancel()
        for request_id in list(self.responses):
            await self.abort(request_id)
        await self.client.aclose()

