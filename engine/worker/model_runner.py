"""Turns a step's input (plain data: ModelInput) into flat tensors, runs the model once, and returns the logits to
sample from."""

from collections.abc import Iterable

import torch
from transformers import PretrainedConfig

from localchat.engine.core.step_outputs import ModelInput
from localchat.engine.worker.attention import AttentionMetadata, get_backend
from localchat.engine.worker.cpu_threads import CPUThreads
from localchat.engine.worker.fused_decoder import FusedDecoder
from localchat.engine.worker.kernel_choice import choose
from localchat.engine.worker.models.families import family_for
from localchat.engine.worker.packed_linear import PackedLinear


class ModelRunner:
    def __init__(self, config: PretrainedConfig, weights: Iterable[tuple[str, torch.Tensor]],
                 packed: bool, dtype: torch.dtype, kv_dtype: torch.dtype, device: torch.device, block_size: int,
                 num_blocks: int, max_model_len: int, attention_backend: str | None = None,
                 cpu_threads: int | None = None):
        """config: the text model's (PretrainedConfig.get_text_config()); weights: dense (name, tensor) pairs with
        Hugging Face names, or (packed) a GGUF's packed weights as loader.load_packed gives them; cpu_threads: on the
        CPU, the kernels' thread count (None: as many as the other processes leave, see cpu_threads.py)."""
        self.device, self.dtype, self.kv_dtype, self.block_size = device, dtype, kv_dtype, block_size
        self.cpu_threads = CPUThreads(cpu_threads) if device.type == "cpu" else None
        model_class = family_for(config.model_type).model_class()
        with torch.device("meta"):  # no memory and no random init for weights about to be replaced
            self.model = model_class(config, max_model_len, rope_device=device)
        if packed:
            self.model.load_packed(weights, dtype, device)
        else:
            self.model.load_weights(weights, dtype, device)
        self.model.eval()
        attn = self.model.layers[0].self_attn
        self.backend = get_backend(attention_backend, device, dtype, kv_dtype, attn.head_dim)
        # one tensor for the whole cache, so a block copy or clear covers every layer at once; allocated
        # uninitialized (fast start) and cleared block by block on first use
        shape = (len(self.model.layers), 2, num_blocks, block_size, attn.num_kv_heads, attn.head_dim)
        self.kv_cache = torch.empty(shape, dtype=kv_dtype, device=device)
        self.block_shape = (shape[0], shape[1], *shape[3:])  # one block's K and V in every layer
        for layer, layer_cache in zip(self.model.layers, self.kv_cache):
            layer.self_attn.k_cache, layer.self_attn.v_cache = layer_cache[0], layer_cache[1]
            layer.self_attn.backend = self.backend
        # what runs prompt rows, measured (kernel_choice.py); the decoder's layers in one native call a step where the
        # kernels cover the model (the same bits), for every step where the native kernels run all its rows
        linears = [module for module in self.model.modules() if isinstance(module, PackedLinear)]
        layers = [module for module in self.model.layers.modules() if isinstance(module, PackedLinear)]
        self.kernels = choose(layers, torch.get_num_threads()) if device.type == "cpu" else None
        self.dense_from = self.kernels.prompt_rows if self.kernels is not None and self.kernels.dense_prompts else None
        for linear in linears:
            linear.dense_from = self.dense_from
        self.fused = FusedDecoder.build(self.model) if device.type == "cpu" else None

    def block_view(self, block_id: int) -> torch.Tensor:
        """One block's K and V in every layer, [layers, 2, block_size, kv_heads, head_dim]: the cache's memory."""
        return self.kv_cache[:, :, block_id]

    def read_block(self, block_id: int) -> torch.Tensor:
        """A copy of block_view(block_id)."""
        return self.block_view(block_id).clone()

    @property
    def kv_cache_bytes(self) -> int:
        return self.kv_cache.numel() * self.kv_cache.element_size()

    @property
    def block_bytes(self) -> int:
        """The memory of one block (its K and V in every layer)."""
        return torch.Size(self.block_shape).numel() * self.kv_cache.element_size()

    @torch.inference_mode()
    def run(self, step: ModelInput) -> torch.Tensor:
        """Compute a step's new tokens (each sequence's own, then its draft's); the logits at step.logit_positions."""
        if self.cpu_threads is not None:
            self.cpu_threads.adjust()
        if step.cleared:
            self.kv_cache[:, :, torch.tensor(step.cleared, device=self.device)] = 0
        if step.copies:
            self.backend.copy_blocks(self.kv_cache, step.copies)
        meta = AttentionMetadata.build(query_lens=step.query_lens, seq_lens=step.seq_lens,
                                       block_tables=step.block_tables, block_size=self.block_size, device=self.device)
        input_ids = torch.tensor(step.input_ids, dtype=torch.int64, device=self.device)
        fused = self.fused is not None and (self.dense_from is None or len(input_ids) < self.dense_from)
        hidden = self.fused.forward(input_ids, meta) if fused else self.model(input_ids, meta)
        positions = torch.tensor(step.logit_positions, dtype=torch.int64, device=self.device)
        return self.model.compute_logits(hidden[positions])
