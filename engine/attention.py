"""Paged attention in PyTorch: the engine's CPU path and the reference for the GPU kernels.

The cache of one layer is two tensors [num_blocks, block_size, num_kv_heads, head_dim]. A step's tokens
come as one flat batch; each sequence's keys and values are read through its block table."""

from dataclasses import dataclass, field

import torch
import torch.nn.functional as F

NO_BLOCK = -1  # a block-table entry whose block was freed: out of every layer's sliding window


@dataclass
class KeyView:
    """The keys that the layers with one attention window see in a step, as TorchPagedAttention reads them: built
    once per step and window (AttentionMetadata.view) and shared by those layers. A layer with window w lets the
    token at position q see the keys at positions q - w < p <= q (transformers' convention); window None: p <= q."""

    # one decode whose visible keys lie in consecutive blocks: (first block, its first visible key, number of keys),
    # read in place
    decode_span: tuple[int, int, int] | None
    decode_mask: torch.Tensor | None  # [num_decodes, 1, 1, keys] True where a gathered key is visible
    decode_blocks: torch.Tensor  # [num_decodes * keys / block_size] the blocks each decode sees, flat and padded
    prefill_blocks: list[torch.Tensor]  # the blocks each prefilling sequence's new tokens see, in order
    prefill_num_keys: list[int]  # how many keys of those blocks (up to the last new token)
    prefill_masks: list[torch.Tensor | None]  # [new, keys] True where a key is visible; None: plain causal


