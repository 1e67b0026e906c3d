"""The engine's one native component, CPU kernels in C: integer matmuls for GGUF weights (native/int8_matmul.c),
paged attention (native/paged_attention.c) and RMS norm (native/rms_norm.c), compiled on first use by the machine's
C compiler into the user's cache folder and loaded with ctypes.

They are built for one of two instruction sets, the best the CPU has (its flags in /proc/cpuinfo): AVX-512 with VNNI
(Intel Xeons since Cascade Lake, AMD since Zen 4) or AVX2 with FMA and F16C (every x86 CPU since about 2013: AMD before
Zen 4, Intel's desktops and laptops). `LOCALCHAT_NATIVE_ISA=avx2` picks AVX2 on a CPU that has both (so that one
machine tests both builds). Both read one layout of packed weights (`VERSION`), and paged attention and the RMS norm
give the same bits under both (native/simd16.h); so do the 4- and 6-bit matmuls, while 8-bit codes differ in the
last bits (int8_matmul.c's header says why). `Kernels.isa` and the log say which runs.

`load()` gives the kernels, or None where they cannot run: not Linux on x86 with one of those instruction sets, no C
compiler, a failed build, or LOCALCHAT_NATIVE=0. The engine then runs torch's weight-only kernels and its PyTorch
attention, and says why once in the log. A build takes a few seconds and is kept, keyed by the sources, the flags
and the compiler."""

import ctypes
import functools
import hashlib
import logging
import os
import platform
import shutil
import subprocess
import tempfile
from dataclasses import dataclass
from pathlib import Path

import torch

from localchat.engine.loading.dirs import user_dir

log = logging.getLogger(__name__)

NATIVE = Path(__file__).parent / "native"
SOURCES = [NATIVE / name for name in ("int8_matmul.c", "paged_attention.c", "rms_norm.c", "decoder_layers.c",
                                      "dequantize.c")]
HEADERS = [NATIVE / "simd16.h"]
FLAGS = ["-O3", "-fopenmp", "-ffp-contract=off", "-shared", "-fPIC"]


@dataclass(frozen=True)
class Isa:
    """An instruction set the kernels are built for: the CPU flags it needs (as /proc/cpuinfo names them) and the
    compiler's."""

    name: str
    cpu_flags: frozenset[str]
    compiler_flags: tuple[str, ...]


ISAS = {isa.name: isa for isa in (  # the best first
    Isa("avx512", frozenset({"avx512f", "avx512bw", "avx512vl", "avx512_vnni", "f16c", "fma"}),
        ("-mavx512f", "-mavx512bw", "-mavx512vl", "-mavx512vnni", "-mf16c", "-mfma")),
    Isa("avx2", frozenset({"avx2", "fma", "f16c"}), ("-mavx2", "-mfma", "-mf16c")),
)}
GROUP, PANEL = 32, 16  # the kernels' block of input features and of output rows
# bytes of codes in one panel-group; 32 float16 follow: 16 scales and 16 zeros, or (6 bits) 16 scales of each half
CODE_BYTES = {4: 256, 6: 384, 8: 512}
VERSION = "int8-vnni-2"  # names the weight layout (both instruction sets'): part of the packed file's key


