"""Paged attention in PyTorch: the engine's CPU path and the reference for the GPU kernels.

The cache of one layer is two tensors [num_blocks, block_size, num_kv_heads, head_dim], in the cache's own dtype
(bfloat16 under packed weights), read back as the queries' dtype (exactly: bfloat16 widens to float32 without
rounding). A step's tokens come as one flat batch; each sequence's keys and values are read through its block
table."""

import functools
from dataclasses import dataclass, field

import torch

from localchat.engine.worker import native_kernels

NO_BLOCK = -1  # a block-table entry whose block was freed: out of every layer's sliding window


@dataclass
class KeySpan:
    """The keys (or values) in the blocks that one sequence's new tokens see in a layer's cache: `num_keys` of them
    (whole blocks, up to the last one in use) from the start of `blocks`, the first at position `first_position`.
    Consecutive blocks are a slice of the cache, read in place; others are gathered. A layer with window w lets the
    token at position q see the keys at positions q - w < p <= q (transformers' convention); window None: p <= q."""

    blocks: slice | torch.Tensor
    first_position: int
    num_keys: int

    def read(self, cache: torch.Tensor, dtype: torch.dtype) -> torch.Tensor:
        """[kv_heads, num_keys, head_dim] of cache [num_blocks, block_size, kv_heads, head_dim], as `dtype`; the
        same layout in place or gathered."""
        kv_heads, head_dim = cache.shape[2:]
        # index_select, not cache[blocks]: advanced indexing into the big cache is ~1000x slower on CPU
        chunk = cache[self.blocks] if isinstance(self.blocks, slice) else cache.index_select(0, self.blocks)
        return chunk.view(-1, kv_heads, head_dim)[: self.num_keys].transpose(0, 1).to(dtype)


@dataclass
class Tile:
    """The new tokens of one sequence in one cache block, attended in one call: the step's rows
    [start, start + n), over keys [lo, hi) of the sequence's KeySpan. bias [rows, hi - lo] is 0 where a query head
    (a row: each token's group of heads, then copies of the last row) may see a key, -inf where it may not."""

    start: int
    n: int
    lo: int
    hi: int
    bias: torch.Tensor


@dataclass
class DecodeGroup:
    """Decoding sequences (one new token each) whose tiles span the same number of keys, attended in one batched
    call: `rows` [B] their token rows in the step, `blocks` [B * blocks each] their key blocks, gathered, and
    `bias` [B * kv_heads, tile rows, keys]: each sequence's tile bias, once per KV head. Each sequence's products
    run on exactly the shapes of its own tile (see _grouping_is_exact), so its bits are those of attending it
    alone."""

    rows: torch.Tensor
    blocks: torch.Tensor
    bias: torch.Tensor

    def attend(self, query: torch.Tensor, k_cache: torch.Tensor, v_cache: torch.Tensor, out: torch.Tensor,
               scale: float) -> None:
        kv_heads, head_dim = k_cache.shape[2:]
        seqs, (rows, num_keys) = len(self.rows), self.bias.shape[1:]
        group = query.shape[1] // kv_heads
        q = _padded(query.index_select(0, self.rows).view(seqs * kv_heads, group, head_dim), rows)

        def gather(cache: torch.Tensor) -> torch.Tensor:  # [seqs * kv_heads, num_keys, head_dim], contiguous
            keys = cache.index_select(0, self.blocks).view(seqs, num_keys, kv_heads, head_dim)
            return keys.transpose(1, 2).reshape(seqs * kv_heads, num_keys, head_dim).to(query.dtype)

        result = _tile_attention(self.bias, q, gather(k_cache), gather(v_cache), scale)[:, :group]
        out.index_copy_(0, self.rows, result.reshape(seqs, kv_heads * group, head_dim))


