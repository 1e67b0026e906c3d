"""Fixtures of the app tests: one shared real `localchat serve` (embedded engine) for the whole session."""

from collections.abc import Iterator

import httpx
import pytest
from support import Server, make_home


@pytest.fixture(scope="session")
def server(tmp_path_factory) -> Iterator[Server]:
    """The shared embedded-engine server of the app tests."""
    process = Server(make_home(tmp_path_factory.mktemp("serve-home")), args=["--kv-blocks", "768"]).start()
    yield process
    process.stop()


@pytest.fixture
def api(server) -> Iterator[httpx.Client]:
    with server.client() as client:
        yield client
