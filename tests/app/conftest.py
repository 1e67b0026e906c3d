"""Fixtures of the app tests: one shared real `localchat serve` (embedded engine) for the whole session."""

from collections.abc import Iterator

import pytest

from support import Server, running_server


@pytest.fixture(scope="session")
def server(tmp_path_factory) -> Iterator[Server]:
    """The shared embedded-engine server of the app tests."""
    with running_server(tmp_path_factory.mktemp("serve-home"), kv_blocks=768) as process:
        yield process
