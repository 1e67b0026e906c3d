"""The GGUF file's own 4-bit weights on CPU: Q4_1 blocks run through torch's int4 weight-only kernel.

A Q4_1 block holds 32 weights as 4-bit values q with a float16 scale d and minimum m: w = d * q + m.
torch's kernel computes w = (q - 8) * scale + zero per group of 32, so scale = d and zero = m + 8 * d
represent the same weights; only the scale and zero are rounded to bfloat16.

Decoding one or a few sequences reads every weight once per token, so 4-bit weights (an eighth of float32's
bytes) make it memory-light; a step of many rows (a prefill, a large batch) is compute-bound and runs faster
on a dense copy of the same weights in the model's dtype, so the layer keeps both and picks by row count.
The int4 kernel takes bfloat16 activations: its results are close to the dense path's, not equal.

The logits head (a GGUF keeps the token embedding in Q8_0) is the largest single matrix of a small model:
for few rows it runs on per-row int8 weights through torch's int8 weight-only kernel."""

import numpy as np
import torch
from torch import nn

GROUP = 32
Q4_1_BLOCK_BYTES = 20  # float16 d, float16 m, 16 bytes of nibbles


def unpack_q4_1(raw: np.ndarray) -> tuple[np.ndarray, np.ndarray, np.ndarray]:
    """GGUF Q4_1 data [rows, blocks * 20] -> q uint8 [rows, cols], d and m float16 [rows, cols // 32]."""
    blocks = raw.reshape(raw.shape[0], -1, Q4_1_BLOCK_BYTES)
    d = np.ascontiguousarray(blocks[..., 0:2]).view(np.float16)[..., 0]
    m = np.ascontiguousarray(blocks[..., 2:4]).view(np.float16)[..., 0]
    nibbles = blocks[..., 4:]
    q = np.concatenate([nibbles & 0x0F, nibbles >> 4], axis=-1)  # the low nibbles hold the first 16 weights
    return q.reshape(raw.shape[0], -1), d, m


class Int4Linear(nn.Module):
    """A linear layer (no bias) over Q4_1 weights: int4 kernel for few rows, dense for many."""

    def __init__(self, q: torch.Tensor, d: torch.Tensor, m: torch.Tensor, max_int4_rows: int, dtype: torch.dtype):
        super().__init__()
        rows, cols = q.shape
        self.max_int4_rows = max_int4_rows
        self.packed = torch.ops.aten._convert_weight_to_int4pack_for_cpu(q.to(torch.int32), 1)
        d32, m32 = d.float(), m.float()
        self.scales_and_zeros = torch.stack([d32, m32 + 8 * d32], dim=-1).transpose(0, 1).contiguous().bfloat16()
        dense = q.float().view(rows, cols // GROUP, GROUP) * d32[..., None] + m32[..., None]
        self.dense = dense.view(rows, cols).to(dtype)

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        if x.shape[0] <= self.max_int4_rows:
            y = torch.ops.aten._weight_int4pack_mm_for_cpu(x.bfloat16(), self.packed, GROUP, self.scales_and_zeros)
            return y.to(x.dtype)
        return nn.functional.linear(x, self.dense)


class Int8Head(nn.Module):
    """The logits head: per-row symmetric int8 weights for few rows, the dense weight for many."""

    def __init__(self, weight: torch.Tensor, max_int8_rows: int):
        super().__init__()
        self.max_int8_rows = max_int8_rows
        self.weight = weight
        scales = weight.float().abs().amax(dim=1).clamp(min=1e-12) / 127
        self.int8 = (weight.float() / scales[:, None]).round().clamp(-127, 127).to(torch.int8)
        self.scales = scales.bfloat16()

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        """float32 logits."""
        if x.shape[0] <= self.max_int8_rows:
            return torch.ops.aten._weight_int8pack_mm(x.bfloat16(), self.int8, self.scales).float()
        return nn.functional.linear(x, self.weight).float()
