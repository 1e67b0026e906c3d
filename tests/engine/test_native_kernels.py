"""The native component's life: built once into the cache folder and reused, and where it cannot be built or run,
None with the reason said in the log (the engine then runs torch's kernels: test_packed_linear runs both)."""

import logging

import pytest

from localchat.engine import native_kernels


@pytest.fixture
def fresh(monkeypatch, tmp_path):
    """load() as on a machine that has not built the kernels yet."""
    monkeypatch.setenv("LOCALCHAT_HOME", str(tmp_path))
    native_kernels.load.cache_clear()
    yield
    native_kernels.load.cache_clear()


def test_built_once_and_then_reused(fresh, tmp_path):
    if native_kernels._unavailable() is not None:
        pytest.skip(f"the kernels cannot run here: {native_kernels._unavailable()}")
    assert native_kernels.load() is not None
    [library] = (tmp_path / "cache" / "native").glob("kernels-*.so")
    built_at = library.stat().st_mtime_ns
    native_kernels.load.cache_clear()
    assert native_kernels.load() is not None and library.stat().st_mtime_ns == built_at
    assert native_kernels.layout() == native_kernels.VERSION


@pytest.mark.parametrize("setting, reason", [
    ({"LOCALCHAT_NATIVE": "0"}, "LOCALCHAT_NATIVE=0"),
    ({"CC": "/bin/false", "PATH": "/nonexistent"}, "the build failed"),  # a compiler that fails: the build fails
])
def test_where_they_cannot_run_the_log_says_why_once(fresh, monkeypatch, caplog, setting, reason):
    if "CC" in setting and native_kernels._unavailable() is not None:
        pytest.skip("this CPU cannot run the kernels at all")
    for name, value in setting.items():
        monkeypatch.setenv(name, value)
    with caplog.at_level(logging.WARNING, logger=native_kernels.__name__):
        assert native_kernels.load() is None and native_kernels.load() is None
    assert [r.getMessage() for r in caplog.records if reason in r.getMessage()] != []
    assert len(caplog.records) == 1
    assert native_kernels.layout().startswith("torch-")
