"""The embedded engine as a Backend: prompts are token ids of the model's own chat template, and the model can be
switched for another one on this machine."""

import asyncio
import logging
import threading
from collections.abc import AsyncIterator

import msgspec

from localchat.app.kv_cache_words import kv_cache_size
from localchat.app.protocol.system import Kernels, KVCacheSize
from localchat.app.sampling_defaults import UNKNOWN_MODEL, sampling_defaults
from localchat.app.server.backends import BackendNotReady, BackendRequestError, Loading, Update
from localchat.app.server.chat_template import ChatTemplate
from localchat.app.server.config import MAX_CHARS_PER_TOKEN
from localchat.app.server.tool_calls import IN_SYSTEM_PROMPT, ToolSyntax
from localchat.engine.frontend.outputs import RequestFailed
from localchat.engine.frontend.structured_output import StructuredOutput
from localchat.engine.loading.model_catalog import EMBEDDED_NAME, chosen_model
from localchat.engine.memory import release_freed_memory
from localchat.engine.sampling_params import SamplingParams
from localchat.engine.stats import EngineStats, PinUsage
from localchat.engine.stats import Warmth as EngineWarmth

LOAD_POLL_S = 0.05

log = logging.getLogger("localchat.app")


class EmbeddedBackend:
    kind = "embedded"
    renders_templates = True
    can_switch_models = True
    relays_openai = False

    def __init__(self, model: str | None = None, **engine_args):
        self.model_arg = model
        self.engine_args = {k: v for k, v in engine_args.items() if v is not None}
        self.llm = None
        self.template: ChatTemplate | None = None
        self.loading = Loading()
        self.model_name: str | None = None
        self.parameters: int | None = None  # the model's weights, from its file's header (a new chat's defaults)
        self.sampling = UNKNOWN_MODEL  # the model's sampling defaults, from its file or its family (once listed)
        self.kv_cache: KVCacheSize | None = None  # what its KV cache holds (once loaded)
        self.kernels: Kernels | None = None  # what runs its matrix products (once loaded, with the native kernels)
        self.stopping = False
        self.unloaded = False  # by unload(): nothing is loading until a request needs the model

    def start(self) -> None:
        threading.Thread(target=self._load, name="localchat-load", daemon=True).start()

    def _load(self) -> None:
        from localchat.engine import AsyncLLM

        try:
            listed = chosen_model(self.model_choice)  # once a load, not at each new chat: it scans the model folders
            self.parameters = listed.parameters if listed else None
            self.sampling = sampling_defaults(listed.sampling if listed else None)
            llm = AsyncLLM(self.model_arg, on_progress=self.loading.report, **self.engine_args)
            self.loading.stage, self.loading.fraction = "warming up", None
            asyncio.run(_warm_up(llm))
            self.template = ChatTemplate(llm.tokenizer)
            self.model_name = llm.model_name
            stats = asyncio.run(llm.stats())
            self.kv_cache = kv_cache_size(stats.kv.total, stats.kv.block_size, stats.kv_cache_bytes, llm.max_model_len)
            self.kernels = msgspec.convert(stats.kernels, Kernels, from_attributes=True) if stats.kernels else None
            log.info("%s ready: %s; sampling defaults: %s%s", llm.model_name, self.kv_cache.summary,
                     self.sampling.source, kernels_words(self.kernels))
            self.llm = llm
            self.loading.stage, self.loading.fraction, self.loading.ready = "ready", 1.0, True
        except BaseException as error:  # shown by /health; the process keeps serving it
            self.loading.error = f"{type(error).__name__}: {error}"
            self.loading.stage = "failed"

    @property
    def model_choice(self) -> str:
        """The name of the model it runs or loads, as find_models() lists it."""
        return self.model_arg or EMBEDDED_NAME

    def check_switch(self) -> None:
        """Any model of this machine's can be loaded (switch() says whether it can be now)."""

    async def switch(self, model: str) -> None:
        """Unload the model and load `model` in its place; returns once loading has begun (see health()).
        The caller has ended the running requests."""
        if not (self.loading.ready or self.loading.error or self.unloaded):
            raise BackendRequestError(f"{self.model_choice} is still loading: switch once it is ready", 409)
        self.model_arg, self.unloaded = model, False
        await self._unload("unloading the previous model")
        self.start()

    async def unload(self) -> None:
        """Free the model's memory (keep_alive 0); the next request that needs it loads it again (reload()). The
        caller has ended the running requests."""
        if self.loading.ready:
            self.unloaded = True
            await self._unload("unloaded")

    async def loaded(self) -> None:
        """Wait until the model is loaded, loading an unloaded one again; BackendNotReady if it cannot be."""
        self.reload()
        while not self.loading.ready:
            if self.error or self.stopping:
                break
            await asyncio.sleep(LOAD_POLL_S)
        self.ensure_ready()

    def reload(self) -> None:
        """Load the unloaded model again (a no-op unless unload() ran)."""
        if self.unloaded:
            self.unloaded = False
            self.loading = Loading()
            self.start()

    async def _unload(self, stage: str) -> None:
        old, self.llm, self.template, self.model_name = self.llm, None, None, None
        self.loading = Loading(stage=stage)
        if old is not None:
            await asyncio.to_thread(old.shutdown)
            del old
            await asyncio.to_thread(release_freed_memory)  # without it every switch of models grows RSS

    @property
    def max_model_len(self) -> int | None:
        return self.llm.max_model_len if self.llm else None

    @property
    def error(self) -> str | None:
        if self.llm is not None and self.llm.error is not None:
            return f"the engine stopped after a failure: {self.llm.error}"
        return self.loading.error

    @property
    def tool_syntax(self) -> ToolSyntax:
        return self.template.tool_syntax if self.template else IN_SYSTEM_PROMPT

    def ensure_ready(self):
        if self.stopping:
            raise BackendNotReady("the engine is stopping")
        if self.unloaded:
            self.reload()
            raise BackendNotReady("the model was unloaded (keep_alive 0) and is loading again: retry once /health "
                                  "says ready")
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
        limit = self.ensure_ready().max_model_len * MAX_CHARS_PER_TOKEN
        if num_chars > limit:
            raise BackendRequestError(f"the text has {num_chars:,} characters: more than fit in this engine's "
                                      f"max_model_len of {self.max_model_len} tokens")

    async def apply_chat_template(self, messages: list[dict], tools: list[dict] | None = None,
                                  variables: dict | None = None) -> list[int]:
        """The chat's prompt token ids (with the tools, for a template that renders them, and the template's
        variables), tokenized off the event loop."""
        llm = self.ensure_ready()
        self.check_chat()
        self.check_text_size(sum(len(m["content"]) for m in messages) + len(str(tools or "")))
        return await asyncio.to_thread(llm.apply_chat_template, messages, tools, variables)

    async def tokenize(self, prompt: str | list[int]) -> list[int]:
        llm = self.ensure_ready()
        if isinstance(prompt, str):
            self.check_text_size(len(prompt))
        return await asyncio.to_thread(llm.tokenize, prompt)

    def detokenize(self, token_ids: list[int]) -> str:
        return self.ensure_ready().tokenizer.decode(token_ids)

    async def check_request(self, prompt: list[int], params: SamplingParams) -> None:
        """A clear BackendRequestError for a request the engine cannot run; its grammar is compiled here, off the
        event loop (a big one takes seconds)."""
        llm = self.ensure_ready()
        try:
            await asyncio.to_thread(llm.check_request, prompt, params)
        except ValueError as error:
            raise BackendRequestError(str(error)) from None

    async def open(self, prompt: list[int], params: SamplingParams, request_id: str,
                   draft_sources: list[str] = ()) -> AsyncIterator[Update]:
        """The request is in the engine's queue when this returns: an abort that follows always finds it.
        draft_sources: texts the replies may repeat (the replies a regenerate or an edit replaces), for drafts."""
        llm = self.ensure_ready()
        sources = await asyncio.to_thread(lambda: [llm.tokenize(text) for text in draft_sources])
        try:
            deltas = await llm.add_request(prompt, params, request_id, sources)
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

    async def proxy(self, method: str, path: str, body: bytes | None):
        """/v1 runs here (relays_openai is False): nothing to relay to."""
        raise BackendRequestError("the embedded engine answers /v1 itself: there is no server to relay to")

    async def abort(self, request_id: str) -> None:
        if self.llm is not None:
            await self.llm.abort(request_id)

    @property
    def thinks(self) -> bool | None:
        """Whether the model marks its thinking (None until it is loaded)."""
        return self.template.thinks if self.template else None

    async def end_thinking(self, request_id: str) -> bool:
        """The request's replies close their thinking now; False if it has none to close."""
        return self.llm is not None and await self.llm.end_thinking(request_id)

    async def stats(self) -> EngineStats:
        return await self.llm.stats() if self.llm is not None else EngineStats()

    async def forget(self, dropped: list[list[int]], kept: list[list[int]]) -> None:
        """Drop the cached KV blocks (memory and disk) of the token sequences `dropped` that `kept` do not share."""
        if self.llm is not None and self.llm.alive:
            await self.llm.forget(dropped, kept)

    def warmth(self, key: str, token_ids: list[int]) -> EngineWarmth | None:
        """Where a chat's history is (None while no model is loaded): read on this thread, waiting for no step."""
        llm = self.llm
        return llm.warmth(key, token_ids) if llm is not None and llm.alive else None

    async def pin(self, key: str, token_ids: list[int]) -> None:
        """Keep a chat's history warm (in place of the key's earlier pin); a 409 over the pin budget."""
        llm = self.ensure_ready()
        try:
            await llm.pin(key, token_ids)
        except ValueError as error:
            raise BackendRequestError(str(error), 409) from None

    async def unpin(self, key: str) -> None:
        if self.llm is not None and self.llm.alive:
            await self.llm.unpin(key)

    def pin_usage(self) -> PinUsage | None:
        llm = self.llm
        return llm.pin_usage() if llm is not None else None

    async def close(self) -> None:
        self.stopping = True
        if self.llm is not None:
            await asyncio.to_thread(self.llm.shutdown)


async def _warm_up(llm) -> None:
    """One short request, so that the first user's request does not pay for the first forward passes: a chat, or
    for a base model (no chat template) plain text. It asks for JSON: the grammar compiler's view of the vocabulary
    is built now (~0.3 s, holding the GIL), not while the first constrained request's neighbours stream."""
    prompt = (llm.apply_chat_template([{"role": "user", "content": "Hello"}]) if llm.tokenizer.chat_template
              else llm.tokenize("Hello"))
    params = SamplingParams(max_tokens=2, temperature=0, structured=StructuredOutput.json_object())
    async for _ in llm.generate(prompt, params, request_id="warm-up"):
        pass


def kernels_words(kernels: Kernels | None) -> str:
    """The start line's words for what runs the matrix products: "; kernels: native int8 (avx2) for every row"."""
    if kernels is None:
        return ""
    if kernels.prompt == kernels.decode:
        return f"; kernels: {kernels.decode} for every row"
    return f"; kernels: {kernels.decode} for decode rows, {kernels.prompt} from {kernels.prompt_rows} rows"
