"""The engine loop in a background thread, streaming each request's deltas to asyncio callers."""

import asyncio
import concurrent.futures
import dataclasses
import logging
import queue
import threading
import uuid
from collections.abc import AsyncIterator

from localchat.engine.config import EngineConfig
from localchat.engine.frontend.llm_engine import LLMEngine
from localchat.engine.frontend.outputs import EngineFailed, RequestFailed, RequestOutput
from localchat.engine.frontend.structured_output import Matcher
from localchat.engine.sampling_params import SamplingParams
from localchat.engine.stats import EngineStats, PinUsage, Warmth

log = logging.getLogger("localchat.engine")
COMMAND_TIMEOUT_S = 60  # the longest step (a full prefill chunk on a slow machine) is far shorter


class AsyncLLM:
    """`AsyncLLM()` loads the embedded model; the keyword arguments are EngineConfig's fields, and
    on_progress(stage, fraction) hears how loading goes.

    One thread owns the engine. Callers hand it commands (add, abort, end thinking, forget) through a queue that
    it drains between steps, and receive deltas on their own event loop. A command runs once sent: a caller that
    stops waiting for its answer (cancelled, timed out) only stops hearing it. After every step and command the
    thread publishes a snapshot of the engine's counters, which stats() reads without waiting for a step.

    A step that raises fails the requests it ran (their streams raise EngineFailed) and frees their blocks;
    the loop goes on serving the others. Only if the engine cannot be brought back to a clean state does
    it stop for good: then `error` says why, and every later request is refused."""

    def __init__(self, model: str | None = None, on_progress=None, **engine_args):
        self.engine = LLMEngine(EngineConfig(model, **engine_args), on_progress)
        self._commands: queue.SimpleQueue = queue.SimpleQueue()
        self._wake = threading.Event()
        self._streams: dict[str, tuple[asyncio.AbstractEventLoop, asyncio.Queue]] = {}
        self._stopped = False
        self.error: str | None = None  # set when the engine has stopped for good
        self._stats = self.engine.stats()  # the latest snapshot, replaced whole by the engine's thread
        self._thread = threading.Thread(target=self._loop, name="localchat-engine", daemon=True)
        self._thread.start()

    @property
    def tokenizer(self):
        return self.engine.tokenizer

    @property
    def model_name(self) -> str:
        return self.engine.model_name

    @property
    def max_model_len(self) -> int:
        return self.engine.max_model_len

    def tokenize(self, prompt: str | list[int]) -> list[int]:
        return self.engine.tokenize(prompt)

    def apply_chat_template(self, messages: list[dict], tools: list[dict] | None = None,
                            variables: dict | None = None) -> list[int]:
        """The chat's prompt token ids, with the tools for a template that renders them (LLMEngine's)."""
        return self.engine.apply_chat_template(messages, tools, variables)

    def check_request(self, prompt_token_ids: list[int], params: SamplingParams) -> int:
        """LLMEngine.check_request: a clear ValueError for a request the engine cannot run (its grammar is compiled
        here: a big one takes seconds, so call it off the event loop)."""
        return self.engine.check_request(prompt_token_ids, params)

    @property
    def alive(self) -> bool:
        return not self._stopped and self.error is None

    async def add_request(self, prompt_token_ids: list[int], params: SamplingParams, request_id: str | None = None,
                          draft_sources: list[list[int]] | None = None) -> AsyncIterator[RequestOutput]:
        """Start a request now and return its stream of deltas. Bad input raises ValueError before anything
        runs. The request is checked and its grammar compiled on a worker thread (neither the event loop nor
        the engine's thread waits for it). The request is queued before this returns, so an abort that follows
        always finds it; leaving the stream early aborts it. draft_sources: see LLMEngine.add_request."""
        if not self.alive:
            raise RuntimeError(f"the engine has stopped: {self.error or 'shut down'}")
        matcher = await asyncio.to_thread(self._prepare, prompt_token_ids, params)
        request_id = request_id or uuid.uuid4().hex
        if request_id in self._streams:
            raise ValueError(f"request id {request_id!r} is already running")
        deltas: asyncio.Queue = asyncio.Queue()
        self._streams[request_id] = (asyncio.get_running_loop(), deltas)
        self._send(("add", request_id, list(prompt_token_ids), params, matcher, draft_sources))
        if not self.alive:  # the engine stopped while this was queued: nobody else will end the stream
            self._fail(request_id, RuntimeError(f"the engine has stopped: {self.error or 'shut down'}"))
        return self._stream(request_id, deltas)

    async def generate(self, prompt: str | list[int], params: SamplingParams, request_id: str | None = None
                       ) -> AsyncIterator[RequestOutput]:
        """Deltas of one request until it finishes (see add_request)."""
        async for delta in await self.add_request(self.engine.tokenize(prompt), params, request_id):
            yield delta

    def _prepare(self, prompt_token_ids: list[int], params: SamplingParams) -> Matcher | None:
        """Check a request and compile its grammar; its first reply's matcher."""
        self.engine.check_request(prompt_token_ids, params)
        return self.engine.grammars.matcher(params.structured) if params.structured is not None else None

    async def _stream(self, request_id: str, deltas: asyncio.Queue) -> AsyncIterator[RequestOutput]:
        finished = False
        try:
            while not finished:
                delta = await deltas.get()
                if isinstance(delta, BaseException):
                    raise EngineFailed(f"the engine failed: {delta!r}") from delta
                if delta.error is not None:
                    finished = True  # its blocks are free already
                    raise RequestFailed(delta.error)
                finished = delta.finished
                yield delta
        finally:
            if not finished:
                await self.abort(request_id)

    async def abort(self, request_id: str) -> None:
        """Stop a request; its stream ends with finish_reason "abort" and its KV blocks are freed."""
        self._send(("abort", request_id))

    async def end_thinking(self, request_id: str) -> bool:
        """The request's replies close their thinking now and go on with their answers (LLMEngine.end_thinking,
        between two steps); False if it has none to close."""
        return await self._between_steps(lambda: self.engine.end_thinking(request_id))

    async def stats(self) -> EngineStats:
        """The snapshot the engine's thread took after its latest step or command (the pool is never read
        mid-step); it never waits for a step, however long one runs. The disk tier's counts are read now: its
        writes go on behind the steps, and an idle engine takes no snapshot."""
        disk = self.engine.disk
        return self._stats if disk is None else dataclasses.replace(self._stats, disk=disk.stats)

    def warmth(self, key: str, token_ids: list[int]) -> Warmth:
        """LLMEngine.warmth, on the caller's thread: an estimate that waits for no step."""
        return self.engine.warmth(key, token_ids)

    async def pin(self, key: str, token_ids: list[int]) -> PinUsage:
        """LLMEngine.pin, between two steps (ValueError over the budget)."""
        return await self._between_steps(lambda: self.engine.pin(key, token_ids))

    async def unpin(self, key: str) -> PinUsage:
        return await self._between_steps(lambda: self.engine.unpin(key))

    def pin_usage(self) -> PinUsage:
        """What pinned chats keep and their budget, read on the caller's thread."""
        return self.engine.pin_usage()

    async def forget(self, dropped: list[list[int]], kept: list[list[int]]) -> int:
        """LLMEngine.forget, between two steps: a deleted conversation's own cached blocks go."""
        return await self._between_steps(lambda: self.engine.forget(dropped, kept))

    async def _between_steps(self, call):
        """call() on the engine's thread between two steps; its result. Cancelling the wait (or its timeout) does
        not cancel the call: the engine runs it and drops the answer nobody waits for."""
        if not self._thread.is_alive():
            return call()
        answer: concurrent.futures.Future = concurrent.futures.Future()
        self._send(("call", call, answer))
        return await asyncio.wait_for(asyncio.wrap_future(answer), COMMAND_TIMEOUT_S)

    def shutdown(self) -> None:
        """Abort everything still running (streams end with "abort") and stop the loop."""
        self._stopped = True
        self._wake.set()
        self._thread.join()

    def _send(self, command: tuple) -> None:
        self._commands.put(command)
        self._wake.set()

    def _loop(self) -> None:
        while True:
            self._wake.wait()
            self._wake.clear()
            try:
                while not self._commands.empty():
                    self._run_command(self._commands.get())
                if self._stopped:
                    for request_id in list(self.engine.requests):
                        self._deliver([self.engine.abort(request_id)])
                    self.engine.close()  # the disk tier's last writes
                    return
                while self.engine.has_unfinished_requests() and not self._wake.is_set():
                    deltas = self.engine.step()
                    self._publish_stats()  # before the deltas: a caller that saw a reply end sees its blocks freed
                    self._deliver(deltas)
                if self.engine.has_unfinished_requests():
                    self._wake.set()  # commands arrived mid-stream: take them, then go on stepping
            except Exception as error:
                if not self._recover(error):
                    return

    def _recover(self, error: Exception) -> bool:
        """Fail every request in the engine (a step runs them all) and free their blocks. False if the engine
        is not clean afterwards: then it stops for good, and every stream fails."""
        log.error("an engine step failed; its requests are ended", exc_info=error)
        failed = list(self.engine.requests)
        try:
            self.engine.reset()
        except Exception as cleanup_error:
            log.critical("the engine could not recover; it stops", exc_info=cleanup_error)
            self.error = f"{type(error).__name__}: {error}"
            failed = list(self._streams)
        if self.error is None:
            self._publish_stats()
        for request_id in failed:
            self._fail(request_id, error)
        return self.error is None

    def _publish_stats(self) -> None:
        self._stats = self.engine.stats()

    def _run_command(self, command: tuple) -> None:
        if command[0] == "add":
            self._add(*command[1:])
        elif command[0] == "abort":
            delta = self.engine.abort(command[1])
            self._publish_stats()
            if delta is not None:
                self._deliver([delta])
        else:
            self._call(*command[1:])

    def _add(self, request_id: str, prompt_token_ids: list[int], params: SamplingParams, matcher: Matcher | None,
             draft_sources: list[list[int]] | None) -> None:
        if request_id not in self._streams:  # its stream was already closed
            return
        try:
            self.engine.add_request(prompt_token_ids, params, request_id, matcher, draft_sources)
        except Exception as error:  # fails this request only
            log.error("request %s could not start", request_id, exc_info=error)
            self._fail(request_id, error)
        self._publish_stats()

    def _call(self, call, answer: concurrent.futures.Future) -> None:
        """Run a caller's call and hand it the result, or the error, unless it stopped waiting (then nobody hears
        either: the future is cancelled, and setting it would raise InvalidStateError here, in the engine's loop)."""
        try:
            result, error = call(), None
        except Exception as failure:  # the caller's own error
            result, error = None, failure
        self._publish_stats()
        if not answer.set_running_or_notify_cancel():
            return
        if error is None:
            answer.set_result(result)
        else:
            answer.set_exception(error)

    def _fail(self, request_id: str, error: BaseException) -> None:
        stream = self._streams.pop(request_id, None)
        if stream is not None:
            self._post(request_id, *stream, error)

    def _deliver(self, deltas: list[RequestOutput]) -> None:
        for delta in deltas:
            stream = self._streams.get(delta.request_id)
            if stream is None:
                continue
            if delta.finished:
                del self._streams[delta.request_id]
            self._post(delta.request_id, *stream, delta)

    def _post(self, request_id: str, loop: asyncio.AbstractEventLoop, deltas: asyncio.Queue, item) -> None:
        """Hand a stream its delta (or error) on its caller's event loop. A loop that has closed has nobody to read
        the stream: it is dropped and its request aborted, and no other stream hears of it."""
        try:
            loop.call_soon_threadsafe(deltas.put_nowait, item)
        except RuntimeError:  # the event loop is closed
            if self._streams.pop(request_id, None) is not None:
                self._send(("abort", request_id))
