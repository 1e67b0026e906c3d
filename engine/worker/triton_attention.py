"""Paged attention in Triton: the engine's path on NVIDIA GPUs, read straight through the block tables.

Four kernels over a layer's cache [num_blocks, block_size, num_kv_heads, head_dim] (float32 accumulation):
store (new K/V into their slots), split-K decode attention (+ a reduce over the splits), causal prefill
attention over a chunk and its cached prefix, and a block copy for copy-on-write. The attention kernels take the
layer's sliding window (the token at position q sees the keys q - window < p <= q) and read no key outside it.
attention.TorchPagedAttention is the reference they are tested against (on CPU with TRITON_INTERPRET=1)."""

import torch
import triton
import triton.language as tl

from localchat.engine.worker.attention import AttentionMetadata

LOG2E = 1.4426950408889634  # exp(x) = exp2(x * log2(e)): the kernels take scale * LOG2E and use exp2
DECODE_BLOCK_N = 64  # keys per decode iteration
DECODE_TARGET_PROGRAMS = 512  # split long contexts until a decode launch has about this many programs
PREFILL_BLOCK_M, PREFILL_BLOCK_N = 64, 64  # query rows per program, keys per iteration
COPY_BLOCK = 1024  # elements per copy program
NO_WINDOW = 1 << 30  # the window of a layer that sees its whole context


