"""The native component's life: built once into the cache folder and reused, and where it cannot be built or run,
None with the reason said in the log (the engine then runs torch's kernels: test_packed_linear runs both); the RMS
norm against torch's."""

import logging

import pytest
import torch

from localchat.engine.worker import native_kernels


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


def test_the_rms_norm_matches_torch_and_a_rows_bits_do_not_depend_on_its_batch():
    kernels = native_kernels.load()
    if kernels is None:
        pytest.skip(f"the kernels cannot run here: {native_kernels._unavailable()}")
    gen = torch.Generator().manual_seed(0)
    for size in (64, 576, 2050):  # a size that is not a multiple of 16 too
        x, weight = torch.randn(33, size, generator=gen), torch.randn(size, generator=gen)
        batch = kernels.rms_norm(x, weight, 1e-6)
        torch.testing.assert_close(batch, torch.nn.functional.rms_norm(x, (size,), weight, 1e-6),
                                   rtol=1e-5, atol=1e-5)
        assert all(torch.equal(kernels.rms_norm(x[i : i + 1], weight, 1e-6)[0], batch[i]) for i in (0, 17, 32))
