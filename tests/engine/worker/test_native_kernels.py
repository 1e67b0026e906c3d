"""The native component's life: built once per instruction set into the cache folder and reused, the CPU's best one
chosen unless LOCALCHAT_NATIVE_ISA names another, and where none can be built or run, None with the reason said in
the log (the engine then runs torch's kernels: test_packed_linear runs both). And the kernels themselves, under each
instruction set this CPU runs: the integer matmul's arithmetic is exact where it is integer, its product is float's
on the weights within the stated bounds, and a row's bits depend on nothing but the row (not M, not its place in the
batch, not the thread count); the RMS norm against torch's. Where the CPU runs both instruction sets, both give the
same bits (8-bit panels aside: int8_matmul.c's header says why)."""

import logging

import numpy as np
import pytest
import torch

from localchat.engine.worker import native_kernels
from localchat.engine.worker.packed_linear import _panel_bytes

ROWS, COLS = 64, 512  # output rows (4 panels), input features (16 groups)
BATCH_SIZES = (1, 2, 3, 4, 5, 7, 8, 9, 15, 16, 17, 63, 64, 65, 100, 255, 512)


@pytest.fixture
def fresh(monkeypatch, tmp_path):
    """load() as on a machine that has not built the kernels yet."""
    monkeypatch.setenv("LOCALCHAT_HOME", str(tmp_path))
    native_kernels.load.cache_clear()
    yield
    native_kernels.load.cache_clear()


def test_built_once_and_then_reused(fresh, native, tmp_path):
    isa = native.isa
    [library] = (tmp_path / "cache" / "native").glob("kernels-*.so")
    assert library.name.startswith(f"kernels-{isa}-")
    built_at = library.stat().st_mtime_ns
    native_kernels.load.cache_clear()
    assert native_kernels.load().isa == isa and library.stat().st_mtime_ns == built_at
    assert native_kernels.layout() == native_kernels.VERSION  # one layout of packed weights for every build


def test_the_cpus_best_instruction_set_is_chosen_and_the_log_says_which(monkeypatch, caplog):
    monkeypatch.delenv("LOCALCHAT_NATIVE_ISA", raising=False)
    isa, reason = native_kernels._choice()
    if isa is None:
        pytest.skip(f"the kernels cannot run here: {reason}")
    runnable = native_kernels.runnable_isas()
    assert isa == runnable[0]
    native_kernels.load.cache_clear()
    try:
        with caplog.at_level(logging.INFO, logger=native_kernels.__name__):
            assert native_kernels.load().isa == runnable[0]
    finally:
        native_kernels.load.cache_clear()
    assert [r.getMessage() for r in caplog.records] == [f"native kernels built for {runnable[0]}"]


@pytest.mark.parametrize("setting, reason", [
    ({"LOCALCHAT_NATIVE": "0"}, "LOCALCHAT_NATIVE=0"),
    ({"CC": "/bin/false", "PATH": "/nonexistent"}, "the build failed"),  # a compiler that fails: the build fails
    ({"LOCALCHAT_NATIVE_ISA": "sse2"}, "LOCALCHAT_NATIVE_ISA=sse2 is none of avx512, avx2"),
])
def test_where_they_cannot_run_the_log_says_why_once(fresh, monkeypatch, caplog, setting, reason):
    if "CC" in setting and not native_kernels.runnable_isas():
        pytest.skip("this CPU cannot run the kernels at all")
    for name, value in setting.items():
        monkeypatch.setenv(name, value)
    with caplog.at_level(logging.WARNING, logger=native_kernels.__name__):
        assert native_kernels.load() is None and native_kernels.load() is None
    assert [r.getMessage() for r in caplog.records if reason in r.getMessage()] != []
    assert len(caplog.records) == 1
    assert native_kernels.layout().startswith("torch-")


def test_an_instruction_set_the_cpu_lacks_is_not_forced(fresh, monkeypatch, caplog):
    lacking = [isa for isa in native_kernels.ISAS if isa not in native_kernels.runnable_isas()]
    if not lacking:
        pytest.skip("this CPU runs every instruction set the kernels are built for")
    monkeypatch.setenv("LOCALCHAT_NATIVE_ISA", lacking[0])
    with caplog.at_level(logging.WARNING, logger=native_kernels.__name__):
        assert native_kernels.load() is None
    assert "the CPU lacks" in caplog.records[0].getMessage()


