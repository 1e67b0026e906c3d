"""One engine request per prompt of an API request (/v1's and Ollama's), its updates merged as they come, what it
used counted, and every request aborted when the caller stops reading."""

import asyncio
import time
import uuid
from collections.abc import AsyncIterator

from localchat.app.server.active_requests import ActiveRequests
from localchat.app.server.backends import Backend, Update
from localchat.engine.frontend.outputs import CompletionOutput, RequestOutput
from localchat.engine.sampling_params import SamplingParams


class EngineJob:
    """One engine request per prompt; reply k of prompt i is choice i * n + k."""

    def __init__(self, backend: Backend, active: ActiveRequests, streams: list, request_ids: list[str], n: int):
        self.backend, self.active, self.streams, self.request_ids, self.n = backend, active, streams, request_ids, n
        self.id = f"cmpl-{uuid.uuid4().hex}"
        self.created = int(time.time())
        self.model = backend.model_name
        self.prompt_tokens = [0] * len(streams)
        self.cached_tokens = [0] * len(streams)
        self.completion_tokens = 0
        self.reasoning_tokens: dict[int, int] = {}  # by choice: each reply's total

    @classmethod
    async def open(cls, backend: Backend, active: ActiveRequests, prompts: list[list[int]], params: SamplingParams):
        request_ids = [uuid.uuid4().hex for _ in prompts]
        for prompt in prompts:  # every prompt checked before any starts
            await backend.check_request(prompt, params)
        streams = [await backend.open(p, params, rid) for p, rid in zip(prompts, request_ids)]
        for rid in request_ids:
            active.add(rid)
        return cls(backend, active, streams, request_ids, params.n)

    async def updates(self) -> AsyncIterator[tuple[int, Update]]:
        """(prompt index, update) from every prompt's stream as they come; leaving early aborts them all."""
        queue: asyncio.Queue = asyncio.Queue()

        async def pump(i: int, stream) -> None:
            try:
                async for update in stream:
                    await queue.put((i, update))
            except Exception as error:
                await queue.put(error)
            finally:
                await queue.put((i, None))

        tasks = [asyncio.create_task(pump(i, s)) for i, s in enumerate(self.streams)]
        open_streams = len(tasks)
        try:
            while open_streams:
                item = await queue.get()
                if isinstance(item, Exception):
                    raise item
                i, update = item
                if update is None:
                    open_streams -= 1
                    continue
                self._count(i, update)
                yield i, update
        finally:
            for task in tasks:
                task.cancel()
            for rid in self.request_ids:
                self.active.remove(rid)
                await self.backend.abort(rid)  # a no-op for a finished request

    def _count(self, i: int, update: Update) -> None:
        """Prompt i's update into the usage, its replies numbered as the job's choices."""
        if update.prompt_tokens is not None:
            self.prompt_tokens[i], self.cached_tokens[i] = update.prompt_tokens, update.cached_tokens or 0
        for out in update.outputs:
            self.completion_tokens += len(out.token_ids)
            out.index += i * self.n
            if out.num_reasoning_tokens:
                self.reasoning_tokens[out.index] = out.num_reasoning_tokens

    async def collect(self) -> list[CompletionOutput]:
        whole = RequestOutput(self.id, [], 0, [])
        async for _, update in self.updates():
            whole.merge(RequestOutput(self.id, [], 0, update.outputs))
        return whole.outputs
