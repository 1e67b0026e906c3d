"""A remote OpenAI-compatible server (vLLM, SGLang, another `localchat serve`) as a Backend: prompts are chat
messages, rendered and cached by that server; /v1 requests are relayed to it as they are."""

import asyncio
from collections.abc import AsyncIterator
from dataclasses import dataclass

import httpx
import msgspec

from localchat.app.sampling_defaults import UNKNOWN_MODEL
from localchat.app.server.backends import BackendNotReady, BackendRequestError, Loading, Update
from localchat.app.server.sampling import openai_fields
from localchat.app.server.tool_calls import IN_SYSTEM_PROMPT, ToolSyntax
from localchat.app.sse import async_data_lines
from localchat.engine.frontend.outputs import CompletionOutput
from localchat.engine.sampling_params import SamplingParams
from localchat.engine.stats import EngineStats


@dataclass
class Counters:
    requests: int = 0
    running: int = 0
    generated_tokens: int = 0
    prompt_tokens: int = 0
    cached_prompt_tokens: int = 0


class _StreamChoice(msgspec.Struct):
    index: int
    delta: dict = {}
    finish_reason: str | None = None


class _StreamChunk(msgspec.Struct):
    choices: list[_StreamChoice] = []
    usage: dict | None = None


class RemoteBackend:
    """An OpenAI-compatible server at `url`."""

    kind = "remote"
    renders_templates = False
    can_switch_models = False
    unloaded = False
    parameters = None  # its model's size is not known here
    sampling = UNKNOWN_MODEL  # nor what its model's authors recommend
    kv_cache = None  # nor its KV cache
    kernels = None  # nor its kernels
    relays_openai = True
    template = None
    tool_syntax: ToolSyntax = IN_SYSTEM_PROMPT  # the server's template is unknown here: calls are taught as text
    can_chat = True
    max_model_len = None  # not known here: that server refuses a prompt too long itself
    thinks = None  # not known here: a server that takes reasoning apart streams it (reasoning_content), kept apart

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

    @property
    def error(self) -> str | None:
        return self.loading.error

    @property
    def model_choice(self) -> str | None:
        return self.model_name

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

    async def open(self, prompt: list[dict], params: SamplingParams, request_id: str,
                   draft_sources: list[str] = ()) -> AsyncIterator[Update]:
        """draft_sources: not for a remote server (its own engine drafts, or not)."""
        self.ensure_ready()
        body = {"model": self.model_name, "messages": prompt, **openai_fields(params),
                "stream": True, "stream_options": {"include_usage": True}}
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
                        # llama.cpp's and DeepSeek's name, and vLLM's newer one
                        reasoning = choice.delta.get("reasoning_content") or choice.delta.get("reasoning") or ""
                        if text or reasoning:
                            self.counters.generated_tokens += 1
                        outputs.append(CompletionOutput(choice.index, text, [], choice.finish_reason,
                                                        reasoning=reasoning))
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

    async def end_thinking(self, request_id: str) -> bool:
        raise BackendRequestError(f"{self.url} runs the replies: it cannot be told to end a reply's thinking here",
                                  409)

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

    def check_switch(self) -> None:
        raise BackendRequestError(f"this engine relays to {self.url}: its model is chosen there")

    async def switch(self, model: str) -> None:
        self.check_switch()

    async def unload(self) -> None:
        """The remote server keeps its model as it decides."""

    def reload(self) -> None:
        """Nothing was unloaded."""

    async def loaded(self) -> None:
        self.ensure_ready()

    # prompts are chat messages here: the remote server renders and tokenizes them (renders_templates is False)
    async def apply_chat_template(self, messages: list[dict], tools: list[dict] | None = None,
                                  variables: dict | None = None) -> list[int]:
        raise BackendRequestError(f"{self.url} renders its own chat template")

    async def tokenize(self, prompt: str | list[int]) -> list[int]:
        raise BackendRequestError(f"{self.url} tokenizes its own prompts")

    def detokenize(self, token_ids: list[int]) -> str:
        raise BackendRequestError(f"{self.url} tokenizes its own prompts")

    async def check_request(self, prompt: list[int], params: SamplingParams) -> None:
        """The remote server checks its own."""

    async def stats(self) -> EngineStats:
        c = self.counters
        return EngineStats(num_running=c.running, generated_tokens=c.generated_tokens, prompt_tokens=c.prompt_tokens,
                           cached_prompt_tokens=c.cached_prompt_tokens)

    async def forget(self, dropped: list[list[int]], kept: list[list[int]]) -> None:
        """The remote server's cache is its own: nothing is kept here."""

    def warmth(self, key: str, token_ids: list[int]) -> None:
        """Where a chat's history is in the remote server's cache is not known here."""

    async def pin(self, key: str, token_ids: list[int]) -> None:
        raise BackendRequestError("the engine is another server (--engine-url), whose cache is its own: chats cannot "
                                  "be pinned")

    async def unpin(self, key: str) -> None:
        """Nothing is pinned here."""

    def pin_usage(self) -> None:
        """No pins here."""

    async def close(self) -> None:
        self.stopping = True
        if self._task is not None:
            self._task.cancel()
        for request_id in list(self.responses):
            await self.abort(request_id)
        await self.client.aclose()