def random_panels(bits: int, seed: int) -> tuple[torch.Tensor, np.ndarray]:
    """Panels of random codes, float16 scales and zeros (6 bits: scales per 16 features, w = s (q - 32)), with the
    first panel's codes at their extremes (the largest code everywhere, or the smallest: where a product sum is
    largest), and the weights they hold in float64 [ROWS, COLS]."""
    rng = np.random.default_rng(seed)
    top = 2**bits - 1
    codes = rng.integers(0, top + 1, (ROWS, COLS)).astype(np.uint8)
    codes[:8], codes[8:16] = top, 0
    scales = (rng.random((ROWS, COLS // (16 if bits == 6 else 32))) * 1e-2 + 1e-3).astype(np.float16)
    if bits == 6:
        weights = scales.astype(np.float64).repeat(16, axis=1) * (codes.astype(np.float64) - 32)
        return torch.from_numpy(_panel_bytes(codes, scales, None, 6)), weights
    zeros = (rng.standard_normal(scales.shape) * 1e-2).astype(np.float16)
    zeros[:4] = -(2 ** (bits - 1)) * scales[:4]  # the packer's zeros for signed codes (Q8_0's -128 s) too
    weights = (scales.astype(np.float64).repeat(32, axis=1) * codes + zeros.astype(np.float64).repeat(32, axis=1))
    return torch.from_numpy(_panel_bytes(codes, scales, zeros, bits)), weights


def random_rows(rows: int, seed: int = 0) -> torch.Tensor:
    """Gaussian rows; the first ones at +-1 in every feature (every code +-127: the largest products)."""
    x = torch.randn(rows, COLS, generator=torch.Generator().manual_seed(seed))
    x[: min(rows, 3)] = torch.where(x[: min(rows, 3)] > 0, 1.0, -1.0)
    return x


def relative_error(got: torch.Tensor, expected: torch.Tensor) -> float:
    return ((got.double() - expected).norm() / expected.norm()).item()


@pytest.mark.parametrize("bits", [4, 6, 8])
def test_the_matmuls_integer_sums_are_exact(native, bits):
    """Against float64 on the very codes the kernel multiplies: only float32's rounding of each group's terms is
    left (a product sum clipped at int16's bound would leave percents), with the codes at their extremes."""
    kernels = native
    panels, weights = random_panels(bits, seed=bits)
    x = random_rows(40)
    codes, scales = kernels.quantize(x)
    activations = (codes.double().unflatten(1, (-1, 32)) * scales[0].double()[..., None]).flatten(1)
    assert torch.equal(codes[:3].abs(), torch.full((3, COLS), 127, dtype=torch.int8))
    expected = activations @ torch.from_numpy(weights).T
    got = kernels.matmul((codes, scales), panels, bits, ROWS)
    assert relative_error(got, expected) < 1e-6
    assert relative_error(got[:3, :16], expected[:3, :16]) < 1e-6  # extreme codes by extreme activations


@pytest.mark.parametrize("bits", [4, 6, 8])
def test_the_matmul_is_the_products_on_the_weights_within_the_bounds(native, bits):
    """Against float64 x @ W.T: one int8 pass of the activations within 1% (MAX_RELATIVE_ERROR of the 4-bit
    types), two passes (the head's) within 1e-4, for every M from 1 to 512."""
    kernels = native
    panels, weights = random_panels(bits, seed=10 + bits)
    reference = torch.from_numpy(weights).T
    for m in BATCH_SIZES:
        x = random_rows(m, seed=m)
        expected = x.double() @ reference
        assert relative_error(kernels.matmul(kernels.quantize(x), panels, bits, ROWS), expected) < 0.01, m
        assert relative_error(kernels.matmul(kernels.quantize(x, 2), panels, bits, ROWS, 2), expected) < 1e-4, m


@pytest.mark.parametrize("bits", [4, 6, 8])
@pytest.mark.parametrize("passes", [1, 2])
def test_a_rows_product_is_bit_identical_whatever_its_batch_and_the_thread_count(native, bits, passes):
    kernels = native
    panels, _ = random_panels(bits, seed=20 + bits)
    x = random_rows(520, seed=1)
    threads = torch.get_num_threads()
    try:
        torch.set_num_threads(1)
        alone = torch.cat([kernels.matmul(kernels.quantize(x[i : i + 1], passes), panels, bits, ROWS, passes)
                           for i in range(len(x))])
        for count in (1, 2):
            torch.set_num_threads(count)
            for rows in BATCH_SIZES:
                for start in (0, len(x) - rows):  # other neighbours, another place in the kernel's row tiles
                    batch = x[start : start + rows]
                    got = kernels.matmul(kernels.quantize(batch, passes), panels, bits, ROWS, passes)
                    assert torch.equal(got, alone[start : start + rows]), f"{rows} from {start}, {count} threads"
    finally:
        torch.set_num_threads(threads)


def test_the_rms_norm_matches_torch_and_a_rows_bits_do_not_depend_on_its_batch(native):
    kernels = native
    gen = torch.Generator().manual_seed(0)
    for size in (64, 576, 2050):  # a size that is not a multiple of 16 too
        x, weight = torch.randn(33, size, generator=gen), torch.randn(size, generator=gen)
        batch = kernels.rms_norm(x, weight, 1e-6)
        torch.testing.assert_close(batch, torch.nn.functional.rms_norm(x, (size,), weight, 1e-6),
                                   rtol=1e-5, atol=1e-5)
        assert all(torch.equal(kernels.rms_norm(x[i : i + 1], weight, 1e-6)[0], batch[i]) for i in (0, 17, 32))


def test_both_instruction_sets_give_the_same_bits(use_isa):
    """4- and 6-bit matmuls (one and two passes), the RMS norm and paged attention: one arithmetic in one order,
    whichever vectors run it."""
    if len(native_kernels.runnable_isas()) < 2:
        pytest.skip(f"this CPU runs only {native_kernels.runnable_isas()}")
    gen = torch.Generator().manual_seed(3)
    x, weight = random_rows(37, seed=2), torch.randn(COLS, generator=gen)
    query = torch.randn(5, 4, 64, generator=gen)
    k_cache, v_cache = (torch.randn(8, 16, 2, 64, generator=gen).bfloat16() for _ in range(2))
    tables, seqs, positions = torch.tensor([[3, 1, 6, 0]]), torch.zeros(5, dtype=torch.int64), torch.arange(40, 45)
    results = {}
    for isa in native_kernels.ISAS:
        kernels = use_isa(isa)
        results[isa] = [kernels.rms_norm(x, weight, 1e-6),
                        kernels.attend(query, k_cache, v_cache, tables, seqs, positions, None, 0.125)]
        for bits in (4, 6):
            panels, _ = random_panels(bits, seed=30 + bits)
            results[isa] += [kernels.matmul(kernels.quantize(x, passes), panels, bits, ROWS, passes)
                             for passes in (1, 2)]
    first, *others = results.values()
    assert all(torch.equal(a, b) for other in others for a, b in zip(first, other, strict=True))
