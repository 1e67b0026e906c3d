"""Fixtures of the terminal UI tests: one real `localchat serve` (embedded model) for the session, an
EngineClient per test, and the app driven by Textual's pilot."""

from collections.abc import AsyncIterator, Iterator

import pytest
import pytest_asyncio

from localchat.app.client.engine_client import EngineClient
from support import Server, running_server


@pytest.fixture(scope="session")
def server(tmp_path_factory) -> Iterator[Server]:
    with running_server(tmp_path_factory.mktemp("tui-serve-home"), kv_blocks=512) as process:
        yield process


@pytest_asyncio.fixture
async def client(server) -> AsyncIterator[EngineClient]:
    async with EngineClient(server.url, server.token) as engine_client:
        yield engine_client
