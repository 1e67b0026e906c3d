"""disconnect.while_connected in process: the work's answer while its client waits; once the client leaves, the work
cancelled, its cleanup run before ClientDisconnected is raised (that cleanup is what aborts an engine request)."""

import asyncio

import pytest

from localchat.app.server.disconnect import ClientDisconnected, while_connected


class Connection:
    """An ASGI receive() after the body was read: it waits until the client leaves."""

    def __init__(self):
        self.left = asyncio.Event()

    async def receive(self) -> dict:
        await self.left.wait()
        return {"type": "http.disconnect"}


async def work(started: asyncio.Event, cleaned: list, finish: asyncio.Event) -> str:
    started.set()
    try:
        await finish.wait()
        return "answer"
    finally:
        cleaned.append(True)


@pytest.mark.anyio
async def test_the_work_answers_while_its_client_waits():
    connection, started, finish, cleaned = Connection(), asyncio.Event(), asyncio.Event(), []
    finish.set()
    assert await while_connected(connection, work(started, cleaned, finish)) == "answer"
    assert cleaned == [True]


@pytest.mark.anyio
async def test_a_client_that_leaves_cancels_the_work_after_its_cleanup():
    connection, started, finish, cleaned = Connection(), asyncio.Event(), asyncio.Event(), []
    waiting = asyncio.ensure_future(while_connected(connection, work(started, cleaned, finish)))
    await started.wait()
    connection.left.set()
    with pytest.raises(ClientDisconnected):
        await waiting
    assert cleaned == [True]  # the cleanup ran before the request ended


@pytest.mark.anyio
async def test_a_failure_of_the_work_is_its_own():
    async def failing():
        raise ValueError("bad prompt")

    with pytest.raises(ValueError, match="bad prompt"):
        await while_connected(Connection(), failing())


@pytest.fixture
def anyio_backend():
    return "asyncio"
