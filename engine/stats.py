"""What a backend reports of its engine (the server's /metrics): requests and tokens, and for the embedded engine its
KV cache, drafts, CPU threads and disk tier. A remote server's backend knows only its requests and tokens: what it
does not know is None (and left out of /metrics)."""

from dataclasses import dataclass


@dataclass
class KVCacheUsage:
    """The pool's blocks, counted."""

    total: int
    used: int  # held by sequences
    cached: int  # free, still holding a reusable prefix
    free: int  # not held (cached ones included)
    block_size: int


@dataclass(frozen=True)
class PinUsage:
    """What pinned chats keep of the KV cache, and the most they may (the pin budget), in blocks."""

    blocks: int
    limit_blocks: int
    block_size: int
    block_bytes: int  # the memory of one block

    @property
    def tokens(self) -> int:
        return self.blocks * self.block_size

    @property
    def limit_tokens(self) -> int:
        return self.limit_blocks * self.block_size

    @property
    def bytes(self) -> int:
        return self.blocks * self.block_bytes

    @property
    def limit_bytes(self) -> int:
        return self.limit_blocks * self.block_bytes


@dataclass(frozen=True)
class Warmth:
    """Where a chat's history is (LLMEngine.warmth): how many of its tokens the next request that continues it finds
    in memory, then reads from the disk tier; the rest it computes. `state` says which costs most: "resident" (at most
    a block's worth of tokens to compute, nothing to read), "on_disk" (blocks to read, at most a block to compute) or
    "cold" (more to compute, or none of it held); predicted_s is what the history adds to the next first token's wait,
    from the engine's measured prefill time per token and disk read time per block (None: not measured yet)."""

    tokens: int
    resident: int
    on_disk: int
    state: str
    predicted_s: float | None
    pinned: bool = False

    @property
    def cold(self) -> int:
        return self.tokens - self.resident - self.on_disk


@dataclass
class DiskTierStats:
    enabled: int = 1  # 0 once the folder could not be used (a read-only or full disk): the engine goes on without
    bytes: int = 0  # on disk, every model's blocks
    files: int = 0  # the same, counted (filled in by KVDiskTier.stats)
    limit_bytes: int = 0
    lookups: int = 0  # blocks asked for on admission (after the in-memory cache)
    hits: int = 0  # blocks read back
    failed_checks: int = 0  # blocks whose file was damaged: deleted and computed
    written: int = 0
    evicted: int = 0  # files dropped by the limit


@dataclass
class SpeculationStats:
    drafted: int = 0  # draft tokens scored
    accepted: int = 0  # of them, kept


@dataclass(frozen=True)
class KernelStats:
    """What runs a step's matrix products, chosen by measuring the machine (worker/kernel_choice.py), and what its
    cores gave when measured."""

    decode: str  # the kernel of decode rows
    prompt: str  # of prompt rows: prefill chunks and large batches
    prompt_rows: int  # a step's rows from which its products run the prompt kernel
    peaks: dict[str, float]  # fp32/bf16 TFLOP/s, int8 and the native kernels' TOP/s, read GB/s


@dataclass(frozen=True)
class CPUThreadStats:
    threads: int  # the CPU kernels use now (cpu_threads.py)
    load_of_others: float  # cores' worth of CPU time that other processes took, last measured


@dataclass(frozen=True)
class EngineStats:
    prompt_tokens: int | None = None  # of every request's first admission
    cached_prompt_tokens: int | None = None  # of them, found in the prefix cache (memory or disk)
    generated_tokens: int | None = None
    num_running: int | None = None
    num_waiting: int | None = None
    num_preemptions: int | None = None
    kv: KVCacheUsage | None = None
    kv_cache_bytes: int | None = None  # the cache's memory, resident once each block has been used
    speculation: SpeculationStats | None = None
    cpu: CPUThreadStats | None = None  # on the CPU
    disk: DiskTierStats | None = None  # with a disk tier
    kernels: KernelStats | None = None  # on the CPU with the native kernels
    pins: PinUsage | None = None  # the embedded engine's pinned chats and their budget

    @property
    def prefix_hit_rate(self) -> float | None:
        """The share of prompt tokens found in the prefix cache."""
        if self.prompt_tokens is None or self.cached_prompt_tokens is None:
            return None
        return self.cached_prompt_tokens / self.prompt_tokens if self.prompt_tokens else 0.0

    @property
    def disk_hit_rate(self) -> float | None:
        """The share of the blocks looked up on disk that were read back."""
        if self.disk is None:
            return None
        return self.disk.hits / self.disk.lookups if self.disk.lookups else 0.0
