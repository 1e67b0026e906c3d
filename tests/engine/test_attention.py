"""The PyTorch paged-attention path: a decode read in place from consecutive blocks equals the gathered one and
plain attention over the sequence's keys; with a sliding window, every kind of step equals dense attention under
transformers' window mask."""

import pytest
import torch
import torch.nn.functional as F

from localchat.engine.attention import NO_BLOCK, AttentionMetadata, KeySpan, TorchPagedAttention

BLOCK, KV_HEADS, GROUP, DIM, CONTEXT = 16, 3, 3, 64, 37


def decode(table: list[int], keys: torch.Tensor, values: torch.Tensor, query: torch.Tensor,
           window: int | None = None) -> tuple:
    k_cache = torch.full((16, BLOCK, KV_HEADS, DIM), 1e4)  # a key or value past the context would dominate
    v_cache = torch.full_like(k_cache, 1e4)
    meta = AttentionMetadata.build([CONTEXT], [CONTEXT], [table], BLOCK, torch.device("cpu"))
    TorchPagedAttention.store(keys, values, k_cache, v_cache, meta.slot_mapping)
    step = AttentionMetadata.build([1], [CONTEXT], [table], BLOCK, torch.device("cpu"))
    return step, TorchPagedAttention.attend(query, k_cache, v_cache, step, DIM ** -0.5, window)


def dense(query: torch.Tensor, keys: torch.Tensor, values: torch.Tensor, positions: torch.Tensor,
          window: int | None) -> torch.Tensor:
    """query [new, heads, dim] at these positions over keys [context, kv_heads, dim]: the reference."""
    key_pos = torch.arange(len(keys))
    mask = key_pos[None, :] <= positions[:, None]
    if window is not None:
        mask &= key_pos[None, :] > positions[:, None] - window  # transformers' sliding_window_overlay
    return F.scaled_dot_product_attention(
        query.transpose(0, 1)[None], keys.repeat_interleave(GROUP, 1).transpose(0, 1)[None],
        values.repeat_interleave(GROUP, 1).transpose(0, 1)[None], attn_mask=mask, scale=DIM ** -0.5)[0].transpose(0, 1)


@pytest.mark.parametrize("window", [None, 5, 16, 20])
def test_a_decode_over_consecutive_blocks_reads_them_in_place(window):
    gen = torch.Generator().manual_seed(0)
    keys, values = (torch.randn(CONTEXT, KV_HEADS, DIM, generator=gen) for _ in range(2))
    query = torch.randn(1, KV_HEADS * GROUP, DIM, generator=gen)
    in_place_meta, in_place = decode([5, 6, 7], keys, values, query, window)
    gathered_meta, gathered = decode([9, 2, 11], keys, values, query, window)
    [in_place_span], [gathered_span] = in_place_meta.view(window), gathered_meta.view(window)
    first = 0 if window is None else max(0, CONTEXT - window) // BLOCK
    assert in_place_span == KeySpan(slice(5 + first, 8), first * BLOCK, CONTEXT - first * BLOCK)
    if first < 2:  # the visible keys span blocks 2 and 11 at least: gathered
        assert gathered_span.blocks.tolist() == [9, 2, 11][first:]
    else:  # all in block 11: read in place too
        assert gathered_span == KeySpan(slice(11, 12), first * BLOCK, CONTEXT - first * BLOCK)
    expected = dense(query, keys, values, torch.tensor([CONTEXT - 1]), window)
    torch.testing.assert_close(in_place, expected, rtol=1e-5, atol=1e-5)
    torch.testing.assert_close(gathered, expected, rtol=1e-5, atol=1e-5)


@pytest.mark.parametrize("window", [None, 1, 7, 16, 30])
def test_sliding_window_over_every_kind_of_step(window):
    """Decodes, a whole prompt, and chunks over a cached prefix, in one step: each token sees its last `window`
    positions; blocks wholly outside every window may be freed (NO_BLOCK) and are never looked at."""
    gen = torch.Generator().manual_seed(1)
    block, num_blocks = 4, 64
    seqs = [(1, 1), (1, 9), (1, 30), (30, 30), (5, 41), (12, 20)]  # (new tokens, context)
    free = torch.randperm(num_blocks, generator=gen).tolist()
    tables = []
    for new, context in seqs:
        n = -(-context // block)
        table, free = free[:n], free[n:]
        if window is not None:  # blocks no new token of this step can see: freed, their memory poisoned
            first_visible = max(0, context - new - window + 1)
            table = [NO_BLOCK if (b + 1) * block <= first_visible else t for b, t in enumerate(table)]
        tables.append(table)
    k_cache, v_cache = (torch.randn(num_blocks, block, KV_HEADS, DIM, generator=gen) for _ in range(2))
    used = [b for t in tables for b in t if b != NO_BLOCK]
    unused = [b for b in range(num_blocks) if b not in used]
    k_cache[unused] = 1e4  # masked padding reads finite memory (the engine clears blocks before first use)
    v_cache[unused] = 1e4
    meta = AttentionMetadata.build([n for n, _ in seqs], [c for _, c in seqs], tables, block, torch.device("cpu"))
    query = torch.randn(sum(n for n, _ in seqs), KV_HEADS * GROUP, DIM, generator=gen)
    out = TorchPagedAttention.attend(query, k_cache, v_cache, meta, DIM ** -0.5, window)
    assert meta.view(window) is meta.view(window)  # built once per step and window
    for i, ((new, context), table) in enumerate(zip(seqs, tables)):
        slots = torch.tensor([table[p // block] * block + p % block if table[p // block] != NO_BLOCK else 0
                              for p in range(context)])
        keys, values = (cache.view(-1, KV_HEADS, DIM)[slots] for cache in (k_cache, v_cache))
        start = meta.query_start_loc[i]
        expected = dense(query[start : start + new], keys, values, torch.arange(context - new, context), window)
        torch.testing.assert_close(out[start : start + new], expected, rtol=1e-5, atol=1e-5)
