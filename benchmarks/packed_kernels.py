"""The packed GGUF kernels of engine/worker/packed_linear.py against dense float32 and bfloat16 `F.linear`.

    python benchmarks/packed_kernels.py [--repeats 5] [--threads 2]

Milliseconds per call for M rows of activations, on SmolLM2-135M's MLP shapes (576x1536, 1536x576) and a 1-3B
model's (2048x8192, 8192x2048), [out_features x in_features], on two threads by default. One column per
representation (the types that share one run at one speed): int4 (Q4_0, Q4_1, Q4_K), int4 x2 (Q8_0), int8 (Q5_0,
Q5_1, Q5_K, Q6_K); dense bfloat16 is also how F16, BF16 and F32 matrices run. Each time is the minimum over the
repeats; `noise` is the worst median/minimum ratio in its row. The summary gives, per type, its representation, the
bytes per weight held and in the file, and the product's relative error against float32 on the dequantized weights
(576x1536).
"""

import argparse
import statistics
import time
from functools import partial

import gguf
import numpy as np
import torch
from torch.nn.functional import linear

from common import report
from localchat.engine.worker.packed_linear import REPRESENTATIONS, GGUFMatrix, PackedLinear, pack

Q = gguf.GGMLQuantizationType
SHAPES = ((576, 1536), (1536, 576), (2048, 8192), (8192, 2048))
ROWS = (1, 8, 32, 256, 1024)
TIMED_TYPES = {"int4": Q.Q4_0, "int4 x2": Q.Q8_0, "int8": Q.Q5_0}  # one type per kernel; fits 576 in_features
SLOW_CALL_S = 0.2  # calls slower than this are repeated 3 times only
K_TYPES = (Q.Q4_K, Q.Q5_K, Q.Q6_K)  # gguf's Python package cannot quantize these: random valid blocks instead


def gguf_data(qtype: Q, weight: np.ndarray, rng: np.random.Generator) -> np.ndarray:
    """`weight` in `qtype` as GGUFReader gives it; for the K types random codes and scales of the same shape."""
    if qtype not in K_TYPES:
        return gguf.quants.quantize(weight, qtype)
    block_size, block_bytes = gguf.GGML_QUANT_SIZES[qtype]
    rows, blocks = weight.shape[0], weight.shape[1] // block_size
    data = rng.integers(0, 256, (rows, blocks, block_bytes), dtype=np.uint8)
    for start in (block_bytes - 2,) if qtype == Q.Q6_K else (0, 2):  # d (and dmin): small positive float16
        data[..., start:start + 2] = (rng.random((rows, blocks)) * 1e-3).astype(np.float16)[..., None].view(np.uint8)
    return data.reshape(rows, -1)


def timed(fn, repeats: int) -> tuple[float, float]:
    """(minimum ms, median/minimum) over `repeats` calls after a warm-up."""
    start = time.perf_counter()
    fn()
    if time.perf_counter() - start > SLOW_CALL_S:
        repeats = min(repeats, 3)
    times = []
    for _ in range(repeats):
        start = time.perf_counter()
        fn()
        times.append(time.perf_counter() - start)
    return min(times) * 1e3, statistics.median(times) / min(times)


def timing_rows(repeats: int, rng: np.random.Generator) -> list[dict]:
    rows = []
    for out_features, in_features in SHAPES:
        weight = (rng.standard_normal((out_features, in_features)) * 0.02).astype(np.float32)
        dense = torch.from_numpy(weight)
        layers = {"f32": partial(linear, weight=dense), "bf16": partial(linear, weight=dense.bfloat16())}
        for name, qtype in TIMED_TYPES.items():
            layers[name] = PackedLinear(pack([GGUFMatrix(gguf_data(qtype, weight, rng), qtype, weight.shape)]))
        for m in ROWS:
            x = torch.randn(m, in_features)
            row, noise = {"shape": f"{out_features}x{in_features}", "M": m}, 1.0
            for name, layer in layers.items():
                activations = x.bfloat16() if name == "bf16" else x
                row[f"{name} ms"], spread = timed(partial(layer, activations), repeats)
                noise = max(noise, spread)
            row["noise"] = round(noise, 2)
            rows.append(row)
    return rows


def type_summary(rng: np.random.Generator) -> dict[str, str]:
    weight = (rng.standard_normal((576, 1536)) * 0.02).astype(np.float32)
    x = torch.randn(16, 1536)
    summary = {}
    for qtype, representation in REPRESENTATIONS.items():
        data = gguf_data(qtype, weight, rng)
        tensors = pack([GGUFMatrix(data, qtype, weight.shape)])
        expected = x @ torch.from_numpy(np.array(gguf.quants.dequantize(data, qtype), dtype=np.float32)).T
        error = ((PackedLinear(tensors)(x) - expected).norm() / expected.norm()).item()
        held = sum(t.nbytes for t in tensors.values()) / weight.size
        in_file = np.asarray(data).nbytes / weight.size
        summary[qtype.name] = (f"{representation}: {held:.3f} bytes/weight ({in_file:.4f} in the file), "
                               f"error {error:.2%}")
    return summary


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("--repeats", type=int, default=5)
    parser.add_argument("--threads", type=int, default=2)
    args = parser.parse_args()
    torch.set_num_threads(args.threads)
    rng = np.random.default_rng(0)
    with torch.inference_mode():
        summary = {"threads": torch.get_num_threads(), "repeats": args.repeats, **type_summary(rng)}
        rows = timing_rows(args.repeats, rng)
    report("packed_kernels", rows, summary)


if __name__ == "__main__":
    main()
