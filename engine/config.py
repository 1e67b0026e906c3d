"""What an engine is asked to be: one object instead of a dozen arguments passed down by hand."""

from dataclasses import dataclass

import torch

QUANTIZATIONS = ("auto", "packed", "none")


@dataclass(frozen=True)
class EngineConfig:
    """`LLM(model, **fields)`, `AsyncLLM(model, **fields)` and `LLMEngine(EngineConfig(...))` take these."""

    model: str | None = None  # None: the embedded SmolLM2; else a GGUF file, a safetensors folder or a cached HF id
    dtype: str | torch.dtype | None = None  # None: bfloat16 on CUDA, float32 on CPU
    # what the KV cache holds: None is bfloat16 when the weights run packed (half the bytes a decoded token reads
    # and twice the tokens the cache holds of float32; read back as the model's dtype, exactly), else the model's
    # dtype (dense weights: the exact comparison with transformers)
    kv_cache_dtype: str | torch.dtype | None = None
    device: str | None = None  # None: CUDA when there is one
    block_size: int = 16  # tokens per KV block
    num_kv_blocks: int | None = None  # None: a share of the memory (see llm_engine.default_num_blocks)
    enable_prefix_caching: bool = True
    max_model_len: int | None = None  # prompt + reply; None: the model's own limit, within the KV cache
    max_num_seqs: int = 128  # sequences in one batch
    max_num_batched_tokens: int = 2048  # tokens in one step (prefill chunks included)
    # while replies are being written, a prompt's prefill goes in chunks cut to keep each step about this long, so
    # that their next tokens never wait much longer, the longer as more prompts wait for their first token (see
    # scheduler.StepPace); None: up to step_limit_s
    decode_step_target_s: float | None = 0.2
    # and no step, a prompt's alone too, aims past this long: what waits for the engine between steps (a decode,
    # /metrics, a delete) never waits much longer; None: whole max_num_batched_tokens
    step_limit_s: float | None = 1.0
    attention_backend: str | None = None  # "native", "torch" or "triton"; None: triton on CUDA, else native or torch
    # "auto": a GGUF on the CPU runs its own quantized weights, packed for torch's weight-only kernels (little
    # memory, fast decoding, reproducible for a seed; see packed_linear.py), anything else dense weights;
    # "none": dense float weights (exact, for comparison with transformers); "packed": the GGUF's own or fail
    quantization: str = "auto"
    # a disk tier under the prefix cache that keeps full blocks across restarts (see kv_disk_tier.py): its byte
    # limit, 0 for none (the library's default; `localchat serve` turns it on); kept in kv_disk_dir (None: the
    # user's cache folder, kv/)
    kv_disk_bytes: int = 0
    kv_disk_dir: str | None = None
    # CPU threads for the model's kernels: None adapts to the machine's load between steps, from torch's thread
    # count down to 1 while other processes keep cores busy (see cpu_threads.py); a number fixes it
    cpu_threads: int | None = None
    # drafts from the conversation itself, checked in the step's batch (see speculator.py): fewer steps where a
    # reply copies its prompt or a sibling, the same tokens either way
    speculative: bool = True

    def __post_init__(self) -> None:
        if self.quantization not in QUANTIZATIONS:
            raise ValueError(f"unknown quantization {self.quantization!r}; use one of {', '.join(QUANTIZATIONS)}")
        if self.block_size < 1 or self.max_num_seqs < 1 or self.max_num_batched_tokens < 1:
            raise ValueError("block_size, max_num_seqs and max_num_batched_tokens must be at least 1")
        for name in ("decode_step_target_s", "step_limit_s"):
            if getattr(self, name) is not None and not getattr(self, name) > 0:
                raise ValueError(f"{name} must be more than 0 (or None), got {getattr(self, name)}")
        if self.kv_disk_bytes < 0:
            raise ValueError(f"kv_disk_bytes must be 0 (no disk tier) or more, got {self.kv_disk_bytes}")
        if self.cpu_threads is not None and self.cpu_threads < 1:
            raise ValueError(f"cpu_threads must be at least 1, got {self.cpu_threads}")
        if self.num_kv_blocks is not None and self.num_kv_blocks < 1:
            raise ValueError(f"num_kv_blocks must be at least 1, got {self.num_kv_blocks}")
