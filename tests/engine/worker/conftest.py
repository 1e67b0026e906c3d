"""Fixtures of the worker's tests: the native kernels as built for each instruction set this CPU runs."""

import pytest

from localchat.engine.worker import native_kernels


@pytest.fixture
def use_isa(monkeypatch):
    """use_isa(name) -> the kernels built for that instruction set, which native_kernels.load() gives until the test
    ends (LOCALCHAT_NATIVE_ISA); the test is skipped where the CPU cannot run them."""

    used = []

    def use(isa: str) -> native_kernels.Kernels:
        used.append(isa)
        if isa not in native_kernels.runnable_isas():
            pytest.skip(f"this CPU does not run {isa} (it runs: {native_kernels.runnable_isas()})")
        monkeypatch.setenv("LOCALCHAT_NATIVE_ISA", isa)
        native_kernels.load.cache_clear()
        kernels = native_kernels.load()
        assert kernels is not None and kernels.isa == isa
        return kernels

    yield use
    if used:
        native_kernels.load.cache_clear()


@pytest.fixture(params=list(native_kernels.ISAS))
def native(request, use_isa) -> native_kernels.Kernels:
    """The kernels built for each instruction set in turn: a test each, skipped where the CPU does not run it."""
    return use_isa(request.param)
