"""The engine loop in a background thread, streaming each request's deltas to asyncio callers."""

import asyncio
import queue
import threading
import uuid
from collections.abc import AsyncIterator

from localchat.engine.llm_engine import LLMEngine
from localchat.engine.outputs import RequestOutput
from localchat.engine.sampling_params import SamplingParams


class AsyncLLM:
    """`AsyncLLM()` loads the embedded model; see LLMEngine for the arguments.

    One thread owns the engine. Callers hand it commands (add, abort) through a queue that it
    drains between steps, and receive deltas on their own event loop."""

    def __init__(self, model: str | None = None, **engine_args):
        self.engine = LLMEngine(model, **engine_args)
        self._commands: queue.SimpleQueue = queue.SimpleQueue()
        self._wake = threading.Event()
        self._streams: dict[str, tuple[asyncio.AbstractEventLoop, asyncio.Queue]] = {}
        self._stopped = False
        self._error: BaseException | None = None
        self._thread = threading.Thread(target=self._loop, name="localchat-engine", daemon=True)
        self._thread.start()

    @property
    def tokenizer(self):
        return self.engine.tokenizer

    async def generate(self, prompt: str | list[int], params: SamplingParams, request_id: str | None = None
                       ) -> AsyncIterator[RequestOutput]:
        """Deltas of one request until it finishes. Bad input raises ValueError before anything runs;
        leaving the loop early aborts the request."""
        if self._stopped or self._error is not None:
            raise RuntimeError(f"the engine has stopped: {self._error or 'shut down'}")
        prompt_token_ids = self.engine.tokenize(prompt)
        self.engine.check_request(prompt_token_ids, params)
        request_id = request_id or uuid.uuid4().hex
        if request_id in self._streams:
            raise ValueError(f"request id {request_id!r} is already running")
        deltas: asyncio.Queue = asyncio.Queue()
        self._streams[request_id] = (asyncio.get_running_loop(), deltas)
        self._send(("add", request_id, prompt_token_ids, params))
        finished = False
        try:
            while not finished:
                delta = await deltas.get()
                if isinstance(delta, BaseException):
                    raise RuntimeError(f"the engine failed: {delta!r}") from delta
                finished = delta.finished
                yield delta
        finally:
            if not finished:
                await self.abort(request_id)

    async def abort(self, request_id: str) -> None:
        """Stop a request; its stream ends with finish_reason "abort" and its KV blocks are freed."""
        self._send(("abort", request_id))

    def stats(self) -> dict[str, int | float]:
        return self.engine.stats()

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
                    return
                while self.engine.has_unfinished_requests() and not self._wake.is_set():
                    self._deliver(self.engine.step())
                if self.engine.has_unfinished_requests():
                    self._wake.set()  # commands arrived mid-stream: take them, then go on stepping
            except BaseException as error:  # a failed step fails every request and stops the loop
                self._error = error
                for request_id in list(self.engine.requests):
                    self.engine.abort(request_id)
                for loop, deltas in self._streams.values():
                    loop.call_soon_threadsafe(deltas.put_nowait, error)
                self._streams.clear()
                return

    def _run_command(self, command: tuple) -> None:
        if command[0] == "add":
            _, request_id, prompt_token_ids, params = command
            if request_id in self._streams:  # not aborted before it started
                self.engine.add_request(prompt_token_ids, params, request_id)
        else:
            delta = self.engine.abort(command[1])
            if delta is not None:
                self._deliver([delta])
            else:
                self._streams.pop(command[1], None)

    def _deliver(self, deltas: list[RequestOutput]) -> None:
        for delta in deltas:
            stream = self._streams.get(delta.request_id)
            if stream is None:
                continue
            loop, deltas_queue = stream
            if delta.finished:
                del self._streams[delta.request_id]
            loop.call_soon_threadsafe(deltas_queue.put_nowait, delta)
