"""The native integer matmul (engine/worker/native/int8_matmul.c) per packed type and shape, against the machine.

    python benchmarks/native_kernels.py [--isa avx2] [--repeats 5] [--threads 2] [--clock wall|cpu] [--name NAME]

For each GGUF type the loader packs into the kernels' panels (4-bit: Q4_0, Q4_1, Q4_K; 6-bit: Q6_K; 8-bit: Q8_0 as
stored, Q5_0, Q5_1, Q5_K requantized), at Llama 3.2 1B's shapes (q/o 2048x2048, k/v 512x2048, gate/up 8192x2048,
down 2048x8192) and SmolLM2-135M's (576x576, 192x576, 1536x576, 576x1536), [out_features x in_features] (the K
types only where in_features is a multiple of their 256-weight blocks):

- **M = 1** (a decode row): GB/s of the panels' bytes (codes and scales as held) per call, against the machine's
  read bandwidth measured in the same run (a 512 MB float32 tensor summed by torch on the same threads). Each call
  takes the next of enough copies of the weights to fill four times the last-level cache, so every call reads its
  weights from memory, as a model's decode step does.
- **M = 64, 256, 512** (prompt rows): TOP/s (2 M N K multiply-adds a second), against fbgemm's int8 dynamic linear
  (`torch.ops.quantized.linear_dynamic`, engine "x86": int8 weights per row, activations quantized per call) and
  float32 `F.linear` (TFLOP/s) on the same shape in the same run.

The kernel is timed as a step calls it: `Kernels.matmul` on activations quantized once (a step quantizes a layer's
input once for all the matrices that read it); `quantize M=1 us` is that quantization's own time. Each figure is the
minimum over the repeats; `noise` is the worst median/minimum ratio of a row. Writes results/<name>.json.

On a machine shared with other work, two threads wait for each other whenever one loses its core, and wall-clock
figures scatter by 10x; `--threads 1 --clock cpu` times the calling thread's CPU time instead (every call here runs
on it: the kernels, fbgemm and F.linear on one thread), which leaves out the time other processes held the core.
"""

import argparse
import os
import statistics
import time
from functools import partial
from pathlib import Path

import gguf
import numpy as np
import torch
from packed_kernels import gguf_data
from torch.nn.functional import linear

from common import cpu_description, report

Q = gguf.GGMLQuantizationType
TYPES = (Q.Q4_0, Q.Q4_1, Q.Q4_K, Q.Q6_K, Q.Q8_0, Q.Q5_0, Q.Q5_1, Q.Q5_K)
SHAPES = {"1B": ((2048, 2048), (512, 2048), (8192, 2048), (2048, 8192)),
          "135M": ((576, 576), (192, 576), (1536, 576), (576, 1536))}
PROMPT_ROWS = (64, 256, 512)
COLUMNS = ("model", "type", "bits", "shape", "MB", "M=1 us", "M=1 GB/s", "of read bw", "quantize M=1 us",
           *(f"M={m} TOP/s" for m in PROMPT_ROWS), "noise")
BANDWIDTH_BYTES = 512 * 2**20


CLOCKS = {"wall": time.perf_counter, "cpu": time.thread_time}
clock = CLOCKS["wall"]


def timed(fn, repeats: int) -> tuple[float, float]:
    """(minimum seconds, median/minimum) over `repeats` calls after a warm-up."""
    fn()
    times = []
    for _ in range(repeats):
        start = clock()
        fn()
        times.append(clock() - start)
    return min(times), statistics.median(times) / min(times)


