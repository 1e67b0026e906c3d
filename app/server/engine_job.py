"""The one lifecycle of an engine request in the server: /v1's and Ollama's, a conversation's replies (and a reply
sampled again), its summaries and its chat titles all run as an EngineJob. open() checks every prompt, then starts one
engine request per prompt and registers each in the active requests (stop, delete, a model switch and shutdown find
them there); updates() merges their updates as they come and counts what they used; closing the job (leaving
`async with job`, or close()) unregisters and aborts them all, which frees their KV blocks (a no-op for a finished
request). Whoever reads a job closes it, whether it read to the end, failed or was left early.

A fork whose replies vary on purpose (variations.py) is one job too: a prompt per reply, each with its own sampling,
and the history they all start with (`prefix`) computed first as a request of its own, so that each finds all of it
cached; their requests open once it has been computed."""

import asyncio
import time
import uuid
from collections.abc import AsyncIterator

from localchat.app.server.active_requests import ActiveRequests
from localchat.app.server.backends import Backend, Update
from localchat.engine.frontend.outputs import CompletionOutput, RequestOutput
from localchat.engine.sampling_params import SamplingParams

PREFIX_PARAMS = SamplingParams(max_tokens=1, temperature=0.0)  # a prefix's own request: its one token is dropped


class EngineJob:
    """One engine request per prompt (every prompt samples the same n); reply k of prompt i is choice i * n + k."""

    def __init__(self, backend: Backend, active: ActiveRequests, num_prompts: int, n: int,
                 registration: tuple[str | None, list[str], bool]):
        self.backend, self.active, self.n = backend, active, n
        self.registration = registration  # (conversation id, message ids, gives way): each request's, in `active`
        self.request_ids: list[str] = []  # every request opened (a prefix's first), which close() ends
        self.streams: list[AsyncIterator[Update]] = []  # each prompt's
        self.waiting: tuple | None = None  # the prompts and their requests' arguments, while their prefix computes
        self.prefix_stream: AsyncIterator[Update] | None = None
        self.id = f"cmpl-{uuid.uuid4().hex}"
        self.created = int(time.time())
        self.model = backend.model_name
        self.prompt_tokens = [0] * num_prompts
        self.cached_tokens = [0] * num_prompts
        self.completion_tokens = 0
        self.reasoning_tokens: dict[int, int] = {}  # by choice: each reply's total

    @classmethod
    async def open(cls, backend: Backend, active: ActiveRequests, prompts: list[list[int]] | list[list[dict]],
                   params: SamplingParams | list[SamplingParams], *, conversation_id: str | None = None,
                   message_ids: list[str] = (), draft_sources: list[str] = (), gives_way: bool = False,
                   prefix: list[int] | None = None) -> "EngineJob":
        """Every prompt checked before any starts; a failure to start one aborts those started. params: how every
        prompt samples, or each its own (one per prompt, all of the same n); conversation_id and message_ids: the
        conversation and the replies the job writes (stop and delete find each of its requests by them);
        draft_sources: texts its replies may repeat (Backend.open); gives_way: a chat title's job, which nothing
        waits for (active_requests.py); prefix: token ids every prompt starts with, computed first (see updates())."""
        each = params if isinstance(params, list) else [params] * len(prompts)
        for prompt, own in zip(prompts, each):
            await backend.check_request(prompt, own)
        job = cls(backend, active, len(prompts), each[0].n, (conversation_id, list(message_ids), gives_way))
        try:
            if prefix:
                (job.prefix_stream,) = await job._open_requests([prefix], [PREFIX_PARAMS], ())
                job.waiting = (prompts, each, draft_sources)
            else:
                job.streams = await job._open_requests(prompts, each, draft_sources)
        except BaseException:
            await job.close()
            raise
        return job

    async def _open_requests(self, prompts: list, params: list[SamplingParams],
                             draft_sources: list[str]) -> list[AsyncIterator[Update]]:
        """An engine request per prompt, opened together (so that the engine takes them in one step), each registered
        once it has opened; their streams. The first failure raises (close() then ends those opened)."""
        request_ids = [uuid.uuid4().hex for _ in prompts]
        self.request_ids += request_ids
        opened = await asyncio.gather(*(self.backend.open(prompt, own, request_id, draft_sources)
                                        for prompt, own, request_id in zip(prompts, params, request_ids)),
                                      return_exceptions=True)
        for request_id, stream in zip(request_ids, opened):
            if isinstance(stream, BaseException):
                raise stream
            self.active.add(request_id, *self.registration)
        return opened

    async def __aenter__(self) -> "EngineJob":
        return self

    async def __aexit__(self, *exc_info) -> None:
        await self.close()

    async def close(self) -> None:
        """Unregister and abort every request of the job (again: nothing more)."""
        for request_id in self.request_ids:
            self.active.remove(request_id)
            await self.backend.abort(request_id)  # a no-op for a finished request

    async def _open_after_prefix(self) -> list[Update]:
        """The prefix computed, the prompts' requests opened; a prefix aborted (the job was stopped meanwhile) opens
        none, and each prompt's last update is returned instead: its replies end with "abort"."""
        prompts, params, draft_sources = self.waiting
        self.waiting = None
        if await _aborted(self.prefix_stream):
            return [Update([CompletionOutput(k, finish_reason="abort") for k in range(self.n)], finished=True)
                    for _ in prompts]
        self.streams = await self._open_requests(prompts, params, draft_sources)
        return []

    async def updates(self) -> AsyncIterator[tuple[int, Update]]:
        """(prompt index, update) from every prompt's stream as they come, until all have ended. A job with a prefix
        first computes it (its one token dropped), then opens its prompts' requests, each of which finds all of it
        cached; a prefix aborted (the job stopped meanwhile) starts none, and every reply ends with "abort"."""
        for i, ended in enumerate(await self._open_after_prefix() if self.waiting is not None else []):
            self._count(i, ended)
            yield i, ended
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


async def _aborted(stream: AsyncIterator[Update]) -> bool:
    """Read a stream to its end; whether it ended aborted."""
    aborted = False
    async for update in stream:
        aborted = any(out.finish_reason == "abort" for out in update.outputs)
    return aborted
