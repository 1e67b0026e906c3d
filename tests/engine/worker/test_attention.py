"""The CPU's paged-attention paths, the native kernel and the PyTorch path it falls back to: a decode read in place
from consecutive blocks equals the gathered one and plain attention over the sequence's keys; with a sliding
window, every kind of step equals dense attention under transformers' window mask; and a token's result is the
same to the bit however its sequence's tokens are split into steps and whatever else runs in them (batch
invariance)."""

import pytest
import torch
import torch.nn.functional as F

from localchat.engine.worker import native_kernels
from localchat.engine.worker.attention import (
    NO_BLOCK,
    AttentionMetadata,
    KeySpan,
    NativePagedAttention,
    TorchPagedAttention,
)

BLOCK, KV_HEADS, GROUP, DIM, CONTEXT = 16, 3, 3, 64, 37


@pytest.fixture(params=[*(f"native-{isa}" for isa in native_kernels.ISAS), "torch"])
def backend(request, use_isa):
    """The native kernel as built for each instruction set the CPU runs, then the PyTorch path."""
    if request.param == "torch":
        return TorchPagedAttention
    use_isa(request.param.removeprefix("native-"))
    return NativePagedAttention


def decode(backend, table: list[int], keys: torch.Tensor, values: torch.Tensor, query: torch.Tensor,
           window: int | None = None) -> tuple:
    k_cache = torch.full((16, BLOCK, KV_HEADS, DIM), 1e4)  # a key or value past the context would dominate
    v_cache = torch.full_like(k_cache, 1e4)
    meta = AttentionMetadata.build([CONTEXT], [CONTEXT], [table], BLOCK, torch.device("cpu"))
    TorchPagedAttention.store(keys, values, k_cache, v_cache, meta.slot_mapping)
    step = AttentionMetadata.build([1], [CONTEXT], [table], BLOCK, torch.device("cpu"))
    return step, backend.attend(query, k_cache, v_cache, step, DIM ** -0.5, window)


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
def test_a_decode_over_consecutive_blocks_reads_them_in_place(backend, window):
    gen = torch.Generator().manual_seed(0)
    keys, values = (torch.randn(CONTEXT, KV_HEADS, DIM, generator=gen) for _ in range(2))
    query = torch.randn(1, KV_HEADS * GROUP, DIM, generator=gen)
    in_place_meta, in_place = decode(backend, [5, 6, 7], keys, values, query, window)
    gathered_meta, gathered = decode(backend, [9, 2, 11], keys, values, query, window)
    [in_place_span], [gathered_span] = in_place_meta.view(window), gathered_meta.view(window)
    first = 0 if window is None else max(0, (CONTEXT - 1) // BLOCK * BLOCK - window + 1) // BLOCK
    assert in_place_span == KeySpan(slice(5 + first, 8), first * BLOCK, (3 - first) * BLOCK)  # whole blocks
    if first < 2:  # the visible keys span blocks 2 and 11 at least: gathered
        assert gathered_span.blocks.tolist() == [9, 2, 11][first:]
    else:  # all in block 11: read in place too
        assert gathered_span == KeySpan(slice(11, 12), first * BLOCK, BLOCK)
    expected = dense(query, keys, values, torch.tensor([CONTEXT - 1]), window)
    torch.testing.assert_close(in_place, expected, rtol=1e-5, atol=1e-5)
    torch.testing.assert_close(gathered, expected, rtol=1e-5, atol=1e-5)


@pytest.mark.parametrize("window", [None, 1, 7, 16, 30])
def test_sliding_window_over_every_kind_of_step(backend, window):
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
            first_visible = max(0, (context - new) // block * block - window + 1)  # of the first new token's block
            table = [NO_BLOCK if (b + 1) * block <= first_visible else t for b, t in enumerate(table)]
        tables.append(table)
    k_cache, v_cache = (torch.randn(num_blocks, block, KV_HEADS, DIM, generator=gen) for _ in range(2))
    used = [b for t in tables for b in t if b != NO_BLOCK]
    unused = [b for b in range(num_blocks) if b not in used]
    k_cache[unused] = 1e4  # masked padding reads finite memory (the engine clears blocks before first use)
    v_cache[unused] = 1e4
    meta = AttentionMetadata.build([n for n, _ in seqs], [c for _, c in seqs], tables, block, torch.device("cpu"))
    query = torch.randn(sum(n for n, _ in seqs), KV_HEADS * GROUP, DIM, generator=gen)
    out = backend.attend(query, k_cache, v_cache, meta, DIM ** -0.5, window)
    assert meta.view(window) is meta.view(window)  # built once per step and window
    for i, ((new, context), table) in enumerate(zip(seqs, tables)):
        slots = torch.tensor([table[p // block] * block + p % block if table[p // block] != NO_BLOCK else 0
                              for p in range(context)])
        keys, values = (cache.view(-1, KV_HEADS, DIM)[slots] for cache in (k_cache, v_cache))
        start = meta.query_start_loc[i]
        expected = dense(query[start : start + new], keys, values, torch.arange(context - new, context), window)
        torch.testing.assert_close(out[start : start + new], expected, rtol=1e-5, atol=1e-5)


def attend_in_steps(backend, steps: list[list[tuple[int, int]]], tables: list[list[int]], k_new: list[torch.Tensor],
                    v_new: list[torch.Tensor], queries: list[torch.Tensor], window: int | None, block: int,
                    kv_heads: int) -> list[torch.Tensor]:
    """Run the steps (each a list of (sequence, new tokens)) over a fresh cache; each sequence's outputs in order."""
    gen = torch.Generator().manual_seed(7)
    k_cache, v_cache = (torch.randn(64, block, kv_heads, DIM, generator=gen) for _ in range(2))  # stale memory
    done = [0] * len(tables)
    outs = [[] for _ in tables]
    for step in steps:
        new = [n for _, n in step]
        context = [done[s] + n for s, n in step]
        meta = AttentionMetadata.build(new, context, [tables[s][: -(-c // block)] for (s, _), c in zip(step, context)],
                                       block, torch.device("cpu"))
        rows = [slice(done[s], done[s] + n) for s, n in step]
        TorchPagedAttention.store(torch.cat([k_new[s][r] for (s, _), r in zip(step, rows)]),
                                  torch.cat([v_new[s][r] for (s, _), r in zip(step, rows)]), k_cache, v_cache,
                                  meta.slot_mapping)
        out = backend.attend(torch.cat([queries[s][r] for (s, _), r in zip(step, rows)]), k_cache, v_cache,
                                         meta, DIM ** -0.5, window)
        for (s, n), start in zip(step, meta.query_start_loc):
            outs[s].append(out[start : start + n])
            done[s] += n
    return [torch.cat(o) for o in outs]


@pytest.mark.parametrize(("window", "group", "kv_heads"), [(None, 3, 3), (None, 1, 4), (11, 4, 2), (None, 8, 1)])
def test_a_tokens_result_does_not_depend_on_how_its_sequence_is_stepped(backend, window, group, kv_heads):
    """Whole prefills, chunks that split blocks, one token at a time, and other sequences beside them: the same
    bits for every token (the property behind a seeded request's equal replies cold, cached and batched)."""
    gen = torch.Generator().manual_seed(3)
    block, lengths = 16, [70, 33, 5]
    tables = [list(range(0, 5)), list(range(20, 23)), [40]]
    k_new, v_new = ([torch.randn(n, kv_heads, DIM, generator=gen) for n in lengths] for _ in range(2))
    queries = [torch.randn(n, kv_heads * group, DIM, generator=gen) for n in lengths]
    whole = [[(0, 70), (1, 33), (2, 5)]]
    chunked = [[(0, 9)], [(0, 21), (1, 1)], [(0, 40), (1, 31)], [(1, 1), (2, 5)]]
    one_by_one = [[(0, 1), (1, 1), (2, 1)]] * 5 + [[(0, 1), (1, 1)]] * 28 + [[(0, 1)]] * 37
    reference = attend_in_steps(backend, whole, tables, k_new, v_new, queries, window, block, kv_heads)
    for steps in (chunked, one_by_one):
        stepped = attend_in_steps(backend, steps, tables, k_new, v_new, queries, window, block, kv_heads)
        for expected, got in zip(reference, stepped):
            assert torch.equal(expected, got)


@pytest.mark.parametrize("dim", [64, 128, 256])
def test_the_native_kernel_over_a_bfloat16_cache_matches_the_torch_path_at_any_thread_count(native, dim):
    """The cache the engine keeps under packed weights (bfloat16, widened exactly), the head sizes of the families
    (Gemma 3: 256); the kernel splits its work among threads, never a token's sums."""
    gen = torch.Generator().manual_seed(5)
    block, kv_heads, group = 16, 2, 4
    seqs, tables = [(1, 300), (40, 40), (7, 23)], [list(range(30, 49)), [3, 1, 2], [60, 10]]
    k_cache, v_cache = (torch.randn(64, block, kv_heads, dim, generator=gen).bfloat16() for _ in range(2))
    meta = AttentionMetadata.build([n for n, _ in seqs], [c for _, c in seqs], tables, block, torch.device("cpu"))
    query = torch.randn(sum(n for n, _ in seqs), kv_heads * group, dim, generator=gen)
    expected = TorchPagedAttention.attend(query, k_cache, v_cache, meta, dim ** -0.5)
    threads = torch.get_num_threads()
    try:
        runs = []
        for count in (1, 2, 3):
            torch.set_num_threads(count)
            runs.append(NativePagedAttention.attend(query, k_cache, v_cache, meta, dim ** -0.5))
    finally:
        torch.set_num_threads(threads)
    torch.testing.assert_close(runs[0], expected, rtol=1e-5, atol=1e-5)
    assert all(torch.equal(runs[0], run) for run in runs[1:])