def read_bandwidth(repeats: int) -> float:
    """GB/s of a 512 MB float32 tensor summed by torch."""
    x = torch.ones(BANDWIDTH_BYTES // 4)
    seconds, _ = timed(x.sum, repeats)
    return BANDWIDTH_BYTES / seconds / 1e9


def last_level_cache_bytes() -> int:
    sizes = []
    for index in Path("/sys/devices/system/cpu/cpu0/cache").glob("index*"):
        text = (index / "size").read_text().strip()
        sizes.append(int(text[:-1]) * {"K": 2**10, "M": 2**20}[text[-1]] if text[-1] in "KM" else int(text))
    return max(sizes, default=32 * 2**20)


def panels_of(qtype: Q, weight: np.ndarray, rng: np.random.Generator):
    from localchat.engine.worker.packed_linear import GGUFMatrix, PackedLinear, pack

    (part,) = PackedLinear(pack([GGUFMatrix(gguf_data(qtype, weight, rng), qtype, weight.shape)])).parts
    return part.panels, part.code_bits


def decode_seconds(kernels, panels: torch.Tensor, bits: int, out_features: int, cache: int,
                   repeats: int) -> tuple[float, float]:
    """(seconds a call, noise) of one decode row over copies of `panels` that fill 4x the last-level cache."""
    copies = [panels] + [panels.clone() for _ in range(max(1, 4 * cache // panels.nbytes))]
    one = kernels.quantize(torch.randn(1, panels.shape[1] * 32))

    def each_copy() -> None:
        for weights in copies:
            kernels.matmul(one, weights, bits, out_features)

    seconds, noise = timed(each_copy, repeats)
    return seconds / len(copies), noise


def kernel_row(kernels, qtype: Q, weight: np.ndarray, rng, repeats: int, bandwidth: float, cache: int) -> dict:
    out_features, in_features = weight.shape
    panels, bits = panels_of(qtype, weight, rng)
    per_call, noise = decode_seconds(kernels, panels, bits, out_features, cache, repeats)
    row = {"type": qtype.name, "bits": bits, "shape": f"{out_features}x{in_features}", "MB": panels.nbytes / 1e6,
           "M=1 us": per_call * 1e6, "M=1 GB/s": panels.nbytes / per_call / 1e9,
           "of read bw": f"{panels.nbytes / per_call / 1e9 / bandwidth:.0%}"}
    row["quantize M=1 us"] = timed(partial(kernels.quantize, torch.randn(1, in_features)), repeats)[0] * 1e6
    for m in PROMPT_ROWS:
        quantized = kernels.quantize(torch.randn(m, in_features))
        seconds, spread = timed(partial(kernels.matmul, quantized, panels, bits, out_features), repeats)
        row[f"M={m} TOP/s"] = 2 * m * out_features * in_features / seconds / 1e12
        noise = max(noise, spread)
    row["noise"] = round(noise, 2)
    return row


def peer_rows(weight: np.ndarray, repeats: int) -> list[dict]:
    """fbgemm's int8 dynamic linear and float32 F.linear on the same shape (prompt rows only)."""
    out_features, in_features = weight.shape
    dense = torch.from_numpy(weight)
    torch.backends.quantized.engine = "x86"
    scales = dense.abs().amax(dim=1) / 127
    int8 = torch.quantize_per_channel(dense, scales.double(), torch.zeros(out_features, dtype=torch.long), 0,
                                      torch.qint8)
    prepacked = torch.ops.quantized.linear_prepack(int8, None)
    peers = {"fbgemm int8 dynamic": partial(torch.ops.quantized.linear_dynamic, W_prepack=prepacked),
             "f32 F.linear": partial(linear, weight=dense)}
    rows = []
    for name, fn in peers.items():
        row, noise = {"type": name, "shape": f"{out_features}x{in_features}"}, 1.0
        for m in PROMPT_ROWS:
            x = torch.randn(m, in_features)
            seconds, spread = timed(partial(fn, x), repeats)
            row[f"M={m} TOP/s"] = 2 * m * out_features * in_features / seconds / 1e12
            noise = max(noise, spread)
        row["noise"] = round(noise, 2)
        rows.append(row)
    return rows


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("--isa", choices=("avx512", "avx2"), help="build for this instruction set (default: the "
                        "best the CPU has)")
    parser.add_argument("--repeats", type=int, default=5)
    parser.add_argument("--threads", type=int, default=2)
    parser.add_argument("--clock", choices=tuple(CLOCKS), default="wall", help="cpu: this thread's CPU time "
                        "(with --threads 1)")
    parser.add_argument("--types", default=",".join(t.name for t in TYPES))
    parser.add_argument("--models", default="1B,135M")
    parser.add_argument("--name", default="native_kernels")
    args = parser.parse_args()
    if args.isa:
        os.environ["LOCALCHAT_NATIVE_ISA"] = args.isa
    from localchat.engine.worker import native_kernels

    if args.clock == "cpu" and args.threads != 1:
        raise SystemExit("--clock cpu times the calling thread alone: use it with --threads 1")
    global clock
    clock = CLOCKS[args.clock]
    torch.set_num_threads(args.threads)
    kernels = native_kernels.load()
    if kernels is None:
        raise SystemExit("the native kernels cannot run here (the log says why)")
    rng = np.random.default_rng(0)
    cache = last_level_cache_bytes()
    bandwidth = read_bandwidth(args.repeats)
    rows = []
    with torch.inference_mode():
        for model in args.models.split(","):
            for shape in SHAPES[model]:
                weight = (rng.standard_normal(shape) * 0.02).astype(np.float32)
                measured = [{"model": model, **row} for row in peer_rows(weight, args.repeats)]
                for name in args.types.split(","):
                    if shape[1] % gguf.GGML_QUANT_SIZES[Q[name]][0]:
                        continue  # a K type's 256-weight blocks do not tile 576 features (SmolLM2 holds no K types)
                    measured.append({"model": model, **kernel_row(kernels, Q[name], weight, rng, args.repeats,
                                                                  bandwidth, cache)})
                    print(measured[-1], flush=True)
                rows += [{column: row.get(column) for column in COLUMNS} for row in measured]
    summary = {"cpu": cpu_description(), "isa": kernels.isa, "threads": torch.get_num_threads(), "clock": args.clock,
               "repeats": args.repeats, "read bandwidth GB/s (start)": bandwidth,
               "read bandwidth GB/s (end)": read_bandwidth(args.repeats), "last-level cache MB": cache / 2**20,
               "load average at the end": os.getloadavg()[0]}
    report(args.name, rows, summary)


if __name__ == "__main__":
    main()
