"""Paged attention in PyTorch: the engine's CPU path and the reference for the GPU kernels.

The cache of one layer is two tensors [num_blocks, block_size, num_kv_heads, head_dim]. A step's tokens
come as one flat batch; each sequence's keys and values are read through its block table."""

from dataclasses import dataclass

import torch
import torch.nn.functional as F


@dataclass
class AttentionMetadata:
    """Where a step's tokens go in the cache and what each sequence attends to (shared by all layers)."""

    positions: torch.Tensor  # [num_tokens] position of each new token in its sequence
    slot_mapping: torch.Tensor  # [num_tokens] cache slot of each new token
    query_start_loc: list[int]  # [num_seqs + 1] where each sequence's new tokens start in the batch
    seq_lens: list[int]  # [num_seqs] context length of each sequence after this step
    block_tables: torch.Tensor  # [num_seqs, max_blocks] int64, padded with 0
    query_start_loc_tensor: torch.Tensor  # the same as tensors on the device, for kernels
    seq_lens_tensor: torch.Tensor
    # the sequences with one new token (decodes), attended in one batched call
    decode_seqs: torch.Tensor  # [num_decodes] their indices among the sequences
    decode_tokens: torch.Tensor  # [num_decodes] their token rows in the batch
    decode_mask: torch.Tensor | None  # [num_decodes, 1, 1, max_context] True where a key is visible
    decode_blocks: torch.Tensor  # [num_decodes * max_context / block_size] their block tables, flat and padded
    decode_span: tuple[int, int] | None  # one decode whose blocks are consecutive: (first block, context length)
    only_decodes: bool  # every sequence decodes: the decode rows are the whole batch, in order
    prefill_seqs: list[int]  # the other sequences, attended one by one
    prefill_seqs_tensor: torch.Tensor  # the same on the device, for kernels
    prefill_masks: list[torch.Tensor | None]  # [new, context] causal masks over a cached prefix; None: plain causal

    @classmethod
    def build(cls, query_lens: list[int], seq_lens: list[int], block_tables: list[list[int]], block_size: int,
              device: torch.device) -> "AttentionMetadata":
        """A step where sequence i computes its last query_lens[i] of seq_lens[i] tokens into block_tables[i]."""
        positions = [p for new, context in zip(query_lens, seq_lens) for p in range(context - new, context)]
        slots = [table[p // block_size] * block_size + p % block_size
                 for new, context, table in zip(query_lens, seq_lens, block_tables)
                 for p in range(context - new, context)]
        starts = [0]
        for n in query_lens:
            starts.append(starts[-1] + n)
        width = max(len(t) for t in block_tables)
        tables = torch.tensor([t + [0] * (width - len(t)) for t in block_tables], dtype=torch.int64, device=device)
        decodes = [i for i, n in enumerate(query_lens) if n == 1]
        prefills = [i for i, n in enumerate(query_lens) if n > 1]
        decode_mask, decode_blocks, decode_span = None, [], None
        if len(decodes) == 1 and _consecutive(block_tables[decodes[0]]):
            decode_span = (block_tables[decodes[0]][0], seq_lens[decodes[0]])  # read in place: no gather, no mask
        elif decodes:
            max_blocks = max(len(block_tables[i]) for i in decodes)
            keys = torch.arange(max_blocks * block_size, device=device)
            lens = torch.tensor([seq_lens[i] for i in decodes], device=device)
            decode_mask = (keys[None, :] < lens[:, None])[:, None, None, :]
            decode_blocks = [b for i in decodes for b in block_tables[i] + [0] * (max_blocks - len(block_tables[i]))]
        masks = []
        for i in prefills:
            new, context = query_lens[i], seq_lens[i]
            if new == context:
                masks.append(None)
            else:
                rows = torch.arange(context - new, context, device=device)
                masks.append(torch.arange(context, device=device)[None, :] <= rows[:, None])
        return cls(
            positions=torch.tensor(positions, dtype=torch.int64, device=device),
            slot_mapping=torch.tensor(slots, dtype=torch.int64, device=device),
            query_start_loc=starts,
            seq_lens=seq_lens,
            block_tables=tables,
            query_start_loc_tensor=torch.tensor(starts, dtype=torch.int32, device=device),
            seq_lens_tensor=torch.tensor(seq_lens, dtype=torch.int32, device=device),
            decode_seqs=torch.tensor(decodes, dtype=torch.int64, device=device),
            decode_tokens=torch.tensor([starts[i] for i in decodes], dtype=torch.int64, device=device),
            decode_mask=decode_mask,
            decode_blocks=torch.tensor(decode_blocks, dtype=torch.int64, device=device),
            decode_span=decode_span,
            only_decodes=not prefills,
            prefill_seqs=prefills,
            prefill_seqs_tensor=torch.tensor(prefills, dtype=torch.int64, device=device),
            prefill_masks=masks,
        )


def _decode_context(cache: torch.Tensor, meta: AttentionMetadata) -> torch.Tensor:
    """The decodes' keys (or values) [decodes, kv_heads, context, head_dim]: a view of the cache when one
    sequence's blocks are consecutive, else gathered (padded, masked by decode_mask)."""
    block_size, kv_heads, head_dim = cache.shape[1:]
    if meta.decode_span is not None:
        first, context = meta.decode_span
        blocks = cache[first : first - (-context // block_size)]
        return blocks.view(-1, kv_heads, head_dim)[:context].transpose(0, 1)[None]
    # index_select, not cache[blocks]: advanced indexing into the big cache is ~1000x slower on CPU
    decodes = len(meta.decode_mask)
    return cache.index_select(0, meta.decode_blocks).view(decodes, -1, kv_heads, head_dim).transpose(1, 2)


def _consecutive(table: list[int]) -> bool:
    return table[-1] - table[0] == len(table) - 1 and table == list(range(table[0], table[-1] + 1))


class TorchPagedAttention:
    """Stores new K/V into their slots, then gathers each sequence's blocks and runs SDPA over them.

    An attention backend is a class with these three static methods; get_backend picks one."""

    @staticmethod
    def store(key: torch.Tensor, value: torch.Tensor, k_cache: torch.Tensor, v_cache: torch.Tensor,
              slot_mapping: torch.Tensor) -> None:
        k_cache.view(-1, *k_cache.shape[2:]).index_copy_(0, slot_mapping, key)
        v_cache.view(-1, *v_cache.shape[2:]).index_copy_(0, slot_mapping, value)

    @staticmethod
    def attend(query: torch.Tensor, k_cache: torch.Tensor, v_cache: torch.Tensor, meta: AttentionMetadata,
               scale: float) -> torch.Tensor:
        """query [num_tokens, num_heads, head_dim] -> [num_tokens, num_heads, head_dim]."""
        kv_heads, head_dim = k_cache.shape[2:]
        if meta.decode_span is not None or meta.decode_mask is not None:
            keys, values = (_decode_context(cache, meta) for cache in (k_cache, v_cache))
            q = (query if meta.only_decodes else query[meta.decode_tokens]).unsqueeze(2)  # [decodes, heads, 1, dim]
            o = F.scaled_dot_product_attention(q, keys, values, attn_mask=meta.decode_mask, scale=scale,
                                               enable_gqa=True).squeeze(2)
            if meta.only_decodes:
                return o
            out = torch.empty_like(query)
            out[meta.decode_tokens] = o
        else:
            out = torch.empty_like(query)
        for i, mask in zip(meta.prefill_seqs, meta.prefill_masks):
            start, end, context = meta.query_start_loc[i], meta.query_start_loc[i + 1], meta.seq_lens[i]
            blocks = meta.block_tables[i, : -(-context // k_cache.shape[1])]
            # keys and values repeated per query head: SDPA's fused CPU kernel does not take grouped heads
            group = query.shape[1] // kv_heads
            keys = k_cache.index_select(0, blocks).view(-1, kv_heads, head_dim)[:context]
            values = v_cache.index_select(0, blocks).view(-1, kv_heads, head_dim)[:context]
            keys = keys.repeat_interleave(group, 1).transpose(0, 1)[None]  # 4-D, or SDPA falls back to its slow path
            values = values.repeat_interleave(group, 1).transpose(0, 1)[None]
            q = query[start:end].transpose(0, 1)[None]
            o = F.scaled_dot_product_attention(q, keys, values, attn_mask=mask, is_causal=mask is None, scale=scale)
            out[start:end] = o[0].transpose(0, 1)
        return out

    @staticmethod
    def copy_blocks(kv_cache: torch.Tensor, copies: list[tuple[int, int]]) -> None:
        """Copy-on-write: give each dst block src's keys and values in every layer.
        kv_cache is the whole cache, [num_layers, 2, num_blocks, block_size, num_kv_heads, head_dim]."""
        src = torch.tensor([s for s, _ in copies], device=kv_cache.device)
        dst = torch.tensor([d for _, d in copies], device=kv_cache.device)
        kv_cache[:, :, dst] = kv_cache[:, :, src]


def get_backend(name: str | None, device: torch.device):
    """The attention backend: "torch" (the CPU path and the reference) or "triton" (paged kernels for
    NVIDIA GPUs); None picks triton on CUDA and torch elsewhere."""
    if name is None:
        name = "triton" if device.type == "cuda" else "torch"
    if name == "torch":
        return TorchPagedAttention
    if name == "triton":
        from localchat.engine.triton_attention import TritonPagedAttention

        return TritonPagedAttention
    raise ValueError(f"unknown attention backend {name!r}; use 'torch' or 'triton'")
