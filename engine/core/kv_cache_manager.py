"""Which KV blocks each sequence owns: prefix hits on admission (in memory, then on disk, then a kept partial
block), slots for new tokens with copy-on-write, forks that share every block, and tail-first freeing. Also which
chats' blocks are pinned (kept warm, within a budget), and where a chat's history is (held())."""

from bisect import bisect_left
from collections.abc import Callable
from collections.abc import Sequence as TokenIds
from dataclasses import dataclass, field

import torch

from localchat.engine.core.block_pool import BlockPool, hash_chain
from localchat.engine.core.kv_disk_tier import KVDiskTier
from localchat.engine.core.sequence import Sequence
from localchat.engine.stats import KVCacheUsage, PinUsage

# The share of the KV cache's blocks that pinned chats may keep (pins beyond it are refused): the rest stays for the
# chats being written and the LRU of every other one
PIN_SHARE_OF_CACHE = 0.5


class PinRefused(ValueError):
    """A pin that would take more than the pin budget."""


@dataclass(frozen=True)
class Pin:
    """What one key's pin holds: full blocks' hashes, and the kept partial block after `partial_after` (the hash of
    the last full block, or the root hash; None when the tokens end on a block's edge)."""

    hashes: tuple[bytes, ...]
    partial_after: bytes | None

    @property
    def num_blocks(self) -> int:
        return len(self.hashes) + (self.partial_after is not None)


@dataclass
class PrefixHit:
    """What a sequence finds of its tokens on admission: full blocks in memory (hash, block id), then more full
    blocks on disk (their hashes), or else the first `partial_tokens` tokens of a kept partial block (its id). The
    last token is never among them: it must be computed to give logits. The KV cache manager writes it (and lowers
    num_tokens where a block on disk fails its check as it is read)."""

    cached: list[tuple[bytes, int]] = field(default_factory=list)
    on_disk: list[bytes] = field(default_factory=list)
    partial: int | None = None
    partial_tokens: int = 0
    num_tokens: int = 0  # the sequence's tokens these hold


@dataclass(frozen=True)
class KVCacheConfig:
    """The KV cache a scheduler manages: its blocks, their size, whether prefixes are found by hash, the model
    fingerprint their hashes start from, and a disk tier that keeps full blocks across restarts (prefix caching
    only), with read_block(block_id) giving a copy of a block's K and V to write and block_view(block_id) the cache
    memory to read one into."""

    num_blocks: int
    block_size: int
    enable_prefix_caching: bool = True
    fingerprint: str = ""
    disk: KVDiskTier | None = None
    read_block: Callable[[int], torch.Tensor] | None = None
    block_view: Callable[[int], torch.Tensor] | None = None


