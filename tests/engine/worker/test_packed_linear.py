"""Packed GGUF weights: every type's product is float32's on gguf's dequantized weights within the stated bound, a
row's product is bit-identical whatever batch it is in, and packs stack, reorder rows and survive safetensors; each
on both paths, the integer kernels (native_kernels, as built for each instruction set the CPU runs) and torch's
weight-only kernels they fall back to."""

from contextlib import contextmanager

import gguf
import numpy as np
import pytest
import torch
from safetensors.torch import load_file, save_file

from localchat.engine.loading.gguf_conversion import unpermute
from localchat.engine.loading.model_catalog import embedded_gguf_path
from localchat.engine.worker import native_kernels, packed_linear
from localchat.engine.worker.packed_linear import (
    MAX_RELATIVE_ERROR,
    REPRESENTATIONS,
    GGUFMatrix,
    HeadRowsEmbedding,
    PackedLinear,
    pack,
)

Q = gguf.GGMLQuantizationType
K_TYPES = (Q.Q4_K, Q.Q5_K, Q.Q6_K)  # gguf's Python package dequantizes these but cannot quantize them
ALL_TYPES = pytest.mark.parametrize("qtype", list(REPRESENTATIONS), ids=lambda qtype: qtype.name)
ROWS, COLS = 64, 512
BATCH_SIZES = (1, 2, 3, 4, 5, 7, 8, 9, 15, 16, 17, 32, 33, 64, 100, 255, 512)


@pytest.fixture(autouse=True, params=[*native_kernels.ISAS, "torch kernels"])
def kernels(request, monkeypatch, use_isa) -> str:
    """The integer kernels as built for each instruction set the CPU runs, then torch's."""
    if request.param == "torch kernels":
        monkeypatch.setattr(native_kernels, "load", lambda: None)
    else:
        use_isa(request.param)
    return request.param


@pytest.fixture(scope="module")
def gguf_tensors() -> dict[str, gguf.ReaderTensor]:
    return {tensor.name: tensor for tensor in gguf.GGUFReader(embedded_gguf_path()).tensors}


@pytest.fixture(scope="module")
def weight(gguf_tensors) -> np.ndarray:
    """A real float32 weight [ROWS, COLS]: part of SmolLM2's first ffn_down, dequantized."""
    tensor = gguf_tensors["blk.0.ffn_down.weight"]
    return np.array(gguf.quants.dequantize(tensor.data, tensor.tensor_type)[:ROWS, :COLS], dtype=np.float32)


def gguf_data(qtype: Q, weight: np.ndarray) -> np.ndarray:
    """`weight` in `qtype` the way GGUFReader gives it; random valid blocks for the K types."""
    if qtype in K_TYPES:
        return random_k_blocks(qtype, *weight.shape, np.random.default_rng(0))
    return gguf.quants.quantize(weight, qtype)


