"""A whole (not streamed) answer is worked out only while its client waits for it: the work runs beside a watch on
the connection, and a client that disconnects cancels the work, whose cleanup (closing its EngineJob) aborts
its engine requests and frees their KV blocks within a step. A streamed answer needs none of this: Litestar stops
iterating a stream whose client left, and closing the stream's generator runs the same cleanup."""

import asyncio
from collections.abc import Coroutine
from typing import Any, TypeVar

from litestar import Request
from litestar.exceptions import HTTPException

T = TypeVar("T")


class ClientDisconnected(HTTPException):
    """The client left before its answer was ready: the answer goes nowhere (the connection is closed)."""

    status_code = 499  # nginx's "client closed request"; nobody receives it
    detail = "the client disconnected before its answer was ready"


async def until_disconnected(request: Request) -> None:
    """Returns once the ASGI server reports the client gone. Called after the body was read whole, receive() waits
    until then (uvicorn answers `http.disconnect` when the connection closes)."""
    while (await request.receive())["type"] != "http.disconnect":
        pass


async def while_connected(request: Request, work: Coroutine[Any, Any, T]) -> T:
    """work's result; if the client disconnects first, work is cancelled (its finally blocks run before this returns)
    and ClientDisconnected is raised."""
    task = asyncio.ensure_future(work)
    watch = asyncio.ensure_future(until_disconnected(request))
    try:
        done, _ = await asyncio.wait((task, watch), return_when=asyncio.FIRST_COMPLETED)
    finally:
        for pending in (task, watch):
            pending.cancel()
        await asyncio.gather(task, watch, return_exceptions=True)  # the work's cleanup has run
    if task in done:
        return task.result()
    raise ClientDisconnected()