@triton.jit
def _store_kernel(key_ptr, value_ptr, k_cache_ptr, v_cache_ptr, slot_ptr,
                  s_kt, s_kh, s_vt, s_vh, s_cb, s_ct, s_ch,
                  BLOCK_SIZE: tl.constexpr, NUM_HEADS: tl.constexpr, HEAD_DIM: tl.constexpr,
                  BLOCK_H: tl.constexpr, BLOCK_D: tl.constexpr):
    """One program per new token: its K and V of every KV head into the cache slot (slot -1: skipped)."""
    token = tl.program_id(0).to(tl.int64)
    slot = tl.load(slot_ptr + token).to(tl.int64)
    h = tl.arange(0, BLOCK_H)[:, None]
    d = tl.arange(0, BLOCK_D)[None, :]
    mask = (h < NUM_HEADS) & (d < HEAD_DIM)
    if slot >= 0:
        dst = (slot // BLOCK_SIZE) * s_cb + (slot % BLOCK_SIZE) * s_ct + h * s_ch + d
        tl.store(k_cache_ptr + dst, tl.load(key_ptr + token * s_kt + h * s_kh + d, mask=mask), mask=mask)
        tl.store(v_cache_ptr + dst, tl.load(value_ptr + token * s_vt + h * s_vh + d, mask=mask), mask=mask)


@triton.jit
def _kv_tile(k_cache_ptr, v_cache_ptr, table_ptr, pos, end, kv_head, d, s_cb, s_ct, s_ch,
             BLOCK_SIZE: tl.constexpr, HEAD_DIM: tl.constexpr, DOT_F32: tl.constexpr):
    """Keys and values [len(pos), BLOCK_D] of one KV head at context positions pos (zeros from end on),
    each read from its block through the sequence's block table."""
    valid = pos < end
    block = tl.load(table_ptr + pos // BLOCK_SIZE, mask=valid, other=0)
    offs = (block * s_cb + (pos % BLOCK_SIZE) * s_ct + kv_head * s_ch)[:, None] + d[None, :]
    mask = valid[:, None] & (d[None, :] < HEAD_DIM)
    k = tl.load(k_cache_ptr + offs, mask=mask, other=0.0)
    v = tl.load(v_cache_ptr + offs, mask=mask, other=0.0)
    if DOT_F32:
        k, v = k.to(tl.float32), v.to(tl.float32)
    return k, v


@triton.jit
def _softmax_step(q, k, v, visible, m, denom, acc, qk_scale):
    """One online-softmax update (base 2) of the running max m, sum denom and output acc with a tile of keys; a row
    that has seen no key yet keeps m = -inf and denom = 0."""
    s = tl.where(visible, tl.dot(q, tl.trans(k), input_precision="ieee") * qk_scale, float("-inf"))
    m_new = tl.maximum(m, tl.max(s, 1))
    m_safe = tl.where(m_new == float("-inf"), 0.0, m_new)  # no NaN from -inf - -inf
    p = tl.exp2(s - m_safe[:, None])
    alpha = tl.exp2(m - m_safe)
    acc = acc * alpha[:, None] + tl.dot(p.to(v.dtype), v, input_precision="ieee")
    return m_new, denom * alpha + tl.sum(p, 1), acc


@triton.jit
def _decode_kernel(q_ptr, k_cache_ptr, v_cache_ptr, tables_ptr, seq_lens_ptr, seqs_ptr, tokens_ptr,
                   acc_ptr, ml_ptr, qk_scale, split_len, window,
                   s_qt, s_qh, s_cb, s_ct, s_ch, s_tab, s_acc_s, s_acc_h, s_ml_s, s_ml_h,
                   BLOCK_SIZE: tl.constexpr, GROUP: tl.constexpr, HEAD_DIM: tl.constexpr,
                   BLOCK_G: tl.constexpr, BLOCK_N: tl.constexpr, BLOCK_D: tl.constexpr, DOT_F32: tl.constexpr):
    """One program per (decode, KV head, split): the GROUP query heads sharing that KV head attend to the
    split's keys [first + split * split_len, +split_len) of the context, whose first visible key is first. Writes
    the unnormalized output and the running max and sum (base 2) for _reduce_kernel."""
    i, kv_head, split = tl.program_id(0), tl.program_id(1), tl.program_id(2)
    seq = tl.load(seqs_ptr + i)
    token = tl.load(tokens_ptr + i)
    seq_len = tl.load(seq_lens_ptr + seq)
    start = tl.maximum(seq_len - window, 0) + split * split_len
    end = tl.minimum(start + split_len, seq_len)
    g = tl.arange(0, BLOCK_G)
    d = tl.arange(0, BLOCK_D)
    heads = kv_head * GROUP + g
    q_mask = (g[:, None] < GROUP) & (d[None, :] < HEAD_DIM)
    q = tl.load(q_ptr + token * s_qt + heads[:, None] * s_qh + d[None, :], mask=q_mask, other=0.0)
    if DOT_F32:
        q = q.to(tl.float32)
    m = tl.full([BLOCK_G], float("-inf"), tl.float32)
    denom = tl.zeros([BLOCK_G], tl.float32)
    acc = tl.zeros([BLOCK_G, BLOCK_D], tl.float32)
    for n in range(start, end, BLOCK_N):
        pos = n + tl.arange(0, BLOCK_N)
        k, v = _kv_tile(k_cache_ptr, v_cache_ptr, tables_ptr + seq * s_tab, pos, end, kv_head, d,
                        s_cb, s_ct, s_ch, BLOCK_SIZE, HEAD_DIM, DOT_F32)
        m, denom, acc = _softmax_step(q, k, v, (pos < end)[None, :], m, denom, acc, qk_scale)
    out_mask = g < GROUP
    tl.store(acc_ptr + i * s_acc_s + heads[:, None] * s_acc_h + split * BLOCK_D + d[None, :], acc,
             mask=out_mask[:, None])
    tl.store(ml_ptr + i * s_ml_s + heads * s_ml_h + split * 2, m, mask=out_mask)
    tl.store(ml_ptr + i * s_ml_s + heads * s_ml_h + split * 2 + 1, denom, mask=out_mask)


@triton.jit
def _reduce_kernel(acc_ptr, ml_ptr, out_ptr, seq_lens_ptr, seqs_ptr, tokens_ptr, split_len, window,
                   s_acc_s, s_acc_h, s_ml_s, s_ml_h, s_ot, s_oh,
                   HEAD_DIM: tl.constexpr, BLOCK_S: tl.constexpr, BLOCK_D: tl.constexpr):
    """One program per (decode, query head): combine the splits that hold keys into the output row."""
    i, head = tl.program_id(0), tl.program_id(1)
    seq_len = tl.load(seq_lens_ptr + tl.load(seqs_ptr + i))
    token = tl.load(tokens_ptr + i)
    s = tl.arange(0, BLOCK_S)
    d = tl.arange(0, BLOCK_D)
    used = s < tl.cdiv(tl.minimum(seq_len, window), split_len)
    ml = ml_ptr + i * s_ml_s + head * s_ml_h + s * 2
    m = tl.load(ml, mask=used, other=float("-inf"))
    denom = tl.load(ml + 1, mask=used, other=0.0)
    acc = tl.load(acc_ptr + i * s_acc_s + head * s_acc_h + s[:, None] * BLOCK_D + d[None, :],
                  mask=used[:, None], other=0.0)
    w = tl.where(used, tl.exp2(m - tl.max(m, 0)), 0.0)
    out = tl.sum(acc * w[:, None], 0) / tl.sum(denom * w, 0)
    tl.store(out_ptr + token * s_ot + head * s_oh + d, out.to(out_ptr.dtype.element_ty), mask=d < HEAD_DIM)


@triton.jit
def _prefill_kernel(q_ptr, k_cache_ptr, v_cache_ptr, out_ptr, tables_ptr, seq_lens_ptr, query_start_ptr,
                    seqs_ptr, qk_scale, window,
                    s_qt, s_qh, s_ot, s_oh, s_cb, s_ct, s_ch, s_tab,
                    BLOCK_SIZE: tl.constexpr, GROUP: tl.constexpr, HEAD_DIM: tl.constexpr,
                    BLOCK_M: tl.constexpr, BLOCK_N: tl.constexpr, BLOCK_D: tl.constexpr, DOT_F32: tl.constexpr):
    """One program per (prefilling sequence, tile of its new tokens, query head). The new tokens sit at
    positions seq_len - query_len .. seq_len - 1 and see the keys of the cached prefix and, causally, each other:
    those within the window up to their own position."""
    seq = tl.load(seqs_ptr + tl.program_id(0))
    tile, head = tl.program_id(1), tl.program_id(2)
    kv_head = head // GROUP
    q_start = tl.load(query_start_ptr + seq)
    q_len = tl.load(query_start_ptr + seq + 1) - q_start
    seq_len = tl.load(seq_lens_ptr + seq)
    rows = tile * BLOCK_M + tl.arange(0, BLOCK_M)
    d = tl.arange(0, BLOCK_D)
    row_mask = rows < q_len
    q_pos = seq_len - q_len + rows
    q_offs = (q_start + rows)[:, None] * s_qt + head * s_qh + d[None, :]
    q_mask = row_mask[:, None] & (d[None, :] < HEAD_DIM)
    q = tl.load(q_ptr + q_offs, mask=q_mask, other=0.0)
    if DOT_F32:
        q = q.to(tl.float32)
    m = tl.full([BLOCK_M], float("-inf"), tl.float32)
    denom = tl.zeros([BLOCK_M], tl.float32)
    acc = tl.zeros([BLOCK_M, BLOCK_D], tl.float32)
    # keys from the window of the tile's first position up to its last position (none for a tile past this
    # sequence's new tokens)
    first = tl.maximum(seq_len - q_len + tile * BLOCK_M - window + 1, 0)
    end = tl.where(tile * BLOCK_M < q_len, tl.minimum(seq_len, seq_len - q_len + (tile + 1) * BLOCK_M), 0)
    for n in range(first, end, BLOCK_N):
        pos = n + tl.arange(0, BLOCK_N)
        k, v = _kv_tile(k_cache_ptr, v_cache_ptr, tables_ptr + seq * s_tab, pos, end, kv_head, d,
                        s_cb, s_ct, s_ch, BLOCK_SIZE, HEAD_DIM, DOT_F32)
        visible = (pos < end)[None, :] & (pos[None, :] <= q_pos[:, None]) & (pos[None, :] > q_pos[:, None] - window)
        m, denom, acc = _softmax_step(q, k, v, visible, m, denom, acc, qk_scale)
    out = acc / tl.maximum(denom, 1.0)[:, None]  # denom >= 1 on a new token's row (its max adds 1), 0 on padding
    out_offs = (q_start + rows)[:, None] * s_ot + head * s_oh + d[None, :]
    tl.store(out_ptr + out_offs, out.to(out_ptr.dtype.element_ty), mask=q_mask)


@triton.jit
def _copy_blocks_kernel(cache_ptr, pairs_ptr, s_part, s_block, BLOCK_ELEMS: tl.constexpr, BLOCK: tl.constexpr):
    """One program per (src -> dst pair, layer and K/V part, chunk of the block)."""
    pair, part, chunk = tl.program_id(0), tl.program_id(1).to(tl.int64), tl.program_id(2)
    src = tl.load(pairs_ptr + pair * 2)
    dst = tl.load(pairs_ptr + pair * 2 + 1)
    offs = chunk * BLOCK + tl.arange(0, BLOCK)
    mask = offs < BLOCK_ELEMS
    base = cache_ptr + part * s_part
    tl.store(base + dst * s_block + offs, tl.load(base + src * s_block + offs, mask=mask), mask=mask)


class TritonPagedAttention:
    """The Triton attention backend: the same three static methods as TorchPagedAttention."""

    @staticmethod
    def store(key: torch.Tensor, value: torch.Tensor, k_cache: torch.Tensor, v_cache: torch.Tensor,
              slot_mapping: torch.Tensor) -> None:
        num_tokens, num_heads, head_dim = key.shape
        if num_tokens == 0:
            return
        _store_kernel[(num_tokens,)](
            key, value, k_cache, v_cache, slot_mapping,
            key.stride(0), key.stride(1), value.stride(0), value.stride(1),
            k_cache.stride(0), k_cache.stride(1), k_cache.stride(2),
            BLOCK_SIZE=k_cache.shape[1], NUM_HEADS=num_heads, HEAD_DIM=head_dim,
            BLOCK_H=triton.next_power_of_2(num_heads), BLOCK_D=triton.next_power_of_2(head_dim))

    @staticmethod
    def attend(query: torch.Tensor, k_cache: torch.Tensor, v_cache: torch.Tensor, meta: AttentionMetadata,
               scale: float, window: int | None = None) -> torch.Tensor:
        """query [num_tokens, num_heads, head_dim] -> [num_tokens, num_heads, head_dim]; window: the layer's sliding
        window (each token sees its last `window` positions), None for the whole context."""
        out = torch.empty_like(query)
        launch = _Launch(query, k_cache, v_cache, meta, out, scale * LOG2E, window or NO_WINDOW)
        if meta.num_decodes:
            launch.decodes()
        if meta.prefill_seqs:
            launch.prefills()
        return out

    @staticmethod
    def copy_blocks(kv_cache: torch.Tensor, copies: list[tuple[int, int]]) -> None:
        """Copy-on-write: give each dst block src's keys and values in every layer, in one launch.
        kv_cache is the whole (contiguous) cache, [num_layers, 2, num_blocks, block_size, num_kv_heads, head_dim]."""
        pairs = torch.tensor(copies, dtype=torch.int64, device=kv_cache.device)
        parts = kv_cache.view(-1, *kv_cache.shape[2:])  # [num_layers * 2, num_blocks, ...]
        block_elems = parts[0, 0].numel()
        grid = (len(copies), parts.shape[0], triton.cdiv(block_elems, COPY_BLOCK))
        _copy_blocks_kernel[grid](parts, pairs, parts.stride(0), parts.stride(1), BLOCK_ELEMS=block_elems,
                                  BLOCK=COPY_BLOCK)


class _Launch:
    """One attend() call's kernel launches: the decodes' split-context kernel and its reduction, then the prefills'."""

    def __init__(self, query: torch.Tensor, k_cache: torch.Tensor, v_cache: torch.Tensor, meta: AttentionMetadata,
                 out: torch.Tensor, scale_log2: float, window: int):
        """scale_log2: the softmax scale in log2 units (the kernels use exp2)."""
        self.query, self.k_cache, self.v_cache, self.meta, self.out = query, k_cache, v_cache, meta, out
        self.scale_log2, self.window = scale_log2, window
        _, self.block_size, self.num_kv_heads, self.head_dim = k_cache.shape
        self.num_heads = query.shape[1]
        self.group = self.num_heads // self.num_kv_heads
        self.block_d = triton.next_power_of_2(self.head_dim)
        self.dot_f32 = query.device.type == "cpu"  # the interpreter's dot cannot multiply bfloat16 (no numpy type)
        self.cache_strides = (k_cache.stride(0), k_cache.stride(1), k_cache.stride(2), meta.block_tables.stride(0))

    def decodes(self) -> None:
        query, meta, out, num_heads = self.query, self.meta, self.out, self.num_heads
        num_decodes = meta.num_decodes
        # split the longest context within the window so that the launch fills the GPU; splits past a shorter context
        # do nothing
        num_tiles = triton.cdiv(min(meta.max_decode_len, self.window), DECODE_BLOCK_N)
        tiles_per_split = triton.cdiv(num_tiles, max(1, DECODE_TARGET_PROGRAMS // (num_decodes * self.num_kv_heads)))
        splits = triton.cdiv(num_tiles, tiles_per_split)
        split_len = tiles_per_split * DECODE_BLOCK_N
        acc = torch.empty(num_decodes, num_heads, splits, self.block_d, dtype=torch.float32, device=query.device)
        ml = torch.empty(num_decodes, num_heads, splits, 2, dtype=torch.float32, device=query.device)
        _decode_kernel[(num_decodes, self.num_kv_heads, splits)](
            query, self.k_cache, self.v_cache, meta.block_tables, meta.seq_lens_tensor, meta.decode_seqs,
            meta.decode_tokens, acc, ml, self.scale_log2, split_len, self.window,
            query.stride(0), query.stride(1), *self.cache_strides, acc.stride(0), acc.stride(1),
            ml.stride(0), ml.stride(1),
            BLOCK_SIZE=self.block_size, GROUP=self.group, HEAD_DIM=self.head_dim,
            BLOCK_G=max(16, triton.next_power_of_2(self.group)), BLOCK_N=DECODE_BLOCK_N, BLOCK_D=self.block_d,
            DOT_F32=self.dot_f32)
        _reduce_kernel[(num_decodes, num_heads)](
            acc, ml, out, meta.seq_lens_tensor, meta.decode_seqs, meta.decode_tokens, split_len, self.window,
            acc.stride(0), acc.stride(1), ml.stride(0), ml.stride(1), out.stride(0), out.stride(1),
            HEAD_DIM=self.head_dim, BLOCK_S=triton.next_power_of_2(splits), BLOCK_D=self.block_d)

    def prefills(self) -> None:
        query, meta, out = self.query, self.meta, self.out
        starts = meta.query_start_loc
        max_query_len = max(starts[i + 1] - starts[i] for i in meta.prefill_seqs)
        grid = (len(meta.prefill_seqs), triton.cdiv(max_query_len, PREFILL_BLOCK_M), self.num_heads)
        _prefill_kernel[grid](
            query, self.k_cache, self.v_cache, out, meta.block_tables, meta.seq_lens_tensor,
            meta.query_start_loc_tensor, meta.prefill_seqs_tensor, self.scale_log2, self.window,
            query.stride(0), query.stride(1), out.stride(0), out.stride(1), *self.cache_strides,
            BLOCK_SIZE=self.block_size, GROUP=self.group, HEAD_DIM=self.head_dim,
            BLOCK_M=PREFILL_BLOCK_M, BLOCK_N=PREFILL_BLOCK_N, BLOCK_D=self.block_d, DOT_F32=self.dot_f32)