@dataclass
class AttentionMetadata:
    """Where a step's tokens go in the cache and what each sequence attends to (shared by all layers)."""

    positions: torch.Tensor  # [num_tokens] position of each new token in its sequence
    token_seqs: torch.Tensor  # [num_tokens] the sequence of each new token
    slot_mapping: torch.Tensor  # [num_tokens] cache slot of each new token
    query_lens: list[int]  # [num_seqs] new tokens of each sequence
    query_start_loc: list[int]  # [num_seqs + 1] where each sequence's new tokens start in the batch
    seq_lens: list[int]  # [num_seqs] context length of each sequence after this step
    tables: list[list[int]]  # [num_seqs] block table of each sequence (NO_BLOCK where a block was freed)
    block_size: int
    block_tables: torch.Tensor  # [num_seqs, max_blocks] int64, padded with 0 (and 0 for NO_BLOCK)
    query_start_loc_tensor: torch.Tensor  # the same as tensors on the device, for kernels
    seq_lens_tensor: torch.Tensor
    # the sequences with one new token (decodes), which the Triton kernels attend in one launch
    decode_seqs: torch.Tensor  # [num_decodes] their indices among the sequences
    decode_tokens: torch.Tensor  # [num_decodes] their token rows in the batch
    max_decode_len: int  # the longest decode context (0 without decodes)
    prefill_seqs: list[int]  # the other sequences, attended one by one
    prefill_seqs_tensor: torch.Tensor  # the same on the device, for kernels
    views: dict[int | None, list[KeySpan]] = field(default_factory=dict)  # built on first use, by window
    tile_sets: dict[tuple, list[list[Tile]]] = field(default_factory=dict)  # by window, group, head_dim, dtype
    # by window, kv_heads, group, head_dim, dtype: the decode groups and the sequences attended one by one
    group_sets: dict[tuple, tuple[list[DecodeGroup], list[int]]] = field(default_factory=dict)

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
            token_seqs=torch.tensor([i for i, n in enumerate(query_lens) for _ in range(n)], dtype=torch.int64,
                                    device=device),
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
            prefill_seqs=prefills,
            prefill_seqs_tensor=torch.tensor(prefills, dtype=torch.int64, device=device),
        )

    @property
    def num_decodes(self) -> int:
        return len(self.decode_seqs)

    def view(self, window: int | None) -> list[KeySpan]:
        """The keys each sequence's new tokens see in the layers with this window (built once per step and
        window, shared by those layers)."""
        if window not in self.views:
            self.views[window] = [self._span(i, window) for i in range(len(self.query_lens))]
        return self.views[window]

    def tiles(self, window: int | None, group: int, head_dim: int, dtype: torch.dtype) -> list[list[Tile]]:
        """Each sequence's tiles in the layers with this window, query group and head shape (built once per step,
        shared by those layers): one per cache block its new tokens fill, over the keys of the whole blocks from
        the first that any position of the block can see to the block itself, with at least as many rows as
        _fewest_invariant_rows measures."""
        key = (window, group, head_dim, dtype)
        if key not in self.tile_sets:
            fewest_rows = _fewest_invariant_rows(head_dim, dtype, self.positions.device)
            self.tile_sets[key] = [self._tiles(i, span, window, group, fewest_rows, dtype)
                                   for i, span in enumerate(self.view(window))]
        return self.tile_sets[key]

    def decode_groups(self, window: int | None, kv_heads: int, group: int, head_dim: int, dtype: torch.dtype
                      ) -> tuple[list[DecodeGroup], list[int]]:
        """The step's decoding sequences grouped by the keys their tiles span (built once per step, shared by the
        layers alike), and the sequences left to attend one by one: the prefills, a decode alone in its group,
        and all of them where grouping would change a bit on this machine (_grouping_is_exact)."""
        key = (window, kv_heads, group, head_dim, dtype)
        if key not in self.group_sets:
            tile_sets = self.tiles(window, group, head_dim, dtype)
            decodes = self.decode_seqs.tolist()
            by_keys: dict[int, list[int]] = {}
            if len(decodes) > 1 and _grouping_is_exact(head_dim, tile_sets[decodes[0]][0].bias.shape[0], dtype,
                                                       self.positions.device):
                for i in decodes:  # one tile each, over the whole span, with the same number of rows
                    by_keys.setdefault(tile_sets[i][0].hi - tile_sets[i][0].lo, []).append(i)
            groups, grouped = [], set()
            for seqs in by_keys.values():
                if len(seqs) < 2:
                    continue
                grouped.update(seqs)
                tables = [self._span_table(i, window)[1] for i in seqs]
                groups.append(DecodeGroup(
                    rows=torch.tensor([self.query_start_loc[i] for i in seqs], device=self.positions.device),
                    blocks=torch.tensor([b for table in tables for b in table], device=self.positions.device),
                    bias=torch.stack([tile_sets[i][0].bias for i in seqs]).repeat_interleave(kv_heads, dim=0)))
            self.group_sets[key] = groups, [i for i in range(len(self.query_lens)) if i not in grouped]
        return self.group_sets[key]

    def _tiles(self, seq: int, span: KeySpan, window: int | None, group: int, fewest_rows: int,
               dtype: torch.dtype) -> list[Tile]:
        bs, tiles = self.block_size, []
        row, end = self.query_start_loc[seq], self.query_start_loc[seq + 1]
        position = self.seq_lens[seq] - (end - row)  # of the sequence's first new token
        while row < end:
            block = position // bs
            n = min(end - row, (block + 1) * bs - position)
            first_key = _first_key(block * bs, window) // bs * bs
            key_pos = torch.arange(first_key, (block + 1) * bs)
            query_pos = torch.arange(position, position + n).repeat_interleave(group)
            query_pos = torch.cat([query_pos, query_pos[-1:].expand(max(0, fewest_rows - len(query_pos)))])
            visible = key_pos[None, :] <= query_pos[:, None]
            if window is not None:
                visible &= key_pos[None, :] > query_pos[:, None] - window
            bias = torch.zeros(visible.shape, dtype=dtype).masked_fill_(~visible, float("-inf"))
            bias = bias.to(self.positions.device)
            tiles.append(Tile(row, n, first_key - span.first_position, (block + 1) * bs - span.first_position, bias))
            row, position = row + n, position + n
        return tiles

    def _span(self, seq: int, window: int | None) -> KeySpan:
        first_block, table = self._span_table(seq, window)
        blocks = (slice(table[0], table[-1] + 1) if _consecutive(table)
                  else torch.tensor(table, dtype=torch.int64, device=self.positions.device))
        return KeySpan(blocks, first_block * self.block_size, len(table) * self.block_size)

    def _span_table(self, seq: int, window: int | None) -> tuple[int, list[int]]:
        """The first block that the sequence's first new token's block sees, and the blocks from it on."""
        new, context, bs = self.query_lens[seq], self.seq_lens[seq], self.block_size
        first_block = _first_key((context - new) // bs * bs, window) // bs
        return first_block, self.tables[seq][first_block : -(-context // bs)]


def _padded(q: torch.Tensor, rows: int) -> torch.Tensor:
    """q [batch, n, head_dim] with its last row repeated up to `rows` rows (a tile's row count)."""
    if rows == q.shape[1]:
        return q
    return torch.cat([q, q[:, -1:].expand(q.shape[0], rows - q.shape[1], q.shape[2])], dim=1)


def _tile_attention(bias: torch.Tensor, q: torch.Tensor, keys: torch.Tensor, values: torch.Tensor,
                    scale: float) -> torch.Tensor:
    """softmax(scale q kᵀ + bias) v for a batch of tiles: q [batch, rows, head_dim], keys and values
    [batch, num_keys, head_dim], bias [rows, num_keys] or [batch, rows, num_keys]. Every tile goes through these
    two products, so a token's bits depend on its tile's shape alone."""
    scores = torch.baddbmm(bias, q, keys.transpose(1, 2), alpha=scale)
    return torch.bmm(torch.softmax(scores, dim=-1), values)


@functools.cache
def _grouping_is_exact(head_dim: int, rows: int, dtype: torch.dtype, device: torch.device) -> bool:
    """Whether attending decodes as a DecodeGroup (contiguous gathered keys, one batched call) gives the bits of
    attending each alone (keys read in place, strided, broadcast bias), for key counts of 1 to 128 blocks. BLAS may
    choose its kernels by strides or batch size; this is measured once per process, and grouping is off where a
    bit differs."""
    gen = torch.Generator().manual_seed(0)
    kv_heads, seqs = 2, 3
    for num_keys in (16, 48, 304, 1024, 2048):
        q = torch.randn(seqs, kv_heads, rows, head_dim, generator=gen).to(device, dtype)
        cache = torch.randn(seqs, num_keys, kv_heads, head_dim, generator=gen).to(device, dtype)
        bias = torch.zeros(seqs, rows, num_keys, dtype=dtype, device=device)
        bias[:, :, -3:] = float("-inf")
        alone = [_tile_attention(bias[i], q[i], cache[i].transpose(0, 1), cache[i].transpose(0, 1), 0.125)
                 for i in range(seqs)]
        keys = cache.transpose(1, 2).reshape(seqs * kv_heads, num_keys, head_dim)
        grouped = _tile_attention(bias.repeat_interleave(kv_heads, dim=0), q.reshape(seqs * kv_heads, rows, head_dim),
                                  keys, keys, 0.125).view(seqs, kv_heads, rows, head_dim)
        if not all(torch.equal(a, g) for a, g in zip(alone, grouped)):
            return False
    return True


@functools.cache
def _fewest_invariant_rows(head_dim: int, dtype: torch.dtype, device: torch.device, most: int = 128) -> int:
    """The fewest rows from which each row of _tile_attention has the same bits as in a tile of `most` rows, for
    the batches (KV heads) and key counts the model meets, keys read in place from the cache (strided, as `alone`
    reads them) or gathered (contiguous, as a DecodeGroup does). BLAS runs a few rows through other kernels than
    many, and which depends on the machine (from four rows on, float32 on an AVX2 CPU; from three, keys read as a
    transposed view, on an AMX Xeon), so this is measured, once per process and dtype."""
    gen = torch.Generator().manual_seed(0)
    fewest = 1
    for batch, num_keys in ((1, 16), (2, 48), (4, 304), (1, 1024), (8, 80)):
        q = torch.randn(batch, most, head_dim, generator=gen).to(device, dtype)
        cache = torch.randn(num_keys, batch, head_dim, generator=gen).to(device, dtype)
        bias = torch.zeros(most, num_keys, dtype=dtype, device=device)
        bias[:, -3:] = float("-inf")
        for keys in (cache.transpose(0, 1), cache.transpose(0, 1).contiguous()):
            full = _tile_attention(bias, q, keys, keys, 0.125)
            for rows in range(most - 1, fewest - 1, -1):
                if not torch.equal(_tile_attention(bias[:rows], q[:, :rows], keys, keys, 0.125), full[:, :rows]):
                    fewest = rows + 1
                    break
    return fewest


def _first_key(position: int, window: int | None) -> int:
    """The first key that a token at this position sees."""
    return 0 if window is None else max(0, position - window + 1)


def _consecutive(table: list[int]) -> bool:
    return table[0] >= 0 and table[-1] - table[0] == len(table) - 1 and table == list(range(table[0], table[-1] + 1))


class TorchPagedAttention:
    """Stores new K/V into their slots, then gathers each sequence's blocks and runs SDPA over them.

    An attention backend is a class with these three static methods; get_backend picks one."""

    @staticmethod
    def store(key: torch.Tensor, value: torch.Tensor, k_cache: torch.Tensor, v_cache: torch.Tensor,
              slot_mapping: torch.Tensor) -> None:
        k_cache.view(-1, *k_cache.shape[2:]).index_copy_(0, slot_mapping, key.to(k_cache.dtype))
        v_cache.view(-1, *v_cache.shape[2:]).index_copy_(0, slot_mapping, value.to(v_cache.dtype))

    @staticmethod
    def attend(query: torch.Tensor, k_cache: torch.Tensor, v_cache: torch.Tensor, meta: AttentionMetadata,
               scale: float, window: int | None = None) -> torch.Tensor:
        """query [num_tokens, num_heads, head_dim] -> [num_tokens, num_heads, head_dim]; window: the layer's sliding
        window (each token sees its last `window` positions), None for the whole context.

        Batch invariance: a token's result depends on nothing but its query and the keys and values it sees, not
        on the other tokens of the step, nor on whether it is decoded, prefilled whole or in chunks, or recomputed
        after a preemption. CPU kernels round differently for different shapes (a softmax or a product over a
        different number of keys, a matrix product of one row), so the shapes are fixed by the cache's blocks:
        the new tokens of one block are one tile, whose query heads (as rows, enough of them) meet the keys of
        whole blocks, from the first block any position of that block can see to the block itself; keys past
        a token or out of its window are masked. A seeded request then gives the same tokens cold or cached,
        alone or batched."""
        kv_heads, head_dim = k_cache.shape[2:]
        group = query.shape[1] // kv_heads
        tile_sets = meta.tiles(window, group, head_dim, query.dtype)
        groups, alone = meta.decode_groups(window, kv_heads, group, head_dim, query.dtype)
        out = torch.empty_like(query)
        for decode_group in groups:
            decode_group.attend(query, k_cache, v_cache, out, scale)
        spans = meta.view(window)
        for i in alone:
            keys, values = spans[i].read(k_cache, query.dtype), spans[i].read(v_cache, query.dtype)
            for t in tile_sets[i]:
                q = query[t.start : t.start + t.n].view(t.n, kv_heads, group, head_dim).transpose(0, 1)
                q = _padded(q.reshape(kv_heads, t.n * group, head_dim), t.bias.shape[0])
                result = _tile_attention(t.bias, q, keys[:, t.lo : t.hi], values[:, t.lo : t.hi], scale)
                result = result[:, : t.n * group]
                out[t.start : t.start + t.n].view(t.n, kv_heads, group, head_dim).copy_(
                    result.view(kv_heads, t.n, group, head_dim).transpose(0, 1))
        return out

    @staticmethod
    def copy_blocks(kv_cache: torch.Tensor, copies: list[tuple[int, int]]) -> None:
        """Copy-on-write: give each dst block src's keys and values in every layer.
        kv_cache is the whole cache, [num_layers, 2, num_blocks, block_size, num_kv_heads, head_dim]."""
        src = torch.tensor([s for s, _ in copies], device=kv_cache.device)
        dst = torch.tensor([d for _, d in copies], device=kv_cache.device)
        kv_cache[:, :, dst] = kv_cache[:, :, src]


class NativePagedAttention(TorchPagedAttention):
    """The CPU's paged attention in C (native/paged_attention.c): every token and KV head computed alone, its keys
    and values read in place through the block table, in one fixed order; a token's bits depend only on what it
    attends, by construction. For what native_kernels.attends takes (get_backend checks it once per model)."""

    @staticmethod
    def attend(query: torch.Tensor, k_cache: torch.Tensor, v_cache: torch.Tensor, meta: AttentionMetadata,
               scale: float, window: int | None = None) -> torch.Tensor:
        return native_kernels.load().attend(query, k_cache, v_cache, meta.block_tables, meta.token_seqs,
                                            meta.positions, window, scale)


def get_backend(name: str | None, device: torch.device, dtype: torch.dtype, kv_dtype: torch.dtype, head_dim: int):
    """The attention backend for a model's queries (dtype), cache (kv_dtype) and heads: "native" (the CPU's kernel,
    where native_kernels load and take these), "torch" (the PyTorch path, the fallback and the reference) or
    "triton" (paged kernels for NVIDIA GPUs); None picks triton on CUDA, native where it can run and torch
    elsewhere."""
    native = (device.type == "cpu" and native_kernels.load() is not None
              and native_kernels.attends(dtype, kv_dtype, head_dim))
    if name is None:
        name = "triton" if device.type == "cuda" else "native" if native else "torch"
    if name == "torch":
        return TorchPagedAttention
    if name == "native":
        if not native:
            raise ValueError(f"the native attention cannot run {dtype} queries over a {kv_dtype} cache with heads "
                             f"of {head_dim} on {device} here")
        return NativePagedAttention
    if name == "triton":
        from localchat.engine.worker.triton_attention import TritonPagedAttention

        return TritonPagedAttention
    raise ValueError(f"unknown attention backend {name!r}; use 'native', 'torch' or 'triton'")
