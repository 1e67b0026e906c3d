"""The PyTorch paged-attention path: a decode read in place from consecutive blocks equals the gathered one and
plain attention over the sequence's keys."""

import torch
import torch.nn.functional as F

from localchat.engine.attention import AttentionMetadata, TorchPagedAttention

BLOCK, KV_HEADS, GROUP, DIM, CONTEXT = 16, 3, 3, 64, 37


def decode(table: list[int], keys: torch.Tensor, values: torch.Tensor, query: torch.Tensor) -> tuple:
    k_cache = torch.full((16, BLOCK, KV_HEADS, DIM), 1e4)  # a key or value past the context would dominate
    v_cache = torch.full_like(k_cache, 1e4)
    meta = AttentionMetadata.build([CONTEXT], [CONTEXT], [table], BLOCK, torch.device("cpu"))
    TorchPagedAttention.store(keys, values, k_cache, v_cache, meta.slot_mapping)
    step = AttentionMetadata.build([1], [CONTEXT], [table], BLOCK, torch.device("cpu"))
    return step, TorchPagedAttention.attend(query, k_cache, v_cache, step, scale=DIM ** -0.5)


def test_a_decode_over_consecutive_blocks_reads_them_in_place():
    gen = torch.Generator().manual_seed(0)
    keys, values = (torch.randn(CONTEXT, KV_HEADS, DIM, generator=gen) for _ in range(2))
    query = torch.randn(1, KV_HEADS * GROUP, DIM, generator=gen)
    in_place_meta, in_place = decode([5, 6, 7], keys, values, query)
    gathered_meta, gathered = decode([9, 2, 11], keys, values, query)
    assert in_place_meta.decode_span == (5, CONTEXT) and in_place_meta.decode_mask is None
    assert gathered_meta.decode_span is None and gathered_meta.decode_mask is not None
    expected = F.scaled_dot_product_attention(
        query.transpose(0, 1)[None], keys.repeat_interleave(GROUP, 1).transpose(0, 1)[None],
        values.repeat_interleave(GROUP, 1).transpose(0, 1)[None], scale=DIM ** -0.5)[0].transpose(0, 1)
    torch.testing.assert_close(in_place, expected, rtol=1e-5, atol=1e-5)
    torch.testing.assert_close(gathered, expected, rtol=1e-5, atol=1e-5)
