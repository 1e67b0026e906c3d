"""Fixtures of the terminal UI tests: an EngineClient per test of the session's shared `localchat serve`, or of the
one on a tiny thinking model, or the one with a small context (tests/conftest.py), and the app driven by Textual's
pilot."""

from collections.abc import AsyncIterator

import pytest_asyncio

from localchat.app.client.engine_client import EngineClient


@pytest_asyncio.fixture
async def client(server) -> AsyncIterator[EngineClient]:
    async with EngineClient(server.url, server.token) as engine_client:
        yield engine_client


@pytest_asyncio.fixture
async def thinking_client(thinking_server) -> AsyncIterator[EngineClient]:
    """A client of the session's `localchat serve` on a tiny thinking model (tests/conftest.py)."""
    async with EngineClient(thinking_server.url, thinking_server.token) as engine_client:
        yield engine_client


@pytest_asyncio.fixture
async def small_context_client(small_context_server) -> AsyncIterator[EngineClient]:
    """A client of the session's `localchat serve --max-model-len 512` (tests/conftest.py): a few long turns reach the
    edge of its context."""
    async with EngineClient(small_context_server.url, small_context_server.token) as engine_client:
        yield engine_client
