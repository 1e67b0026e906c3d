"""The one lifecycle of an engine request in the server: /v1's and Ollama's, a conversation's replies (and a reply
sampled again), its summaries and its chat titles all run as an EngineJob. open() checks every prompt, then starts one
engine request per prompt and registers each in the active requests (stop, delete, a model switch and shutdown find
them there); updates() merges their updates as they come and counts what they used; closing the job (leaving
`async with job`, or close()) unregisters and aborts them all, which frees their KV blocks (a no-op for a finished
request). Whoever reads a job closes it, whether it read to the end, failed or was left early."""

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

    def __init__(self, backend: Backend, active: ActiveRequests, request_ids: list[str], n: int):
        self.backend, self.active, self.request_ids, self.n = backend, active, request_ids, n
        self.streams: list[AsyncIterator[Update]] = []
        self.id = f"cmpl-{uuid.uuid4().hex}"
        self.created = int(time.time())
        self.model = backend.model_name
        self.prompt_tokens = [0] * len(request_ids)
        self.cached_tokens = [0] * len(request_ids)
        self.completion_tokens = 0
        self.reasoning_tokens: dict[int, int] = {}  # by choice: each reply's total

    @classmethod
    async def open(cls, backend: Backend, active: ActiveRequests, prompts: list[list[int]] | list[list[dict]],
                   params: SamplingParams, *, conversation_id: str | None = None, message_ids: list[str] = (),
                   draft_sources: list[str] = (), gives_way: bool = False) -> "EngineJob":
        """Every prompt checked before any starts; a failure to start one aborts those started. conversation_id and
        message_ids: the conversation and the replies the job writes (stop and delete find it by them);
        draft_sources: texts its replies may repeat (Backend.open); gives_way: a chat title's job, which nothing
        waits for (active_requests.py)."""
        for prompt in prompts:
            await backend.check_request(prompt, params)
        job = cls(backend, active, [uuid.uuid4().hex for _ in prompts], params.n)
        try:
            for prompt, request_id in zip(prompts, job.request_ids):
                job.streams.append(await backend.open(prompt, params, request_id, draft_sources))
                active.add(request_id, conversation_id, message_ids, gives_way)
        except BaseException:
            await job.close()
            raise
        return job

    async def __aenter__(self) -> "EngineJob":
        return self

    async def __aexit__(self, *exc_info) -> None:
        await self.close()

    async def close(self) -> None:
        """Unregister and abort every request of the job (again: nothing more)."""
        for request_id in self.request_ids:
            self.active.remove(request_id)
            await self.backend.abort(request_id)  # a no-op for a finished request

    async def updates(self) -> AsyncIterator[tuple[int, Update]]:
        """(prompt index, update) from every prompt's stream as they come, until all have ended."""
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
        """Every reply whole, read to the end; the job is closed then (or when the caller stops waiting)."""
        whole = RequestOutput(self.id, [], 0, [])
        async with self:
            async for _, update in self.updates():
                whole.merge(RequestOutput(self.id, [], 0, update.outputs))
        return whole.outputs