def random_k_blocks(qtype: Q, rows: int, cols: int, rng: np.random.Generator) -> np.ndarray:
    """Random bytes for the codes and sub-block scales, small finite float16 super-block scales d and dmin."""
    block_size, block_bytes = gguf.GGML_QUANT_SIZES[qtype]
    blocks = rng.integers(0, 256, (rows, cols // block_size, block_bytes), dtype=np.uint8)

    def small_float16() -> np.ndarray:
        return (rng.random(blocks.shape[:2]) * 1e-3).astype(np.float16).view(np.uint8).reshape(*blocks.shape[:2], 2)

    if qtype == Q.Q6_K:
        blocks[..., -2:] = small_float16()  # d closes the block
    else:
        blocks[..., 0:2], blocks[..., 2:4] = small_float16(), small_float16()  # d, dmin open it
    return blocks.reshape(rows, -1)


def dequantized(data: np.ndarray, qtype: Q) -> torch.Tensor:
    return torch.from_numpy(np.array(gguf.quants.dequantize(data, qtype), dtype=np.float32))


def packed_layer(qtype: Q, weight: np.ndarray) -> tuple[PackedLinear, np.ndarray]:
    data = gguf_data(qtype, weight)
    return PackedLinear(pack([GGUFMatrix(data, qtype, weight.shape)])), data


def random_rows(rows: int, seed: int = 0) -> torch.Tensor:
    return torch.randn(rows, COLS, generator=torch.Generator().manual_seed(seed))


@contextmanager
def one_thread():
    threads = torch.get_num_threads()
    torch.set_num_threads(1)
    try:
        yield
    finally:
        torch.set_num_threads(threads)


def relative_error(got: torch.Tensor, expected: torch.Tensor) -> float:
    return ((got.float() - expected).norm() / expected.norm()).item()


@ALL_TYPES
def test_the_product_is_float32_on_the_dequantized_weights(qtype, weight):
    layer, data = packed_layer(qtype, weight)
    x = random_rows(9)
    expected = x @ dequantized(data, qtype).T
    for dtype in (torch.float32, torch.bfloat16):
        got = layer(x.to(dtype))
        assert got.dtype == dtype and got.shape == expected.shape
        assert relative_error(got, expected) < MAX_RELATIVE_ERROR[qtype]


@ALL_TYPES
def test_a_rows_product_is_bit_identical_whatever_the_batch(qtype, weight):
    layer, _ = packed_layer(qtype, weight)
    x = random_rows(520, seed=1)
    with one_thread():  # also fast: hundreds of tiny calls on two threads crawl when the other core is busy
        alone = torch.cat([layer(x[i : i + 1]) for i in range(len(x))])
    for rows in BATCH_SIZES:
        for start in (0, len(x) - rows):  # other neighbours, another position in the kernel's row blocks
            assert torch.equal(layer(x[start : start + rows]), alone[start : start + rows]), f"{rows} from {start}"


def test_stacked_matrices_with_reordered_rows_compute_their_own_rows():
    rng = np.random.default_rng(2)
    q, k, v = (random_k_blocks(qtype, rows, COLS, rng) for qtype, rows in ((Q.Q4_K, 64), (Q.Q4_K, 32), (Q.Q6_K, 32)))
    order = rng.permutation(64)
    matrices = [GGUFMatrix(q, Q.Q4_K, (64, COLS), rows=order), GGUFMatrix(k, Q.Q4_K, (32, COLS)),
                GGUFMatrix(v, Q.Q6_K, (32, COLS))]
    tensors = pack(matrices)
    assert {key.split(".")[0] for key in tensors} == {"0", "1"}  # q and k share a pack, v is held apart
    fused = PackedLinear(tensors)
    assert (fused.in_features, fused.out_features) == (COLS, 128)
    x = random_rows(5)
    alone = [PackedLinear(pack([GGUFMatrix(m.data, m.tensor_type, m.shape)]))(x) for m in matrices]
    assert torch.equal(fused(x), torch.cat([alone[0][:, order], alone[1], alone[2]], dim=1))


def test_the_embedded_models_own_qkv_with_llamas_rows_restored(gguf_tensors):
    heads = {"attn_q": 9, "attn_k": 3, "attn_v": None}  # SmolLM2-135M: 9 query heads, 3 key/value heads
    matrices, weights = [], []
    for name, n_head in heads.items():
        tensor = gguf_tensors[f"blk.0.{name}.weight"]
        shape = (tensor.data.shape[0], int(tensor.shape[0]))
        rows = unpermute(np.arange(shape[0]), n_head) if n_head else None
        matrices.append(GGUFMatrix(tensor.data, tensor.tensor_type, shape, rows=rows))
        weight = dequantized(tensor.data, tensor.tensor_type)
        weights.append(torch.from_numpy(unpermute(weight.numpy(), n_head)) if n_head else weight)
    x = torch.randn(3, 576, generator=torch.Generator().manual_seed(3))
    expected = x @ torch.cat(weights).T
    assert relative_error(PackedLinear(pack(matrices))(x), expected) < MAX_RELATIVE_ERROR[Q.Q4_1]


def test_a_row_count_the_int4_kernel_cannot_take_is_held_as_int8(weight):
    data = gguf.quants.quantize(weight[:24], Q.Q4_0)
    tensors = pack([GGUFMatrix(data, Q.Q4_0, (24, COLS))])
    assert set(tensors) == {"0.int8", "0.scales"}
    x = random_rows(4)
    assert relative_error(PackedLinear(tensors)(x), x @ dequantized(data, Q.Q4_0).T) < MAX_RELATIVE_ERROR[Q.Q5_0]


def test_packs_survive_a_safetensors_round_trip(tmp_path, weight):
    matrices = [GGUFMatrix(gguf_data(qtype, weight), qtype, weight.shape) for qtype in (Q.Q4_1, Q.Q8_0, Q.Q5_K, Q.F16)]
    tensors = pack(matrices)
    save_file(tensors, tmp_path / "packed.safetensors")
    x = random_rows(6)
    assert torch.equal(PackedLinear(load_file(tmp_path / "packed.safetensors"))(x), PackedLinear(tensors)(x))


def test_packing_a_chunk_of_rows_at_a_time_gives_the_same_pack(monkeypatch, weight):
    tall = np.concatenate([weight, weight[::-1] * 0.5])  # 128 rows
    matrices = [GGUFMatrix(gguf_data(qtype, tall), qtype, tall.shape) for qtype in (Q.Q8_0, Q.Q5_0, Q.F16)]
    whole = pack(matrices)
    monkeypatch.setattr(packed_linear, "CHUNK_ROWS", 64)
    chunked = pack(matrices)
    assert whole.keys() == chunked.keys() and all(torch.equal(whole[key], chunked[key]) for key in whole)


def test_unsupported_types_and_mismatched_shapes_are_refused(weight):
    with pytest.raises(ValueError, match="Q2_K"):
        pack([GGUFMatrix(np.zeros((ROWS, COLS // 256 * 84), np.uint8), Q.Q2_K, (ROWS, COLS))])
    with pytest.raises(ValueError, match="in_features"):
        pack([GGUFMatrix(weight, Q.F32, weight.shape), GGUFMatrix(weight[:, :256], Q.F32, (ROWS, 256))])


@pytest.mark.parametrize("qtype", [Q.Q8_0, Q.Q6_K, Q.Q5_0, Q.Q4_K])
def test_a_tied_embedding_reads_the_int8_heads_rows_or_keeps_its_own(qtype, weight):
    """A tied head held as per-row int8 (Q8_0, Q5, Q6) serves the embedding too, within its error of the file's
    rows; an int4 head does not, and the embedding keeps the file's raw rows (GGUFEmbedding)."""
    data = gguf_data(qtype, weight)
    head = PackedLinear(pack([GGUFMatrix(data, qtype, weight.shape)], head=True))
    assert HeadRowsEmbedding.fits(head) == (qtype != Q.Q4_K)
    if not HeadRowsEmbedding.fits(head):
        return
    ids = torch.tensor([[0, 5, 5], [ROWS - 1, 17, 2]])
    rows = HeadRowsEmbedding(head, torch.float32)(ids)
    expected = dequantized(data, qtype)[ids]
    assert rows.shape == (2, 3, COLS) and relative_error(rows, expected) < MAX_RELATIVE_ERROR[qtype]
    if "0.panels" in pack([GGUFMatrix(data, qtype, weight.shape)], head=True) and qtype in (Q.Q6_K, Q.Q8_0):
        assert relative_error(rows, expected) < 1e-3  # the file's own codes: only the float16 scales round
    assert torch.equal(rows[0, 1], rows[0, 2])


@ALL_TYPES
def test_the_quantized_types_run_the_integer_kernels_where_they_can(qtype, weight, kernels):
    tensors = pack([GGUFMatrix(gguf_data(qtype, weight), qtype, weight.shape)])
    uses_panels = "0.panels" in tensors
    assert uses_panels == (kernels != "torch kernels" and REPRESENTATIONS[qtype] is not packed_linear.WeightForm.BF16)


@pytest.mark.parametrize("qtype", [Q.Q4_K, Q.Q6_K, Q.Q8_0])
def test_a_second_int8_pass_leaves_the_weights_own_error(qtype, weight, kernels):
    """precise_input (and the head): x's int8 codes and those of their rounding's remainder, side by side in one
    call; the product is then float32's on the file's weights, far closer than one pass, and batch-invariant."""
    if kernels == "torch kernels":
        pytest.skip("a choice of the integer kernels")
    data = gguf_data(qtype, weight)
    one, two, head = (PackedLinear(pack([GGUFMatrix(data, qtype, weight.shape)], **how))
                      for how in ({}, {"precise_input": True}, {"head": True}))
    x = random_rows(33, seed=4)
    expected = x @ dequantized(data, qtype).T
    print(f"{qtype.name}: one pass {relative_error(one(x), expected):.2e}, two {relative_error(two(x), expected):.2e}")
    assert relative_error(two(x), expected) < min(relative_error(one(x), expected) / 10, 5e-4)  # Q4_K: float16 s
    assert torch.equal(head(x), two(x))
    assert torch.equal(two(x[5:6]), two(x)[5:6]) and torch.equal(two(x[7:9]), two(x)[7:9])
