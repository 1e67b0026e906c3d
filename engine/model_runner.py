"""Turns a scheduled batch into flat tensors, runs the model once, and returns the logits to sample from."""

import torch
from transformers import PretrainedConfig

from localchat.engine.attention import AttentionMetadata, clear_blocks, copy_blocks
from localchat.engine.models.llama import LlamaForCausalLM
from localchat.engine.scheduler import ScheduledBatch


class ModelRunner:
    def __init__(self, config: PretrainedConfig, weights, dtype: torch.dtype, device: torch.device,
                 block_size: int, num_blocks: int, max_model_len: int):
        self.device, self.dtype, self.block_size = device, dtype, block_size
        with torch.device("meta"):  # no memory and no random init for weights about to be replaced
            self.model = LlamaForCausalLM(config, max_model_len, rope_device=device)
        self.model.load_weights(weights, dtype, device)
        self.model.eval()
        attn = self.model.layers[0].self_attn
        shape = (num_blocks, block_size, attn.num_kv_heads, attn.head_dim)
        self.kv_caches = [
            (torch.empty(shape, dtype=dtype, device=device), torch.empty(shape, dtype=dtype, device=device))
            for _ in self.model.layers
        ]
        for layer, (k_cache, v_cache) in zip(self.model.layers, self.kv_caches):
            layer.self_attn.k_cache, layer.self_attn.v_cache = k_cache, v_cache

    @property
    def bytes_per_block(self) -> int:
        k_cache = self.kv_caches[0][0]
        return 2 * len(self.kv_caches) * k_cache[0].numel() * k_cache.element_size()

    @torch.inference_mode()
    def run(self, batch: ScheduledBatch, sample_rows: list[int]) -> torch.Tensor:
        """Compute the new tokens of every scheduled sequence; logits [len(sample_rows), vocab] (float32)
        at the last new token of the sequences listed in sample_rows."""
        clear_blocks(self.kv_caches, batch.cleared)
        copy_blocks(self.kv_caches, batch.copies)
        seqs, num_new_tokens = batch.seqs, batch.num_new_tokens
        input_ids, positions, slots = [], [], []
        bs = self.block_size
        for seq, n in zip(seqs, num_new_tokens):
            start = seq.num_computed_tokens
            input_ids.extend(seq.token_ids[start : start + n])
            table = seq.block_table
            for pos in range(start, start + n):
                positions.append(pos)
                slots.append(table[pos // bs] * bs + pos % bs)
        device = self.device
        meta = AttentionMetadata.build(
            query_lens=num_new_tokens,
            seq_lens=[seq.num_computed_tokens + n for seq, n in zip(seqs, num_new_tokens)],
            block_tables=[seq.block_table for seq in seqs],
            slot_mapping=torch.tensor(slots, dtype=torch.int64, device=device),
            block_size=bs,
            device=device,
        )
        hidden = self.model(
            torch.tensor(input_ids, dtype=torch.int64, device=device),
            torch.tensor(positions, dtype=torch.int64, device=device),
            meta,
        )
        last_tokens = torch.tensor([meta.query_start_loc[i + 1] - 1 for i in sample_rows], device=device)
        return self.model.compute_logits(hidden[last_tokens])
