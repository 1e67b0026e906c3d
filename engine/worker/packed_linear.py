"""GGUF matrices run as they are stored: packed 4- and 8-bit weights under torch's weight-only CPU kernels.

A GGUF file stores a matrix row by row (one row per output feature), each row as blocks of integer codes along
the input features with float16 scales (and minimums) per block. Dequantizing it to float32 costs 4-7x the
file's memory; here each type is held in a form (gguf_header's WeightForm, as HELD_AS says) that one of torch's
kernels multiplies directly:

- **int4** (Q4_0, Q4_1, Q4_K): `aten._weight_int4pack_mm_for_cpu` computes w = (q - 8) * s + z for codes q in
  0..15 with a bfloat16 scale s and zero z per group of 32 weights of a row. Q4_0 (w = d (q - 8)): s = d, z = 0.
  Q4_1 (w = d q + m): s = d, z = m + 8 d. Q4_K (256-weight super-blocks of eight 32-weight sub-blocks with 6-bit
  scales sc and mins m: w = d sc q - dmin m): s = d sc, z = 8 d sc - dmin m. Exact up to the bfloat16 rounding of
  s and z.
- **int4 x2** (Q8_0): the int8 code splits as q = 16 h + l (h in -8..7, l in 0..15) into two int4 matrices, h + 8
  with s = 16 d, z = 0 and l with s = d, z = 8 d, whose products add up to the block's. Exact up to bfloat16 as
  above, at twice the int4 time. Per-row int8 (WeightForm.INT8 for Q8_0 in HELD_AS) would hold 1.0 byte a weight and
  decode 1.7-2.8x faster, but with 4x the error (1.2-1.3% against 0.3% on SmolLM2's Q8_0 embedding): twice Q8_0's
  own quantization error, the very thing a Q8_0 download is chosen to avoid.
- **int8** (Q5_0, Q5_1, Q5_K, Q6_K): dequantized, then requantized to symmetric int8 with one bfloat16 scale per
  row for `aten._weight_int8pack_mm`. Lossy: about 1% of the product, against their own 2-5% quantization error
  (measured on SmolLM2 weights), so the total error grows by a tenth at most. Exact alternatives cost more than
  they give: 5-bit codes as two int4 matrices take 1.25 bytes a weight (1.8x a Q5_0 file) at twice the time, and
  Q6_K's 16-weight sub-blocks do not fit the int4 kernel's groups of 32 or more.
- **bf16** (F16, BF16, F32): a dense bfloat16 matrix under `F.linear`.

Bytes per weight held (in the file), and the bound on the product's relative error against float32 on the
dequantized weights (`MAX_RELATIVE_ERROR`, checked by the tests; measured: 0.3% for int4, int4 x2 and bf16,
0.8-1.0% for int8):

    Q4_0 0.625 (0.5625)  Q4_1 0.625 (0.625)   Q4_K 0.625 (0.5625)  Q8_0 1.25 (1.0625)   all 1%
    Q5_0 1.0 (0.6875)    Q5_1 1.0 (0.75)      Q5_K 1.0 (0.6875)    Q6_K 1.0 (0.8203)    all 2%
    F16  2.0 (2.0)       BF16 2.0 (2.0)       F32  2.0 (4.0)                            1%

A Q4_K_M file (mostly Q4_K, some Q6_K) is held in about 1.15x its size. Matrices whose row count is not a multiple
of 16 (the int4 kernel's minimum) are held as int8.

Every kernel takes bfloat16 activations (their float32 paths are scalar loops on x86, 10-40x slower) and returns
bfloat16; the layer returns the activation's dtype.

Reproducibility: both kernels give every output row its own loop over the input features, in an order that depends
on nothing else (not on the number of rows, not on the thread count: threads split row and column blocks), so a
row's product is bit-identical whatever the other rows of the call (the tests check every type, M from 1 to 512,
on one thread against two). Dense bfloat16 `F.linear` showed the same on this machine (AVX2). Dense float32 (MKL)
does not: 1, 2-3, 4-7, 8-15 and 16+ rows run different code with different bits; hence bfloat16 for the dense
types too. The price is speed for many rows: with one kernel for every M, a prefill (M >= 256) takes about 2-3x
dense float32's time under int4 and int8, 4-5x under int4 x2 and 4-8x under bf16 on CPUs without bfloat16
instructions. A decode step (M = 1) on a 1-3B model's matrices takes 0.2-0.4x float32's time under int4 and int8,
0.6x under int4 x2; on SmolLM2's, which fit in cache, 0.6-1x and 2x (benchmarks/packed_kernels.py, two threads).

The int4 kernel's packed layout depends on the CPU's vector width (blocks of 32 output rows under AVX2, 64 under
AVX512): a cache of packed tensors must be keyed by `KERNEL_LAYOUT`. CPU only.
"""

