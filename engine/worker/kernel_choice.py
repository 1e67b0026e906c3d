"""Which kernel runs each class of a step's rows, chosen by measuring this machine, and what its cores give.

- Decode rows (a step of fewer than PROMPT_ROWS rows): the native integer kernels over the file's packed codes
  (int8_matmul.c). A decode reads every weight once; these read the fewest bytes.
- Prompt rows (PROMPT_ROWS or more: prefill chunks, large batches): whichever is faster here on the model's own
  largest matrix at 256 rows, the native kernels or oneDNN's bfloat16 matmul (torch's F.linear) over the matrix's
  panels dequantized into a scratch matrix for the call (dequantize.c). oneDNN runs AMX tiles on the Intel CPUs that
  have them and AVX512-BF16 on AMD's Zen 4, and no bfloat16 instructions elsewhere: measured, never assumed. The
  scratch is one matrix at a time, so memory stays near the file's size (the largest matrix in bfloat16 more).

Where the dense path runs prompt rows, a token computed in a prompt chunk and the same token computed as a decode row
go through different arithmetic (both within bfloat16's error of the exact product), so a seeded reply can differ
cold and cached; where the native kernels run every row, as on CPUs without fast bfloat16, it cannot.

The choice and the peaks are measured once per machine and model shape (about a second) and kept in the cache
folder, keyed by the CPU, torch's version and the kernels' sources. `LOCALCHAT_PROMPT_KERNEL=native` or `dense`
overrides the choice."""

import hashlib
import json
import logging
import os
import time
import warnings
from dataclasses import asdict, dataclass

import torch

from localchat.engine.loading.dirs import private_folder, user_dir, write_atomically
from localchat.engine.worker import native_kernels

log = logging.getLogger(__name__)

PROMPT_ROWS = 64  # a step's rows from which its linear layers run the prompt kernel
MEASURED_ROWS = 256  # the rows the prompt kernels are timed at
DENSE_MARGIN = 0.8  # the dense path runs prompt rows where it takes at most this share of the native kernels' time
REPEATS = 3  # timings of each candidate: the fastest counts


@dataclass(frozen=True)
class MachinePeaks:
    """What this machine's cores give on the engine's threads: dense products through torch (oneDNN's fp32 and
    bfloat16, fbgemm's int8 with dynamically quantized activations), the native kernels at 256 rows, and a streaming
    read of memory."""

    fp32_tflops: float
    bf16_tflops: float
    int8_tops: float
    native_tops: float
    read_gbs: float


@dataclass(frozen=True)
class KernelChoice:
    decode: str  # what runs decode rows
    prompt: str  # what runs prompt rows (PROMPT_ROWS or more)
    prompt_rows: int
    dense_prompts: bool  # prompt rows run the dense path
    seconds: dict[str, float]  # each prompt candidate's time on the measured shape
    shape: tuple[int, int]  # the matrix measured (out, in features)
    peaks: MachinePeaks


def choose(linears: list, threads: int) -> KernelChoice | None:
    """The kernels for a model's decoder layers' packed linear layers (PackedLinear; the logits head sees only the
    sampled rows), measured on the largest or read from the cache; None where they are not all the native kernels'
    panels (torch's own kernels run every row then)."""
    kernels = native_kernels.load()
    if kernels is None or not linears or not all(linear.on_panels for linear in linears):
        return None
    part = max((part for linear in linears for part in linear.parts), key=lambda p: p.out_features * p.in_features)
    key = _key(kernels, part, threads)
    path = user_dir("cache") / "kernel-choice" / f"{key}.json"
    try:
        choice = _decoded(json.loads(path.read_text()))
    except (OSError, ValueError, TypeError, KeyError):
        choice = _measure(kernels, part, threads)
        private_folder(path.parent)
        text = json.dumps(asdict(choice))
        write_atomically(path, lambda tmp: tmp.write_text(text))
    forced = os.environ.get("LOCALCHAT_PROMPT_KERNEL")
    if forced in ("native", "dense"):
        choice = _with_prompt(choice, kernels, dense=forced == "dense")
    log.info("kernels: %s for decode rows, %s for prompt rows (from %d rows); measured %s", choice.decode,
             choice.prompt, choice.prompt_rows, ", ".join(f"{k} {v * 1e3:.1f} ms" for k, v in choice.seconds.items()))
    return choice