class Kernels:
    """quantize(x, passes) -> int8 codes with their per-32 scales and sums; matmul(quantized, weights, bits, N,
    passes) -> float32 y; attend(...): paged attention; rms_norm(x, weight, eps); silu_mul(gate_up);
    dequantize(panels, ...) -> a dense bfloat16 matrix (kernel_choice.py); and a decoder's layers in one call
    (`library.decoder_layers`, through fused_decoder.py). `isa`: the instruction set they were built for ("avx512"
    or "avx2")."""

    def __init__(self, library: ctypes.CDLL, isa: str):
        self.library, self.isa = library, isa
        p, i64, i32 = ctypes.c_void_p, ctypes.c_int64, ctypes.c_int
        library.quantize_rows.argtypes = [p, i64, i64, p, p, p, p, i32, i32]
        library.matmul.argtypes = [p, p, p, p, i64, i64, p, i32, i64, p, i32, i32]
        library.paged_attention.argtypes = [p, i64, i64, i64, i64, p, p, i32, i64, p, i64, p, p, i64, ctypes.c_float,
                                            p, i32]
        library.rms_norm.argtypes = [p, i64, i64, p, ctypes.c_float, p, i32]
        library.silu_mul.argtypes = [p, i64, i64, p, i32]
        library.decoder_layers.argtypes = [p, p, i64, p, p]  # fused_decoder.py's structs
        library.dequantize_panels.argtypes = [p, i32, i64, i64, p, i32]
        for function in (library.quantize_rows, library.matmul, library.paged_attention, library.rms_norm,
                         library.silu_mul, library.decoder_layers, library.dequantize_panels):
            function.restype = None

    def quantize(self, x: torch.Tensor, passes: int = 1) -> tuple[torch.Tensor, torch.Tensor]:
        """float32 [M, K] (K a multiple of 32) -> (codes int8 [M passes, K], float32 [4, M passes, K/32]: the
        scales t, t * the codes' sums, then t * the sums of each group's halves, [M passes, K/32, 2]); with
        passes=2 each row is followed by the codes of its rounding's remainder."""
        if x.dtype != torch.float32 or not x.is_contiguous():
            x = x.float().contiguous()
        rows, features = x.shape
        codes = torch.empty(rows * passes, features, dtype=torch.int8)
        scales = torch.empty(4, rows * passes, features // GROUP)
        self.library.quantize_rows(x.data_ptr(), rows, features, codes.data_ptr(), *_planes(scales), passes,
                                   torch.get_num_threads())
        return codes, scales

    def matmul(self, quantized: tuple[torch.Tensor, torch.Tensor], weights: torch.Tensor, bits: int,
               out_features: int, passes: int = 1) -> torch.Tensor:
        """y float32 [M, out_features] from quantize(x, passes); the two passes' products are summed."""
        codes, scales = quantized
        rows, features = codes.shape
        y = torch.empty(rows // passes, out_features)
        self.library.matmul(codes.data_ptr(), *_planes(scales), rows, features, weights.data_ptr(), bits,
                            out_features, y.data_ptr(), passes, torch.get_num_threads())
        return y

    def rms_norm(self, x: torch.Tensor, weight: torch.Tensor, eps: float) -> torch.Tensor:
        """x / sqrt(mean(x^2, -1) + eps) * weight for float32 x [..., size] (contiguous) and weight [size]."""
        y = torch.empty_like(x)
        self.library.rms_norm(x.data_ptr(), x.numel() // x.shape[-1], x.shape[-1], weight.data_ptr(), eps,
                              y.data_ptr(), torch.get_num_threads())
        return y

    def dequantize(self, weights: torch.Tensor, bits: int, out_features: int, in_features: int,
                   out: torch.Tensor) -> torch.Tensor:
        """The panels' weights as a dense bfloat16 matrix [out_features, in_features], written into `out`."""
        self.library.dequantize_panels(weights.data_ptr(), bits, out_features, in_features, out.data_ptr(),
                                       torch.get_num_threads())
        return out

    def silu_mul(self, gate_up: torch.Tensor) -> torch.Tensor:
        """silu(gate) * up for float32 rows [gate | up] (contiguous, [..., 2 n]): [..., n]."""
        n = gate_up.shape[-1] // 2
        y = torch.empty(*gate_up.shape[:-1], n)
        self.library.silu_mul(gate_up.data_ptr(), gate_up.numel() // gate_up.shape[-1], n, y.data_ptr(),
                              torch.get_num_threads())
        return y

    def attend(self, query: torch.Tensor, k_cache: torch.Tensor, v_cache: torch.Tensor, block_tables: torch.Tensor,
               token_seqs: torch.Tensor, positions: torch.Tensor, window: int | None, scale: float) -> torch.Tensor:
        """query float32 [tokens, heads, dim] over caches [num_blocks, block_size, kv_heads, dim] (float32 or
        bfloat16, contiguous; dim a multiple of 16 up to 256); block_tables int64 [seqs, width]; token_seqs and
        positions int64 [tokens]: each token's sequence and position. Returns [tokens, heads, dim]."""
        query = query.contiguous()
        tokens, heads, dim = query.shape
        _, block_size, kv_heads, _ = k_cache.shape
        out = torch.empty_like(query)
        self.library.paged_attention(query.data_ptr(), tokens, heads, kv_heads, dim, k_cache.data_ptr(),
                                     v_cache.data_ptr(), int(k_cache.dtype == torch.bfloat16), block_size,
                                     block_tables.data_ptr(), block_tables.shape[1], token_seqs.data_ptr(),
                                     positions.data_ptr(), window or 0, scale, out.data_ptr(),
                                     torch.get_num_threads())
        return out


def _planes(scales: torch.Tensor) -> tuple[int, int, int]:
    """The addresses of quantize's scales, sums and halves' sums."""
    at, step = scales.data_ptr(), scales.stride(0) * scales.element_size()
    return at, at + step, at + 2 * step


def attends(query_dtype: torch.dtype, cache_dtype: torch.dtype, head_dim: int) -> bool:
    """Whether Kernels.attend takes these: float32 queries, a float32 or bfloat16 cache, a head of 16k <= 256."""
    return (query_dtype == torch.float32 and cache_dtype in (torch.float32, torch.bfloat16)
            and head_dim % 16 == 0 and head_dim <= 256)


@functools.cache
def load() -> Kernels | None:
    """The kernels, built if need be; None (said once in the log) where they cannot run here."""
    isa, reason = _choice()
    if isa is not None:
        try:
            kernels = Kernels(ctypes.CDLL(str(_built(ISAS[isa]))), isa)
            log.info("native kernels built for %s", isa)
            return kernels
        except subprocess.CalledProcessError as error:
            reason = f"the build failed: {(error.stderr or str(error)).strip()[:400]}"
        except (OSError, subprocess.SubprocessError) as error:
            reason = f"the build failed: {error}"
    log.warning("integer matmul kernels off (%s): quantized weights run torch's weight-only kernels", reason)
    return None


def layout() -> str:
    """What packed weights are laid out for: these kernels', or torch's on this CPU."""
    return VERSION if load() is not None else f"torch-{torch.__version__}-{torch.backends.cpu.get_cpu_capability()}"


def runnable_isas() -> list[str]:
    """The instruction sets this CPU runs the kernels in, the best first (none where it is not an x86 Linux)."""
    flags = _cpu_flags()
    return [] if flags is None else [isa.name for isa in ISAS.values() if isa.cpu_flags <= flags]


def _cpu_flags() -> set[str] | None:
    if platform.system() != "Linux" or platform.machine() not in ("x86_64", "AMD64"):
        return None
    try:
        line = next(line for line in Path("/proc/cpuinfo").read_text().splitlines() if line.startswith("flags"))
    except (OSError, StopIteration):
        return None
    return set(line.split(":", 1)[1].split())


def _choice() -> tuple[str | None, str | None]:
    """(the instruction set to build for, None), or (None, why the kernels cannot run here)."""
    if os.environ.get("LOCALCHAT_NATIVE", "1") == "0":
        return None, "LOCALCHAT_NATIVE=0"
    flags = _cpu_flags()
    if flags is None:
        return None, f"{platform.system()} on {platform.machine()}, or no CPU flags in /proc/cpuinfo"
    wanted = os.environ.get("LOCALCHAT_NATIVE_ISA")
    if wanted is not None and wanted not in ISAS:
        return None, f"LOCALCHAT_NATIVE_ISA={wanted} is none of {', '.join(ISAS)}"
    candidates = [ISAS[wanted]] if wanted else list(ISAS.values())
    isa = next((isa for isa in candidates if isa.cpu_flags <= flags), None)
    if isa is None:
        missing = candidates[-1].cpu_flags - flags
        return None, f"the CPU lacks {', '.join(sorted(missing))}"
    if _compiler() is None:
        return None, "no C compiler (cc, gcc or clang)"
    return isa.name, None


def _compiler() -> str | None:
    names = (os.environ.get("CC"), "cc", "gcc", "clang")
    return next((path for name in names if name and (path := shutil.which(name))), None)


def _built(isa: Isa) -> Path:
    compiler = _compiler()
    version = subprocess.run([compiler, "--version"], capture_output=True, text=True, check=True).stdout
    texts = [path.read_text() for path in SOURCES + HEADERS]
    flags = [*FLAGS, *isa.compiler_flags]
    key = hashlib.sha256("\0".join([*texts, *flags, version]).encode()).hexdigest()[:16]
    library = user_dir("cache") / "native" / f"kernels-{isa.name}-{key}.so"
    if library.exists():
        return library
    library.parent.mkdir(mode=0o700, exist_ok=True)
    with tempfile.TemporaryDirectory(dir=library.parent) as scratch:
        built = Path(scratch) / library.name
        subprocess.run([compiler, *flags, "-o", str(built), *map(str, SOURCES)], capture_output=True, text=True,
                       check=True, timeout=120)
        built.chmod(0o600)  # private like every file the engine writes; loading it needs read access, not exec
        built.replace(library)  # atomic: a concurrent build or a reader never sees half a file
    return library