import itertools
from collections.abc import Sequence
from dataclasses import dataclass

import gguf
import numpy as np
import torch
from gguf import GGMLQuantizationType as Q
from torch import nn

from localchat.engine.loading.gguf_header import HELD_AS, WeightForm, held_as_head
from localchat.engine.worker import native_kernels

GROUP = 32  # weights per int4 scale and zero
CHUNK_ROWS = 4096  # rows converted at once; a multiple of every layout's row block, so chunks pack independently

REPRESENTATIONS = {Q[name]: representation for name, representation in HELD_AS.items()}
MAX_RELATIVE_ERROR = {qtype: 0.02 if representation is WeightForm.INT8 else 0.01
                      for qtype, representation in REPRESENTATIONS.items()}


@dataclass(frozen=True)
class GGUFMatrix:
    """One matrix of a GGUF file: `data` and `tensor_type` as `GGUFReader` gives them, its logical shape
    [out_features, in_features], and `rows`: which of its rows, in which order, make the output (None: all, as
    stored). `rows` undoes llama.cpp's q/k permutation: `gguf_conversion.unpermute(np.arange(out_features), heads)`."""

    data: np.ndarray
    tensor_type: Q
    shape: tuple[int, int]
    rows: np.ndarray | None = None

    @property
    def out_features(self) -> int:
        return self.shape[0] if self.rows is None else len(self.rows)


def kernel_layout() -> str:
    """What `pack` lays weights out for on this machine (a cache of packed tensors is keyed by it)."""
    return native_kernels.layout()


def pack(matrices: Sequence[GGUFMatrix], head: bool = False, precise_input: bool = False) -> dict[str, torch.Tensor]:
    """The packed tensors of `matrices` stacked along output rows (q, k, v into one qkv projection), for
    `PackedLinear` and for a safetensors file. Neighbours held alike are packed as one part; the keys are
    `<part>.<name>`. Where the integer kernels run (native_kernels), the quantized types are held as their panels
    (Q8_0 exactly), and the logits head (head=True) and precise_input=True layers take a second int8 pass for
    the rounding of their activations (see _Panels). Elsewhere head=True holds the logits head as held_as_head
    says (per-row int8 where the table says int4 x2: 1.7-2.8x faster, 1.2% error)."""
    if len({m.shape[1] for m in matrices}) != 1:
        raise ValueError(f"stacked matrices must share in_features: {[m.shape for m in matrices]}")
    native = native_kernels.load() is not None

    def held_as(matrix: GGUFMatrix) -> WeightForm | int:
        chosen = _representation(matrix)
        if native and chosen is not WeightForm.BF16 and not matrix.out_features % native_kernels.PANEL:
            return _panel_bits(matrix)
        return held_as_head(chosen) if head else chosen

    tensors = {}
    for part, (representation, run) in enumerate(itertools.groupby(matrices, held_as)):
        if isinstance(representation, WeightForm):
            packed = _PACKERS[representation](list(run))
        else:
            packed = _pack_panels(list(run)) | {"passes": torch.tensor(2 if head or precise_input else 1)}
        tensors |= {f"{part}.{name}": tensor for name, tensor in packed.items()}
    return tensors


