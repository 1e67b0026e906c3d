"""Both backends implement all of Backend (a typing.Protocol: nothing checks it at run time), and say what they can
do through its capabilities."""

import inspect

import pytest

from localchat.app.server.backends import Backend
from localchat.app.server.embedded_backend import EmbeddedBackend
from localchat.app.server.remote_backend import RemoteBackend

CAPABILITIES = ("renders_templates", "can_switch_models", "relays_openai")


def members(protocol: type) -> set[str]:
    return {name for name in vars(protocol) if not name.startswith("_")} | set(protocol.__annotations__)


@pytest.mark.parametrize("backend", [EmbeddedBackend(), RemoteBackend("http://127.0.0.1:9")])
def test_a_backend_has_every_member_of_the_protocol(backend):
    missing = {name for name in members(Backend) if not hasattr(backend, name)}
    assert missing == set()
    for name in members(Backend):
        wanted = inspect.getattr_static(Backend, name, None)
        if inspect.isfunction(wanted):  # the same parameters, and a coroutine where the protocol has one
            have = inspect.getattr_static(type(backend), name)
            assert list(inspect.signature(have).parameters) == list(inspect.signature(wanted).parameters), name
            assert inspect.iscoroutinefunction(have) == inspect.iscoroutinefunction(wanted), name


def test_the_capabilities_tell_the_backends_apart():
    assert [getattr(EmbeddedBackend, c) for c in CAPABILITIES] == [True, True, False]
    assert [getattr(RemoteBackend, c) for c in CAPABILITIES] == [False, False, True]