class KVCacheManager:
    def __init__(self, config: KVCacheConfig):
        self.block_size = config.block_size
        self.enable_prefix_caching = config.enable_prefix_caching
        self.disk = config.disk if config.enable_prefix_caching else None
        self.read_block, self.block_view = config.read_block, config.block_view
        self.pool = BlockPool(config.num_blocks, config.fingerprint,
                              self._save_block if self.disk is not None else None)
        self.pending_copies: list[tuple[int, int]] = []  # (src, dst) blocks to copy before the next forward
        self.copied_partials: list[int] = []  # kept partial blocks held until their copies are handed out
        self.pins: dict[str, Pin] = {}  # by key (a chat)
        self.pin_limit = int(config.num_blocks * PIN_SHARE_OF_CACHE)  # blocks

    def reset(self) -> None:
        """Every block free and new, nothing cached or pending: after a failed step (no sequence holds a block then;
        whatever the step left half done is forgotten)."""
        self.pool.reset()
        self.pending_copies.clear()
        self.copied_partials.clear()

    def num_blocks_for(self, num_tokens: int) -> int:
        return -(-num_tokens // self.block_size)

    def hash_blocks(self, seq: Sequence) -> None:
        """Hash seq's blocks whose tokens are all known, once each: the prompt's when it is added, an output
        block when its last token is appended. A block's hash chains every token before it."""
        if not self.enable_prefix_caching:
            return
        bs, done = self.block_size, len(seq.block_hashes)
        parent = seq.block_hashes[-1] if seq.block_hashes else self.pool.root_hash
        seq.block_hashes.extend(hash_chain(parent, seq.token_ids[done * bs : len(seq) // bs * bs], bs))

    @property
    def disk_seconds_per_block(self) -> float | None:
        """A block's read from the disk tier, as measured (None: no tier, or nothing read yet)."""
        return self.disk.seconds_per_block if self.disk is not None else None

    def usage(self) -> KVCacheUsage:
        pool = self.pool
        return KVCacheUsage(pool.num_blocks, pool.num_used, pool.num_cached, pool.num_free, self.block_size)

    def forget_cached(self) -> None:
        """Forget every cached prefix in memory (blocks in use keep their contents; the disk tier keeps its own)."""
        self.pool.reset_cache()

    def find_prefix(self, seq: Sequence) -> PrefixHit:
        """The longest run of seq's tokens held already: cached full blocks, then full blocks on disk, or else part
        of a kept partial block."""
        cached = self._cached_prefix(seq)
        on_disk = self._disk_prefix(seq, len(cached))
        partial, partial_tokens = (None, 0) if on_disk else self._partial(seq, len(cached))
        return PrefixHit(cached, on_disk, partial, partial_tokens,
                         (len(cached) + len(on_disk)) * self.block_size + partial_tokens)

    def _cached_prefix(self, seq: Sequence) -> list[tuple[bytes, int]]:
        """(hash, block id) of the longest run of cached full blocks that starts seq's tokens.

        Never the whole sequence: its last token must be computed to give logits."""
        found, bs = [], self.block_size
        for i, block_hash in enumerate(seq.block_hashes[: (len(seq) - 1) // bs]):
            block_id = self.pool.lookup(block_hash, seq.token_ids[i * bs : (i + 1) * bs])
            if block_id is None:
                break
            found.append((block_hash, block_id))
        return found

    def _disk_prefix(self, seq: Sequence, start: int) -> list[bytes]:
        """The hashes of the longest run of seq's full blocks from block `start` on that the disk tier holds; never
        the block of seq's last token."""
        if self.disk is None:
            return []
        found = []
        for block_hash in seq.block_hashes[start : (len(seq) - 1) // self.block_size]:
            if not self.disk.contains(block_hash):
                break
            found.append(block_hash)
        return found

    def _partial(self, seq: Sequence, start: int) -> tuple[int | None, int]:
        """A kept partial block (BlockPool.keep_partial) after seq's first `start` full blocks, and how many of
        seq's next tokens it holds (never seq's last token); (None, 0) if none."""
        if not self.enable_prefix_caching:
            return None, 0
        bs = self.block_size
        return self._partial_after(seq.block_hashes[start - 1] if start else self.pool.root_hash,
                                   seq.token_ids[start * bs : min((start + 1) * bs, len(seq) - 1)])

    def _partial_after(self, parent_hash: bytes, wanted: TokenIds[int]) -> tuple[int | None, int]:
        """The kept partial block after the full block parent_hash, and how many of the `wanted` tokens it holds from
        their first; (None, 0) if none."""
        partial = self.pool.lookup_partial(parent_hash)
        if partial is None:
            return None, 0
        kept = self.pool.partial_tokens(partial)
        held = next((i for i, (a, b) in enumerate(zip(kept, wanted)) if a != b), min(len(kept), len(wanted)))
        return (partial, held) if held else (None, 0)

    def held(self, hashes: TokenIds[bytes], token_ids: TokenIds[int]) -> tuple[int, int]:
        """Of token_ids (whose full blocks' chained hashes are `hashes`), how many tokens a request that continues them
        would find in memory and then read from disk, as find_prefix() finds them: (resident, on disk). Safe to call
        from another thread than the engine's, as an estimate: the pool is read, never changed.

        A chat's blocks are evicted tail first (freed last block first, and a prefix is shared by every chat that
        holds a block after it), and the disk tier drops a chain tail first too (save()), so what each tier holds of
        a chain is a prefix of it: found by bisection, a few lookups for any length."""
        if not self.enable_prefix_caching:
            return 0, 0
        bs = self.block_size
        resident = bisect_left(range(len(hashes)), True, key=lambda i: self.pool.lookup(
            hashes[i], token_ids[i * bs : (i + 1) * bs]) is None)
        on_disk = 0
        if self.disk is not None:
            rest = range(resident, len(hashes))
            on_disk = bisect_left(rest, True, key=lambda i: not self.disk.contains(hashes[i]))
        partial = 0 if on_disk else self._partial_after(hashes[resident - 1] if resident else self.pool.root_hash,
                                                        token_ids[resident * bs : (resident + 1) * bs])[1]
        return resident * bs + partial, on_disk * bs

    def chain(self, token_ids: TokenIds[int], start: TokenIds[bytes] = ()) -> list[bytes]:
        """The chained hashes of token_ids' full blocks, the first len(start) of them given (already hashed)."""
        bs, done = self.block_size, len(start)
        parent = start[-1] if start else self.pool.root_hash
        return [*start, *hash_chain(parent, token_ids[done * bs : len(token_ids) // bs * bs], bs)]

    # --- pins ---

    def pin(self, key: str, hashes: TokenIds[bytes], token_ids: TokenIds[int]) -> None:
        """Keep the blocks of token_ids (their full blocks' hashes, then their partial last block) warm under `key`,
        in place of the key's earlier pin: they are evicted last, and blocks of them on disk are read back into memory
        now, while unpinned blocks are free to take. PinRefused, changing nothing, where the pins would then hold more
        than the budget."""
        new = Pin(tuple(hashes), (hashes[-1] if hashes else self.pool.root_hash)
                  if len(token_ids) % self.block_size else None)
        old = self.pins.get(key, Pin((), None))
        needed = self.pool.num_pinned_after(old.hashes, old.partial_after, new.hashes, new.partial_after)
        if needed > self.pin_limit:
            raise PinRefused(f"pinning this chat needs {new.num_blocks * self.block_size:,} tokens of the pin budget, "
                             f"and pins would then hold {needed * self.block_size:,} tokens: more than the "
                             f"{self.pin_limit * self.block_size:,} the budget allows ({PIN_SHARE_OF_CACHE:.0%} of "
                             "the KV cache); unpin another chat first")
        self.pool.pin(new.hashes, new.partial_after)
        self.pool.unpin(old.hashes, old.partial_after)
        self.pins[key] = new
        self._prefetch(hashes, token_ids)

    def unpin(self, key: str) -> bool:
        """Take back the key's pin: its blocks go back to the LRU as the most recently used. False if it had none."""
        old = self.pins.pop(key, None)
        if old is not None:
            self.pool.unpin(old.hashes, old.partial_after)
        return old is not None

    def pin_usage(self, block_bytes: int) -> PinUsage:
        """The pins' share of the cache and its budget (block_bytes: the memory of one block)."""
        return PinUsage(self.pool.num_pinned, self.pin_limit, self.block_size, block_bytes)

    def _prefetch(self, hashes: TokenIds[bytes], token_ids: TokenIds[int]) -> None:
        """Read the blocks of a chat that are on disk but not in memory back into free unpinned blocks, made findable
        and released into the pinned queue (a pinned chat warm again after a restart)."""
        if self.disk is None or self.block_view is None:
            return
        bs = self.block_size
        resident, on_disk = self.held(hashes, token_ids)
        first = resident // bs
        count = min(on_disk // bs, self.pool.num_unpinned_free)
        if count <= 0:
            return
        blocks = [self.pool.allocate() for _ in range(count)]
        tokens = [token_ids[i * bs : (i + 1) * bs] for i in range(first, first + count)]
        self._read(list(hashes[first : first + count]), tokens, blocks)
        for block_id in reversed(blocks):  # tail first: the head is the last to go, as after a reply
            self.pool.release(block_id)

    def allocate_slots(self, seq: Sequence, num_new_tokens: int, hit: PrefixHit | None = None) -> bool:
        """Make room for seq's next num_new_tokens tokens after its computed ones (and, on admission, after what
        `hit` holds: its cached blocks are shared, its blocks on disk read into new blocks now (where a file fails
        its check, the tokens from that block on are computed instead, and hit.num_tokens says so), or its partial
        block's tokens copied into seq's next block). A shared last block is copied before it is written. False,
        changing nothing, if the pool has too few free blocks. (The scheduler counts the hit's tokens computed.)"""
        hit = hit or PrefixHit()
        cached_prefix, on_disk, partial, partial_tokens = hit.cached, hit.on_disk, hit.partial, hit.partial_tokens
        bs = self.block_size
        num_computed = seq.num_computed_tokens + (len(cached_prefix) + len(on_disk)) * bs + partial_tokens
        num_table_blocks = len(seq.block_table) + len(cached_prefix)
        num_new_blocks = self.num_blocks_for(num_computed + num_new_tokens) - num_table_blocks
        copy_last = (partial is None and num_computed % bs != 0
                     and self.pool.ref_count(seq.block_table[-1]) > 1)  # seq's own partial last block
        revived = sum(1 for _, block_id in cached_prefix if self.pool.ref_count(block_id) == 0)
        revived += partial is not None and self.pool.ref_count(partial) == 0
        if num_new_blocks + copy_last + revived > self.pool.num_free:
            return False
        for _, block_id in cached_prefix:
            self.pool.share(block_id)
            seq.block_table.append(block_id)
        if partial is not None:  # held (out of the free queue) until its copy is handed out with the step
            self.pool.share(partial)
            self.copied_partials.append(partial)
        if copy_last:
            shared = seq.block_table[-1]
            seq.block_table[-1] = self.pool.allocate()
            self.pending_copies.append((shared, seq.block_table[-1]))
            self.pool.release(shared)
        new_blocks = [self.pool.allocate() for _ in range(num_new_blocks)]
        if on_disk:
            hit.num_tokens -= (len(on_disk) - self._load(seq, on_disk, new_blocks)) * bs
        if partial is not None:
            self.pending_copies.append((partial, new_blocks[0]))
        seq.block_table.extend(new_blocks)
        return True

    def _load(self, seq: Sequence, on_disk: list[bytes], blocks: list[int]) -> int:
        """Read seq's next blocks from disk into `blocks` (the first len(on_disk) of them) and make them findable; how
        many were read (from the first that fails on, seq's tokens are left to compute)."""
        bs, first = self.block_size, len(seq.block_table)
        tokens = [seq.token_ids[i * bs : (i + 1) * bs] for i in range(first, first + len(on_disk))]
        return self._read(on_disk, tokens, blocks)

    def _read(self, hashes: list[bytes], tokens: list[TokenIds[int]], blocks: list[int]) -> int:
        """Read these blocks from disk into `blocks` and make them findable; how many were read, from the first."""
        num_read = self.disk.read_into([(block_hash, ids, self.block_view(block_id))
                                        for block_hash, ids, block_id in zip(hashes, tokens, blocks)])
        self.pool.filled(set(blocks[:num_read]))
        for block_hash, ids, block_id in zip(hashes[:num_read], tokens, blocks):
            self.pool.register(block_id, block_hash, ids)
        return num_read

    def cache_computed(self, seq: Sequence, before: int) -> None:
        """seq's tokens from `before` to its computed ones are now in the cache: make the blocks they filled findable
        by their hashes."""
        if self.enable_prefix_caching:
            bs = self.block_size
            for i in range(before // bs, seq.num_computed_tokens // bs):
                self.pool.register(seq.block_table[i], seq.block_hashes[i], seq.token_ids[i * bs : (i + 1) * bs])

    def trim(self, seq: Sequence) -> None:
        """Release seq's blocks past those its computed tokens fill (what held a draft's rejected tokens), last
        first."""
        keep = self.num_blocks_for(seq.num_computed_tokens)
        while len(seq.block_table) > keep:
            self.pool.release(seq.block_table.pop())

    def save(self, seq: Sequence) -> None:
        """Write seq's computed full blocks that the disk tier lacks, behind (a finished reply's), tail first: the
        tier's LRU then holds every block of the chat as used now, its head the most recently (it drops a chain tail
        first, as the pool does)."""
        if self.disk is None:
            return
        bs = self.block_size
        for i in reversed(range(seq.num_computed_tokens // bs)):
            self._save_block(seq.block_hashes[i], seq.token_ids[i * bs : (i + 1) * bs], seq.block_table[i])

    def _save_block(self, block_hash: bytes, token_ids: list[int] | tuple[int, ...], block_id: int) -> None:
        """Keep a block's K and V on disk, if the tier lacks them (behind): a finished reply's, or a cached one's just
        before it is reused (the pool's eviction listener)."""
        self.disk.write_behind(block_hash, token_ids, lambda: self.read_block(block_id))

    def forget(self, dropped: list[list[int]], kept: list[list[int]]) -> int:
        """Drop the blocks of the token sequences `dropped` (a deleted conversation's branches) that none of `kept`
        (every other conversation's) shares, from both tiers where no request holds them; how many that was."""
        hashes, shared = set(), set()
        for token_ids in dropped:
            hashes.update(hash_chain(self.pool.root_hash, token_ids, self.block_size))
        for token_ids in kept:  # a chained hash never meets the dropped ones again once it leaves them
            for block_hash in hash_chain(self.pool.root_hash, token_ids, self.block_size):
                if block_hash not in hashes:
                    break
                shared.add(block_hash)
        hashes -= shared
        self.pool.forget(hashes)
        if self.disk is not None:
            self.disk.drop(hashes)
        return len(hashes)

    def share_blocks(self, child: Sequence) -> None:
        """child was copied from a sequence (Sequence.sibling): it now owns every block too, the partial last one
        included."""
        for block_id in child.block_table:
            self.pool.share(block_id)

    def free(self, seq: Sequence) -> None:
        """Release seq's blocks, last block first, so shared prefixes are the last to be evicted. A partial last
        block that seq alone holds is kept (BlockPool.keep_partial): the next turn of a chat finds its tokens. (The
        scheduler then counts none of seq's tokens computed.)"""
        bs, computed = self.block_size, seq.num_computed_tokens
        last = computed // bs
        if self.enable_prefix_caching and computed % bs and last < len(seq.block_table) and \
                self.pool.ref_count(seq.block_table[last]) == 1:
            parent = seq.block_hashes[last - 1] if last else self.pool.root_hash
            self.pool.keep_partial(seq.block_table[last], parent, seq.token_ids[last * bs : computed])
        for block_id in reversed(seq.block_table):
            self.pool.release(block_id)
        seq.block_table.clear()

    def take_block_updates(self) -> tuple[list[tuple[int, int]], list[int]]:
        """What the cache memory needs before the next forward: copy-on-write copies, and blocks used for the
        first time, to clear so that attention never reads uninitialized memory."""
        copies, self.pending_copies = self.pending_copies, []
        cleared = self.pool.take_first_used()
        for block_id in self.copied_partials:  # copied before anything writes into it again (the next forward)
            self.pool.release(block_id)
        self.copied_partials.clear()
        return copies, cleared