class PackedLinear(nn.Module):
    """`x @ W.T + bias` over the output of `pack` (and a float32 "bias", if given), for x float32 or bfloat16
    [M, in_features].

    The packed tensors are plain attributes, not buffers, so that casting the model to a float dtype leaves them
    as the kernels need them."""

    def __init__(self, tensors: dict[str, torch.Tensor]):
        super().__init__()
        tensors = dict(tensors)
        self.bias = tensors.pop("bias", None)
        parts: dict[str, dict[str, torch.Tensor]] = {}
        for key, tensor in tensors.items():
            part, name = key.split(".", 1)
            parts.setdefault(part, {})[name] = tensor
        self.parts = [_PART_KINDS[frozenset(named)](**named)
                      for _, named in sorted(parts.items(), key=lambda item: int(item[0]))]
        self.in_features = self.parts[0].in_features
        self.out_features = sum(part.out_features for part in self.parts)
        self.dense_from: int | None = None  # rows from which the panels run dense (kernel_choice.py); None: never

    @property
    def on_panels(self) -> bool:
        """Every part is held as the native kernels' panels (what fused_decoder.py multiplies)."""
        return all(isinstance(part, _Panels) for part in self.parts)

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        inputs = _Inputs(x)
        dense = self.dense_from is not None and x.shape[0] >= self.dense_from
        outputs = [part.dense(inputs) if dense else part(inputs) for part in self.parts]
        y = outputs[0] if len(outputs) == 1 else torch.cat(outputs, dim=-1)
        y = y if y.dtype == x.dtype else y.to(x.dtype)
        return y if self.bias is None else y + self.bias.to(x.dtype)


class GGUFEmbedding(nn.Module):
    """Token embeddings kept as their GGUF rows: the rows a step looks up are dequantized by gguf (exactly as
    gguf.quants.dequantize does for the whole matrix), the others stay packed."""

    def __init__(self, raw: torch.Tensor, ggml_type: int, dtype: torch.dtype):
        super().__init__()
        self.raw, self.ggml_type, self.dtype = raw, Q(ggml_type), dtype

    def forward(self, input_ids: torch.Tensor) -> torch.Tensor:
        rows = gguf.quants.dequantize(self.raw[input_ids.cpu()].numpy(), self.ggml_type)
        return torch.from_numpy(np.asarray(rows, dtype=np.float32)).to(input_ids.device, self.dtype)


class HeadRowsEmbedding(nn.Module):
    """Token embeddings read from the rows of a tied logits head held as per-row int8 or as 6- or 8-bit panels (a Q5,
    Q6 or Q8 embedding): the matrix is held once, and a looked-up row is computed from its codes as the head's
    kernel computes it (Q6_K and Q8_0 panels: the file's values; requantized int8: about 1% from them)."""

    def __init__(self, head: PackedLinear, dtype: torch.dtype):
        super().__init__()
        (self.rows,) = head.parts
        self.dtype = dtype

    def forward(self, input_ids: torch.Tensor) -> torch.Tensor:
        return self.rows.rows(input_ids).to(self.dtype)

    @staticmethod
    def fits(head: PackedLinear) -> bool:
        (part, *others) = head.parts
        return not others and (isinstance(part, _Int8Rows) or isinstance(part, _Panels) and part.code_bits in (6, 8))


@dataclass
class _Int4Planes:
    """The sum of int4 matrices (planes): one for the Q4 types, two for Q8_0."""

    packed: torch.Tensor  # uint8 [planes, out_features, in_features // 2] in the kernel's layout
    scales_and_zeros: torch.Tensor  # bfloat16 [planes, in_features // GROUP, out_features, 2]

    def __post_init__(self) -> None:
        # each plane's tensors, split once (iterating a tensor in every call costs a decode step ~0.3 ms)
        self.planes = list(zip(self.packed.unbind(), self.scales_and_zeros.unbind(), strict=True))

    def __call__(self, inputs: "_Inputs") -> torch.Tensor:
        x = inputs.bfloat16
        mm = torch.ops.aten._weight_int4pack_mm_for_cpu
        if len(self.planes) == 1:
            return mm(x, self.planes[0][0], GROUP, self.planes[0][1])
        return sum(mm(x, packed, GROUP, sz).float() for packed, sz in self.planes)

    @property
    def in_features(self) -> int:
        return self.packed.shape[2] * 2

    @property
    def out_features(self) -> int:
        return self.packed.shape[1]