@dataclass
class AttentionMetadata:
    """Where a step's tokens go in the cache and what each sequence attends to (shared by all layers)."""

    positions: torch.Tensor  # [num_tokens] position of each new token in its sequence
    slot_mapping: torch.Tensor  # [num_tokens] cache slot of each new token
    query_lens: list[int]  # [num_seqs] new tokens of each sequence
    query_start_loc: list[int]  # [num_seqs + 1] where each sequence's new tokens start in the batch
    seq_lens: list[int]  # [num_seqs] context length of each sequence after this step
    tables: list[list[int]]  # [num_seqs] block table of each sequence (NO_BLOCK where a block was freed)
    block_size: int
    block_tables: torch.Tensor  # [num_seqs, max_blocks] int64, padded with 0 (and 0 for NO_BLOCK)
    query_start_loc_tensor: torch.Tensor  # the same as tensors on the device, for kernels
    seq_lens_tensor: torch.Tensor
    # the sequences with one new token (decodes), attended in one batched call
    decode_seqs: torch.Tensor  # [num_decodes] their indices among the sequences
    decode_tokens: torch.Tensor  # [num_decodes] their token rows in the batch
    max_decode_len: int  # the longest decode context (0 without decodes)
    only_decodes: bool  # every sequence decodes: the decode rows are the whole batch, in order
    prefill_seqs: list[int]  # the other sequences, attended one by one
    prefill_seqs_tensor: torch.Tensor  # the same on the device, for kernels
    views: dict[int | None, KeyView] = field(default_factory=dict)  # built on first use, by window

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
        padded = [[max(b, 0) for b in t] + [0] * (width - len(t)) for t in block_tables]
        decodes = [i for i, n in enumerate(query_lens) if n == 1]
        prefills = [i for i, n in enumerate(query_lens) if n > 1]
        return cls(
            positions=torch.tensor(positions, dtype=torch.int64, device=device),
            slot_mapping=torch.tensor(slots, dtype=torch.int64, device=device),
            query_lens=list(query_lens),
            query_start_loc=starts,
            seq_lens=list(seq_lens),
            tables=block_tables,
            block_size=block_size,
            block_tables=torch.tensor(padded, dtype=torch.int64, device=device),
            query_start_loc_tensor=torch.tensor(starts, dtype=torch.int32, device=device),
            seq_lens_tensor=torch.tensor(seq_lens, dtype=torch.int32, device=device),
            decode_seqs=torch.tensor(decodes, dtype=torch.int64, device=device),
            decode_tokens=torch.tensor([starts[i] for i in decodes], dtype=torch.int64, device=device),
            max_decode_len=max((seq_lens[i] for i in decodes), default=0),
            only_decodes=not prefills,
            prefill_seqs=prefills,
            prefill_seqs_tensor=torch.tensor(prefills, dtype=torch.int64, device=device),
        )

    @property
    def num_decodes(self) -> int:
        return len(self.decode_seqs)

    def view(self, window: int | None) -> KeyView:
        """The keys the layers with this window see (built once per step and window)."""
        if window not in self.views:
            self.views[window] = self._build_view(window)
        return self.views[window]

    def _build_view(self, window: int | None) -> KeyView:
        bs, device = self.block_size, self.positions.device
        decodes = [i for i, n in enumerate(self.query_lens) if n == 1]
        decode_span, decode_mask, decode_blocks = None, None, []
        if decodes:
            firsts = [_first_key(self.seq_lens[i] - 1, window) for i in decodes]
            tables = [self.tables[i][first // bs : -(-self.seq_lens[i] // bs)] for i, first in zip(decodes, firsts)]
            if len(decodes) == 1 and _consecutive(tables[0]):  # read in place: no gather, no mask
                first, context = firsts[0], self.seq_lens[decodes[0]]
                decode_span = (tables[0][0], first % bs, context - first)
            else:
                max_blocks = max(len(t) for t in tables)
                keys = torch.arange(max_blocks * bs, device=device)
                key_pos = torch.tensor([first // bs * bs for first in firsts], device=device)[:, None] + keys
                lens = torch.tensor([self.seq_lens[i] for i in decodes], device=device)[:, None]
                visible = (key_pos < lens) & (key_pos >= torch.tensor(firsts, device=device)[:, None])
                decode_mask = visible[:, None, None, :]
                decode_blocks = [b for t in tables for b in t + [0] * (max_blocks - len(t))]
        prefill_blocks, prefill_num_keys, prefill_masks = [], [], []
        for i in self.prefill_seqs:
            new, context = self.query_lens[i], self.seq_lens[i]
            first_block = _first_key(context - new, window) // bs
            prefill_blocks.append(torch.tensor(self.tables[i][first_block : -(-context // bs)], device=device))
            prefill_num_keys.append(context - first_block * bs)
            if first_block == 0 and new == context and (window is None or context <= window):
                prefill_masks.append(None)
                continue
            rows = torch.arange(context - new, context, device=device)[:, None]
            keys = torch.arange(first_block * bs, context, device=device)[None, :]
            mask = keys <= rows
            if window is not None:
                mask &= keys > rows - window
            prefill_masks.append(mask)
        return KeyView(decode_span, decode_mask, torch.tensor(decode_blocks, dtype=torch.int64, device=device),
                       prefill_blocks, prefill_num_keys, prefill_masks)


def _first_key(position: int, window: int | None) -> int:
    """The first key that a token at this position sees."""
    return 0 if window is None else max(0, position - window + 1)


def _decode_context(cache: torch.Tensor, view: KeyView) -> torch.Tensor:
    """The decodes' visible keys (or values) [decodes, kv_heads, keys, head_dim]: a view of the cache when one
    sequence's blocks are consecutive, else gathered (padded, masked by decode_mask)."""
    block_size, kv_heads, head_dim = cache.shape[1:]
    if view.decode_span is not None:
        first_block, first_key, num_keys = view.decode_span
        blocks = cache[first_block : first_block - (-(first_key + num_keys) // block_size)]
        return blocks.view(-1, kv_heads, head_dim)[first_key : first_key + num_keys].transpose(0, 1)[None]
    # index_select, not cache[blocks]: advanced indexing into the big cache is ~1000x slower on CPU
    decodes = len(view.decode_mask)
    return cache.index_select(0, view.decode_blocks).view(decodes, -1, kv_heads, head_dim).transpose(1, 2)


def _consecutive(table: list[int]) -> bool:
    return table[0] >= 0 and table[-1] - table[0] == len(table) - 1 and table == list(range(table[0], table[-1] + 1))


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
               scale: float, window: int | None = None) -> torch.Tensor:
        """query [num_tokens, num_heads, head_dim] -> [num_tokens, num_heads, head_dim]; window: the layer's sliding
        window (each token sees its last `window` positions), None for the whole context."""
        kv_heads, head_dim = k_cache.shape[2:]
        view = meta.view(window)
        if meta.num_decodes:
            keys, values = (_decode_context(cache, view) for cache in (k_cache, v_cache))
            q = (query if meta.only_decodes else query[meta.decode_tokens]).unsqueeze(2)  # [decodes, heads, 1, dim]
            o = F.scaled_dot_product_attention(q, keys, values, attn_mask=view.decode_mask, scale=scale,
                                               enable_gqa=True).squeeze(2)
            if meta.only_decodes:
                return o
            out = torch.empty_like(query)
            out[meta.decode_tokens] = o
        else:
            out = torch.empty_like(query)
        for i, blocks, num_keys, mask in zip(meta.prefill_seqs, view.prefill_blocks, view.prefill_num_keys,
                                             view.prefill_masks):
            start, end = meta.query_start_loc[i], meta.query_start_loc[i + 1]
            # keys and values repeated per query head: SDPA's fused CPU kernel does not take grouped heads
            group = query.shape[1] // kv_heads
            keys = k_cache.index_select(0, blocks).view(-1, kv_heads, head_dim)[:num_keys]
            values = v_cache.index_select(0, blocks).view(-1, kv_heads, head_dim)[:num_keys]
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