def _native_name(kernels: native_kernels.Kernels) -> str:
    return f"native int8 ({kernels.isa})"


DENSE_NAME = "oneDNN bfloat16 over dequantized panels"


def _with_prompt(choice: KernelChoice, kernels: native_kernels.Kernels, dense: bool) -> KernelChoice:
    return KernelChoice(choice.decode, DENSE_NAME if dense else _native_name(kernels), choice.prompt_rows, dense,
                        choice.seconds, choice.shape, choice.peaks)


def _key(kernels: native_kernels.Kernels, part, threads: int) -> str:
    cpu = _cpu_line()
    sources = "".join(path.read_text() for path in native_kernels.SOURCES + native_kernels.HEADERS)
    text = "\0".join([cpu, torch.__version__, kernels.isa, sources, str(threads), str(part.out_features),
                      str(part.in_features), str(part.code_bits)])
    return hashlib.sha256(text.encode()).hexdigest()[:16]


def _cpu_line() -> str:
    try:
        with open("/proc/cpuinfo") as cpuinfo:
            return "".join(line for line in cpuinfo if line.startswith(("model name", "flags")))[:4096]
    except OSError:
        return ""


def _fastest(call) -> float:
    call()
    best = float("inf")
    for _ in range(REPEATS):
        start = time.perf_counter()
        call()
        best = min(best, time.perf_counter() - start)
    return best


def _measure(kernels: native_kernels.Kernels, part, threads: int) -> KernelChoice:
    out_features, in_features = part.out_features, part.in_features
    x = torch.randn(MEASURED_ROWS, in_features)
    scratch = torch.empty(out_features, in_features, dtype=torch.bfloat16)

    def native() -> None:
        kernels.matmul(kernels.quantize(x, part.code_passes), part.panels, part.code_bits, out_features,
                       part.code_passes)

    def dense() -> None:
        kernels.dequantize(part.panels, part.code_bits, out_features, in_features, scratch)
        torch.nn.functional.linear(x.bfloat16(), scratch)

    seconds = {"native": _fastest(native), "dense": _fastest(dense)}
    flops = 2 * MEASURED_ROWS * out_features * in_features
    peaks = MachinePeaks(fp32_tflops=_gemm_tflops(torch.float32), bf16_tflops=_gemm_tflops(torch.bfloat16),
                         int8_tops=_int8_tops(), native_tops=round(flops / seconds["native"] / 1e12, 3),
                         read_gbs=_read_gbs())
    choice = KernelChoice(_native_name(kernels), _native_name(kernels), PROMPT_ROWS, False, seconds,
                          (out_features, in_features), peaks)
    return _with_prompt(choice, kernels, dense=seconds["dense"] <= DENSE_MARGIN * seconds["native"])


def _gemm_tflops(dtype: torch.dtype, n: int = 512) -> float:
    a, b = (torch.randn(n, n).to(dtype) for _ in range(2))
    return round(2 * n**3 / _fastest(lambda: a @ b) / 1e12, 3)


def _int8_tops(rows: int = 256, n: int = 1024) -> float:
    """fbgemm's (torch's "x86" quantized engine) int8 linear, activations quantized per call."""
    engine = torch.backends.quantized.engine
    try:
        torch.backends.quantized.engine = "x86" if "x86" in torch.backends.quantized.supported_engines else engine
        warnings.filterwarnings("ignore", message=".*quantiz", category=UserWarning)  # torch.ao's deprecation
        weight = torch.randn(n, n)
        quantized = torch.quantize_per_channel(weight, weight.abs().amax(1) / 127, torch.zeros(n, dtype=torch.long),
                                               0, torch.qint8)
        packed = torch.ops.quantized.linear_prepack(quantized, None)
        x = torch.randn(rows, n)
        return round(2 * rows * n * n / _fastest(lambda: torch.ops.quantized.linear_dynamic(x, packed, True)) / 1e12,
                     3)
    except (RuntimeError, AttributeError):
        return 0.0
    finally:
        torch.backends.quantized.engine = engine


def _read_gbs() -> float:
    x = torch.ones(32 * 2**20)  # 128 MB: past the last-level cache
    return round(x.numel() * 4 / _fastest(x.sum) / 1e9, 1)


def _decoded(fields: dict) -> KernelChoice:
    fields["peaks"] = MachinePeaks(**fields["peaks"])
    fields["shape"] = tuple(fields["shape"])
    return KernelChoice(**fields)