@dataclass
class _Int8Rows:
    int8: torch.Tensor  # [out_features, in_features]
    scales: torch.Tensor  # bfloat16 [out_features]

    def __call__(self, inputs: "_Inputs") -> torch.Tensor:
        return torch.ops.aten._weight_int8pack_mm(inputs.bfloat16, self.int8, self.scales)

    def rows(self, ids: torch.Tensor) -> torch.Tensor:
        """Rows `ids` (any shape) of the weight, float32 [*ids.shape, in_features]."""
        return self.int8[ids].float() * self.scales[ids].float()[..., None]

    @property
    def in_features(self) -> int:
        return self.int8.shape[1]

    @property
    def out_features(self) -> int:
        return self.int8.shape[0]


@dataclass
class _Dense:
    weight: torch.Tensor  # bfloat16 [out_features, in_features]

    def __call__(self, inputs: "_Inputs") -> torch.Tensor:
        return nn.functional.linear(inputs.bfloat16, self.weight)

    @property
    def in_features(self) -> int:
        return self.weight.shape[1]

    @property
    def out_features(self) -> int:
        return self.weight.shape[0]


@dataclass
class _Panels:
    """Unsigned 4-, 6- or 8-bit codes with a float16 scale and zero per 16 rows by 32 features (6 bits: a scale per 16
    features and an implicit zero), for the integer kernels (native_kernels). `passes` says how the activations meet
    them: 1, as int8 codes per 32 features; 2, as those codes and then the codes of what their rounding left (x - t
    a), which leaves about float32's error, for the logits head (one pass moves near-tied logits) and the projection
    whose input has the widest outlier channels. The two passes' rows go through the kernel side by side, so the
    weights are read once. Measured on SmolLM2 against float32 transformers, mean relative error of the logits: 2.1%
    with torch's bfloat16 kernels, 3.7% with one int8 pass everywhere, 2.7% with two for the head and the
    attention's input projection. `bits` and `passes` are tensors so that a safetensors file holds them."""

    panels: torch.Tensor  # uint8 [out_features / 16, in_features / 32, group bytes]
    bits: torch.Tensor  # int64 [] (4, 6 or 8)
    passes: torch.Tensor  # int64 [] (1 or 2)

    def __post_init__(self) -> None:
        self.kernels, self.code_bits, self.code_passes = native_kernels.load(), int(self.bits), int(self.passes)
        if self.kernels is None:
            raise RuntimeError("these weights were packed for the integer kernels, which cannot run here")

    def __call__(self, inputs: "_Inputs") -> torch.Tensor:
        return self.kernels.matmul(inputs.int8(self.kernels, self.code_passes), self.panels, self.code_bits,
                                   self.out_features, self.code_passes)

    def dense(self, inputs: "_Inputs") -> torch.Tensor:
        """The product through oneDNN's bfloat16 matmul over the panels dequantized into a scratch matrix (the prompt
        rows' kernel where kernel_choice.py found it faster): float32 y."""
        weight = _scratch(self.out_features * self.in_features).view(self.out_features, self.in_features)
        self.kernels.dequantize(self.panels, self.code_bits, self.out_features, self.in_features, weight)
        return nn.functional.linear(inputs.bfloat16, weight).float()

    def rows(self, ids: torch.Tensor) -> torch.Tensor:
        """Rows `ids` (any shape) of a 6- or 8-bit weight, float32 [*ids.shape, in_features], as the kernels compute
        them: s q + z, or s (q - 32) per half of each group for 6 bits."""
        flat = ids.flatten()
        lanes, panel = native_kernels.PANEL, self.panels[flat // native_kernels.PANEL]  # [R, groups, group bytes]
        pick = torch.arange(len(flat)), flat % lanes

        def lane_bytes(start: int, chunks: int, width: int) -> torch.Tensor:
            """The row's bytes of `chunks` runs of 16 lanes by `width` bytes: [R, groups, chunks, width]."""
            return panel[..., start:start + chunks * lanes * width].unflatten(-1, (chunks, lanes, width)
                                                                              ).permute(0, 3, 1, 2, 4)[pick]

        code_bytes = native_kernels.CODE_BYTES[self.code_bits]
        halves = panel[..., code_bytes:].contiguous().view(torch.float16).unflatten(-1, (2, lanes))
        scale = halves.permute(0, 3, 1, 2)[pick].float()  # [R, groups, 2]: scale and zero, or the halves' scales
        if self.code_bits == 8:
            codes = lane_bytes(0, 8, 4).flatten(-2).float()  # [R, groups, 32]
            weights = codes * scale[..., :1] + scale[..., 1:]
        else:
            low = lane_bytes(0, 4, 4)  # chunk c: features 8c + f (low nibble) and 8c + 4 + f (high)
            top = lane_bytes(256, 2, 4)  # half h: features 16h + 4k + f at bits 2k
            codes = torch.stack([low & 15, low >> 4], dim=-2).flatten(-3)
            codes = codes | (torch.stack([top >> 2 * k & 3 for k in range(4)], dim=-2).flatten(-3) << 4)
            weights = ((codes.float() - 32).unflatten(-1, (2, 16)) * scale[..., None]).flatten(-2)
        return weights.flatten(-2).reshape(*ids.shape, -1)

    @property
    def in_features(self) -> int:
        return self.panels.shape[1] * native_kernels.GROUP

    @property
    def out_features(self) -> int:
        return self.panels.shape[0] * native_kernels.PANEL


_SCRATCH: list[torch.Tensor] = [torch.empty(0, dtype=torch.bfloat16)]  # one matrix at a time (the engine's thread)


def _scratch(numel: int) -> torch.Tensor:
    """bfloat16 scratch of at least `numel` elements, grown to the largest matrix dequantized, never shrunk."""
    if _SCRATCH[0].numel() < numel:
        _SCRATCH[0] = torch.empty(numel, dtype=torch.bfloat16)
    return _SCRATCH[0][:numel]


class _Inputs:
    """One call's activations [M, in_features] in the form each part takes: bfloat16 for torch's kernels, int8 codes
    with their scales for the integer kernels; each made once per call, when a part first asks."""

    def __init__(self, x: torch.Tensor):
        self.x = x
        self._bfloat16, self._int8 = None, {}

    @property
    def bfloat16(self) -> torch.Tensor:
        if self._bfloat16 is None:
            self._bfloat16 = self.x.to(torch.bfloat16).contiguous()
        return self._bfloat16

    def int8(self, kernels: native_kernels.Kernels, passes: int) -> tuple[torch.Tensor, torch.Tensor]:
        """The codes of x's rows; with passes=2 each row followed by the codes of its rounding's remainder."""
        if passes not in self._int8:
            self._int8[passes] = kernels.quantize(self.x, passes)
        return self._int8[passes]


_PART_KINDS = {frozenset({"packed", "scales_and_zeros"}): _Int4Planes, frozenset({"int8", "scales"}): _Int8Rows,
               frozenset({"weight"}): _Dense, frozenset({"panels", "bits", "passes"}): _Panels}


def _representation(matrix: GGUFMatrix) -> WeightForm:
    if matrix.tensor_type not in REPRESENTATIONS:
        raise ValueError(f"unsupported GGUF tensor type {matrix.tensor_type.name}")
    representation = REPRESENTATIONS[matrix.tensor_type]
    if representation in (WeightForm.INT4, WeightForm.INT4_X2) and matrix.out_features % 16:
        return WeightForm.INT8
    return representation


def _raw_rows(matrix: GGUFMatrix) -> np.ndarray:
    """The matrix's bytes [out_features, bytes per row], its rows selected."""
    raw = np.ascontiguousarray(matrix.data).view(np.uint8).reshape(matrix.shape[0], -1)
    expected = gguf.quants.quant_shape_to_byte_shape(matrix.shape, matrix.tensor_type)
    if raw.shape != tuple(expected):
        raise ValueError(f"{matrix.tensor_type.name} bytes of shape {raw.shape} do not hold a {matrix.shape} matrix")
    return raw if matrix.rows is None else raw[matrix.rows]


def _pack_int4(run: list[GGUFMatrix]) -> dict[str, torch.Tensor]:
    planes = [_int4_planes(matrix) for matrix in run]
    codes, scales, zeros = (np.concatenate(parts, axis=1) for parts in zip(*planes, strict=True))
    convert = torch.ops.aten._convert_weight_to_int4pack_for_cpu
    packed = torch.stack([torch.cat([convert(chunk.to(torch.int32), 1) for chunk in plane.split(CHUNK_ROWS)])
                          for plane in torch.from_numpy(codes)])
    scales_and_zeros = np.stack([scales, zeros], axis=-1).transpose(0, 2, 1, 3)
    return {"packed": packed, "scales_and_zeros": torch.from_numpy(np.ascontiguousarray(scales_and_zeros)).bfloat16()}


def _int4_planes(matrix: GGUFMatrix) -> tuple[np.ndarray, np.ndarray, np.ndarray]:
    """Codes uint8 [planes, rows, cols] in 0..15, and float32 scales and zeros [planes, rows, cols // GROUP] with
    w = sum over planes of (code - 8) * scale + zero (see the module docstring)."""
    raw = _raw_rows(matrix)
    rows = raw.shape[0]
    if matrix.tensor_type in (Q.Q4_0, Q.Q4_1):
        blocks = raw.reshape(rows, -1, 18 if matrix.tensor_type == Q.Q4_0 else 20)
        d = _float16(blocks[..., 0:2])
        zero = np.zeros_like(d) if matrix.tensor_type == Q.Q4_0 else _float16(blocks[..., 2:4]) + 8 * d
        nibbles = blocks[..., -16:]  # the low nibbles hold a block's first 16 weights
        codes = np.concatenate([nibbles & 15, nibbles >> 4], axis=-1)
        return codes.reshape(1, rows, -1), d[None], zero[None]
    if matrix.tensor_type == Q.Q4_K:
        blocks = raw.reshape(rows, -1, 144)
        d, dmin = _float16(blocks[..., 0:2]), _float16(blocks[..., 2:4])
        sub_scales, sub_mins = _q4_k_scales(blocks[..., 4:16])
        scale = (d[..., None] * sub_scales).reshape(rows, -1)
        zero = 8 * scale - (dmin[..., None] * sub_mins).reshape(rows, -1)
        nibbles = blocks[..., 16:].reshape(rows, -1, 4, 1, 32)  # 32 bytes: sub-block 2i low, 2i + 1 high nibbles
        codes = np.concatenate([nibbles & 15, nibbles >> 4], axis=3)
        return codes.reshape(1, rows, -1), scale[None], zero[None]
    blocks = raw.reshape(rows, -1, 34)  # Q8_0
    d = _float16(blocks[..., 0:2])
    q = blocks[..., 2:].view(np.int8)
    codes = np.stack([(q >> 4) + 8, q & 15]).astype(np.uint8)  # q = 16 * (high - 8) + low
    return codes.reshape(2, rows, -1), np.stack([16 * d, d]), np.stack([np.zeros_like(d), 8 * d])


def _float16(pairs: np.ndarray) -> np.ndarray:
    """Little-endian float16 [..., 2 bytes] -> float32 [...]."""
    return np.ascontiguousarray(pairs).view(np.float16)[..., 0].astype(np.float32)


def _q4_k_scales(packed: np.ndarray) -> tuple[np.ndarray, np.ndarray]:
    """Q4_K's 12 bytes -> eight 6-bit sub-block scales and eight mins, float32. Bytes 0-3 hold scales 0-3
    (and the top 2 bits of scales 4-7), bytes 4-7 mins 0-3 (and the top bits of mins 4-7), bytes 8-11 the low
    4 bits of scales 4-7 (low nibble) and of mins 4-7 (high nibble)."""
    low, mid, high = packed[..., 0:4], packed[..., 4:8], packed[..., 8:12]
    scales = np.concatenate([low & 63, (high & 15) | (low >> 6) << 4], axis=-1)
    mins = np.concatenate([mid & 63, (high >> 4) | (mid >> 6) << 4], axis=-1)
    return scales.astype(np.float32), mins.astype(np.float32)


def _pack_int8(run: list[GGUFMatrix]) -> dict[str, torch.Tensor]:
    """Written chunk by chunk into the result (no list of chunks to concatenate: a second copy of a tied head)."""
    rows = sum(matrix.out_features for matrix in run)
    weights = torch.empty(rows, run[0].shape[1], dtype=torch.int8)
    scales = torch.empty(rows, dtype=torch.bfloat16)
    start = 0
    for chunk in _dequantized_chunks(run):
        stop = start + len(chunk)
        scales[start:stop] = (chunk.abs().amax(dim=1) / 127).clamp(min=2**-100)  # the rounded scale quantizes
        weights[start:stop] = (chunk / scales[start:stop].float()[:, None]).round().clamp(-127, 127)
        start = stop
    return {"int8": weights, "scales": scales}


def _panel_bits(matrix: GGUFMatrix) -> int:
    """The bits of a matrix's codes in the integer kernels' panels."""
    if _representation(matrix) is WeightForm.INT4:
        return 4
    return 6 if matrix.tensor_type == Q.Q6_K else 8


def _pack_panels(run: list[GGUFMatrix]) -> dict[str, torch.Tensor]:
    """The panels of native_kernels: 4-bit codes from the Q4 types as stored (w = s q + z, z = zero - 8 s of
    _int4_planes); 6-bit codes from Q6_K as stored (w = s (q - 32), s = d sc per 16 weights); 8-bit codes q + 128
    from Q8_0 as stored (s = d, z = -128 d); the other types dequantized and requantized to symmetric int8 per 32
    weights (s = max|w| / 127), far finer than their own codes."""
    bits, panels = _panel_bits(run[0]), []
    for matrix in run:
        if bits == 4:
            codes, scales, zeros = (plane[0] for plane in _int4_planes(matrix))
            panels.append(_panel_bytes(codes, scales, zeros - 8 * scales, 4))
        elif bits == 6:
            panels.append(_panel_bytes(*_q6_k_codes(matrix), None, 6))
        elif matrix.tensor_type == Q.Q8_0:
            blocks = _raw_rows(matrix).reshape(matrix.out_features, -1, 34)
            d = _float16(blocks[..., 0:2])
            codes = (blocks[..., 2:].view(np.int8).astype(np.int16) + 128).astype(np.uint8)
            panels.append(_panel_bytes(codes.reshape(matrix.out_features, -1), d, -128 * d, 8))
        else:
            for chunk in _dequantized_chunks([matrix]):
                groups = chunk.numpy().reshape(len(chunk), -1, GROUP)
                scales = (np.abs(groups).max(axis=-1) / 127).astype(np.float16).astype(np.float32)
                codes = np.rint(groups / np.where(scales > 0, scales, 1)[..., None]).clip(-127, 127) + 128
                panels.append(_panel_bytes(codes.astype(np.uint8).reshape(len(chunk), -1), scales, -128 * scales, 8))
    return {"panels": torch.from_numpy(np.concatenate(panels)), "bits": torch.tensor(bits)}


def _q6_k_codes(matrix: GGUFMatrix) -> tuple[np.ndarray, np.ndarray]:
    """Q6_K's codes q uint8 [rows, cols] in 0..63 and scales d sc float32 [rows, cols / 16]: w = d sc (q - 32).
    A 256-weight block is 128 bytes of low nibbles (weights 0-63 and 128-191 in the low nibbles of bytes 0-63 and
    64-127, the next 64 of each half in their high nibbles), 64 bytes of top two bits (byte j of each 32-byte half:
    bits 2k..2k+1 for weight 32k + j of that half), 16 int8 scales and a float16 d."""
    raw = _raw_rows(matrix)
    rows = raw.shape[0]
    blocks = raw.reshape(rows, -1, 210)
    low = blocks[..., :128].reshape(rows, -1, 2, 1, 64) >> np.array([0, 4], dtype=np.uint8)[:, None]
    high = blocks[..., 128:192].reshape(rows, -1, 2, 1, 32) >> np.array([0, 2, 4, 6], dtype=np.uint8)[:, None]
    codes = (low & 15).reshape(rows, -1, 2, 4, 32) | (high & 3) << 4  # [rows, blocks, half, 4, 32]
    scales = _float16(blocks[..., 208:210])[..., None] * blocks[..., 192:208].view(np.int8).astype(np.float32)
    return codes.reshape(rows, -1), scales.reshape(rows, -1)


def _panel_bytes(codes: np.ndarray, scales: np.ndarray, zeros: np.ndarray | None, bits: int) -> np.ndarray:
    """uint8 [rows / 16, cols / 32, group bytes] from codes [rows, cols] and scales and zeros [rows, cols / 32]
    (for 6 bits: scales [rows, cols / 16], no zeros; native/int8_matmul.c describes the layout)."""
    rows, cols = codes.shape
    panels, groups = rows // native_kernels.PANEL, cols // GROUP
    by_panel = codes.reshape(panels, native_kernels.PANEL, groups, GROUP)
    if bits in (4, 6):  # chunk c of 64 bytes: lane n holds features 8c..8c+3 (low nibbles) and 8c+4..8c+7 (high)
        lanes = (by_panel & 15).reshape(panels, native_kernels.PANEL, groups, 4, 2, 4).transpose(0, 2, 3, 1, 4, 5)
        code_bytes = (lanes[..., 0, :] | lanes[..., 1, :] << 4).reshape(panels, groups, -1)
        if bits == 6:  # 64 bytes h: byte 4n + f holds, at bits 2k, the top bits of lane n's feature 16h + 4k + f
            top = (by_panel >> 4).reshape(panels, native_kernels.PANEL, groups, 2, 4, 4).transpose(0, 2, 3, 1, 4, 5)
            top = top[..., 0, :] | top[..., 1, :] << 2 | top[..., 2, :] << 4 | top[..., 3, :] << 6
            code_bytes = np.concatenate([code_bytes, top.reshape(panels, groups, -1)], axis=-1)
    else:  # 64 bytes i: lane n holds features 4i..4i+3
        code_bytes = by_panel.reshape(panels, native_kernels.PANEL, groups, 8, 4).transpose(0, 2, 3, 1, 4)
        code_bytes = code_bytes.reshape(panels, groups, -1)
    if bits == 6:  # the 16 scales of each half
        halves = [np.ascontiguousarray(scales.astype(np.float16).reshape(panels, native_kernels.PANEL, groups, 2)
                                       .transpose(0, 2, 3, 1)).view(np.uint8).reshape(panels, groups, -1)]
    else:
        halves = [np.ascontiguousarray(values.astype(np.float16).reshape(panels, native_kernels.PANEL, groups)
                                       .transpose(0, 2, 1)).view(np.uint8) for values in (scales, zeros)]
    return np.concatenate([code_bytes.astype(np.uint8), *halves], axis=-1)


def _pack_bf16(run: list[GGUFMatrix]) -> dict[str, torch.Tensor]:
    return {"weight": torch.cat([chunk.bfloat16() for chunk in _dequantized_chunks(run)])}


def _dequantized_chunks(run: list[GGUFMatrix]):
    """float32 rows of each matrix, CHUNK_ROWS at a time, so that no whole float32 copy of a matrix is made."""
    for matrix in run:
        raw = _raw_rows(matrix)
        for start in range(0, raw.shape[0], CHUNK_ROWS):
            yield torch.from_numpy(np.array(gguf.quants.dequantize(raw[start:start + CHUNK_ROWS], matrix.tensor_type),
                                            dtype=np.float32))


_PACKERS = {WeightForm.INT4: _pack_int4, WeightForm.INT4_X2: _pack_int4, WeightForm.INT8: _pack_int8,
            WeightForm.BF16: _pack_bf16}
