"""The pool of fixed-size KV blocks: reference counts, content hashes, and an LRU of reusable free blocks."""

import hashlib
import struct
from collections import OrderedDict
from collections.abc import Callable, Iterator, Sequence
from dataclasses import dataclass


def hash_block(parent_hash: bytes, token_ids: Sequence[int]) -> bytes:
    """Chained content hash of a full block: it names the block's tokens and every token before them. A real hash
    function (not Python's hash, whose values differ between processes), so the disk tier can name blocks by it."""
    return hashlib.blake2b(parent_hash + struct.pack(f"<{len(token_ids)}I", *token_ids), digest_size=16).digest()


def hash_chain(parent_hash: bytes, token_ids: Sequence[int], block_size: int) -> Iterator[bytes]:
    """The chained hashes of the full blocks of token_ids, which follow the block named parent_hash."""
    for start in range(0, len(token_ids) - block_size + 1, block_size):
        parent_hash = hash_block(parent_hash, token_ids[start : start + block_size])
        yield parent_hash


def root_hash(fingerprint: str) -> bytes:
    """The parent hash of a sequence's first block: it carries what the cached K and V depend on besides the tokens
    (the model file, dtype, weights' form, block size), so no block is ever shared across them."""
    return hashlib.blake2b(fingerprint.encode(), digest_size=16).digest()


@dataclass(eq=False)
class Block:
    block_id: int
    ref_count: int = 0
    hash: bytes | None = None  # set once the block is full and registered in the pool's cache
    token_ids: tuple[int, ...] = ()  # the tokens a hashed (or kept partial) block holds, checked on every hit
    partial_after: bytes | None = None  # a kept partial last block: the hash of the full block before it


class BlockPool:
    """Blocks with a reference count each.

    A block whose count drops to zero goes into the free queue. The queue's order is the eviction order:
    blocks that hold nothing worth keeping go to its front, hashed and kept partial blocks to its back (least
    recently used first), so a cached prefix survives until every unhashed block and every older prefix is reused.

    A kept partial block is the partial last block of a finished sequence: its tokens' K and V, findable by the
    hash of the full block before them, so that the next turn of a chat copies them instead of computing them.

    Pinned hashes (pin(); a count each, for the chats that share a prefix) keep their blocks warm: a free block whose
    hash is pinned, or a kept partial block after a pinned partial key, waits in a second queue, `pinned_free`, that
    allocate() takes from only once the free queue is empty. Pins name content, not blocks: a pinned prefix not yet
    computed, or evicted before it was pinned, is kept from the moment it is cached again.
    """

    def __init__(self, num_blocks: int, fingerprint: str = "",
                 on_evict: Callable[[bytes, tuple[int, ...], int], None] | None = None):
        """on_evict(hash, token_ids, block_id) hears of a cached block just before it is reused."""
        self._num_blocks, self._root_hash, self._on_evict = num_blocks, root_hash(fingerprint), on_evict
        # pinned content, kept through reset(): full block hashes, and the hashes whose kept partial block is pinned,
        # each with the number of pins that hold it
        self.pins: dict[bytes, int] = {}
        self.partial_pins: dict[bytes, int] = {}
        self.reset()

    def reset(self) -> None:
        """Every block free and new, nothing cached: each block's memory is cleared at its first use (take_first_used),
        as at the start."""
        self.blocks = [Block(i) for i in range(self._num_blocks)]
        self.free_queue: OrderedDict[int, None] = OrderedDict((i, None) for i in range(self._num_blocks))
        self.pinned_free: OrderedDict[int, None] = OrderedDict()  # free blocks that pins keep: evicted last
        self.cached: dict[bytes, int] = {}  # block hash -> block id
        self.partials: dict[bytes, int] = {}  # hash of the full block before a kept partial block -> its id
        self.never_used = set(range(self._num_blocks))
        self.first_used: list[int] = []  # blocks handed out for the first time, whose memory must be cleared
        self.num_cached_free = 0  # free blocks that still hold a reusable prefix (hashed, count 0)

    @property
    def root_hash(self) -> bytes:
        """The parent hash of a sequence's first block (see root_hash())."""
        return self._root_hash

    @property
    def num_blocks(self) -> int:
        return self._num_blocks

    @property
    def num_cached(self) -> int:
        """Free blocks that still hold a reusable prefix."""
        return self.num_cached_free

    def ref_count(self, block_id: int) -> int:
        """How many sequences hold the block."""
        return self.blocks[block_id].ref_count

    def take_first_used(self) -> list[int]:
        """The blocks handed out for the first time since the last call, whose memory must be cleared before the next
        forward (attention never reads uninitialized memory); the list starts afresh."""
        first_used, self.first_used = self.first_used, []
        return first_used

    @property
    def num_free(self) -> int:
        """Blocks that can be handed out now (free, cached or not, pinned or not)."""
        return len(self.free_queue) + len(self.pinned_free)

    @property
    def num_unpinned_free(self) -> int:
        """Free blocks that allocate() hands out before it evicts a pinned one."""
        return len(self.free_queue)

    @property
    def num_used(self) -> int:
        return len(self.blocks) - self.num_free

    @property
    def num_pinned(self) -> int:
        """Pinned content, in blocks: full blocks' hashes and kept partial blocks' keys."""
        return len(self.pins) + len(self.partial_pins)

    def allocate(self) -> int:
        """A fresh block with count 1, evicting the least recently used free block's cached content (a pinned one only
        when no other is free)."""
        queue = self.free_queue or self.pinned_free
        if not queue:
            raise RuntimeError("no free KV block")
        block_id, _ = queue.popitem(last=False)
        if block_id in self.never_used:
            self.never_used.discard(block_id)
            self.first_used.append(block_id)
        block = self.blocks[block_id]
        if block.hash is not None:
            if self._on_evict is not None:
                self._on_evict(block.hash, block.token_ids, block_id)
            del self.cached[block.hash]
            block.hash, block.token_ids = None, ()
            self.num_cached_free -= 1
        self._drop_partial(block)
        block.ref_count = 1
        return block_id

    def filled(self, block_ids: set[int]) -> None:
        """These blocks, just handed out, were written whole (read from disk): they need no clearing."""
        self.first_used = [b for b in self.first_used if b not in block_ids]

    def keep_partial(self, block_id: int, parent_hash: bytes, token_ids: Sequence[int]) -> None:
        """Make a partial block findable after the full block parent_hash (its last owner is about to release it,
        so nothing writes into it any more); it replaces an older one there."""
        old = self.partials.get(parent_hash)
        if old is not None:
            self._drop_partial(self.blocks[old])
        block = self.blocks[block_id]  # a sequence's own block: allocate() left it neither hashed nor kept
        block.partial_after, block.token_ids = parent_hash, tuple(token_ids)
        self.partials[parent_hash] = block_id

    def lookup_partial(self, parent_hash: bytes) -> int | None:
        """The id of the kept partial block after this full block, if any (its tokens may match the next ones in
        part: partial_tokens)."""
        return self.partials.get(parent_hash)

    def partial_tokens(self, block_id: int) -> tuple[int, ...]:
        """The tokens a kept partial block holds."""
        return self.blocks[block_id].token_ids

    def _drop_partial(self, block: Block) -> None:
        """Make a kept partial block unfindable; free, it holds nothing worth keeping now: the first to be reused."""
        if block.partial_after is not None:
            del self.partials[block.partial_after]
            block.partial_after, block.token_ids = None, ()
            self._requeue(block.block_id, first=True)

    def _is_pinned(self, block: Block) -> bool:
        """Whether a pin keeps the block's content: its hash, or (a kept partial block) the hash before it."""
        if block.hash is not None:
            return block.hash in self.pins
        return block.partial_after is not None and block.partial_after in self.partial_pins

    def _requeue(self, block_id: int, first: bool = False) -> None:
        """A free block into the queue its content belongs in now (pinned or not): at the back, as the most recently
        used, or at the front (first) where it holds nothing worth keeping. A block in use stays where it is."""
        if block_id not in self.free_queue and block_id not in self.pinned_free:
            return
        self.free_queue.pop(block_id, None)
        self.pinned_free.pop(block_id, None)
        queue = self.pinned_free if self._is_pinned(self.blocks[block_id]) else self.free_queue
        queue[block_id] = None
        queue.move_to_end(block_id, last=not first)

    def pin(self, hashes: Sequence[bytes], partial_after: bytes | None = None) -> None:
        """One more pin on these full blocks' hashes (a chain, head first), and on the kept partial block after
        `partial_after`: their free blocks move to the pinned queue (evicted last), now and whenever they are freed."""
        self._count(1, hashes, partial_after)

    def unpin(self, hashes: Sequence[bytes], partial_after: bytes | None = None) -> None:
        """Take back one pin() of the same arguments: content no pin holds any more goes back to the LRU (as the most
        recently used)."""
        self._count(-1, hashes, partial_after)

    def _count(self, change: int, hashes: Sequence[bytes], partial_after: bytes | None) -> None:
        """Pins counted up or down; blocks whose content became pinned or unpinned change queues, tail first (the
        kept partial block, then the full blocks from the last), so that the head is the last of them to go."""
        keys = [(self.partial_pins, partial_after)] if partial_after is not None else []
        for counts, key in keys + [(self.pins, h) for h in reversed(hashes)]:
            counts[key] = counts.get(key, 0) + change
            if counts[key] == 0:
                del counts[key]
            if counts.get(key, 0) == max(change, 0):  # pinned now for the first time, or no longer
                block_id = (self.cached if counts is self.pins else self.partials).get(key)
                if block_id is not None:
                    self._requeue(block_id)

    def num_pinned_after(self, unpinned: Sequence[bytes], unpinned_partial: bytes | None, pinned: Sequence[bytes],
                         pinned_partial: bytes | None) -> int:
        """num_pinned once unpin(unpinned, unpinned_partial) and pin(pinned, pinned_partial) have run (one pin moved
        on), changing nothing."""
        def change(counts: dict[bytes, int], old: set[bytes], new: set[bytes]) -> int:
            return sum((counts.get(k, 0) - (k in old) + (k in new) > 0) - (counts.get(k, 0) > 0) for k in old | new)

        return (self.num_pinned + change(self.pins, set(unpinned), set(pinned))
                + change(self.partial_pins, {unpinned_partial} - {None}, {pinned_partial} - {None}))

    def lookup(self, block_hash: bytes, token_ids: Sequence[int]) -> int | None:
        """The cached block holding exactly these tokens after this prefix, if any."""
        block_id = self.cached.get(block_hash)
        if block_id is None or self.blocks[block_id].token_ids != tuple(token_ids):
            return None
        return block_id

    def share(self, block_id: int) -> None:
        """One more owner for a block; a free cached block leaves its free queue."""
        block = self.blocks[block_id]
        if block.ref_count == 0:
            (self.pinned_free if block_id in self.pinned_free else self.free_queue).pop(block_id)
            self.num_cached_free -= block.hash is not None
        block.ref_count += 1

    def release(self, block_id: int) -> None:
        """One owner fewer; a block no one holds goes to the back of its free queue (the pinned one if a pin keeps
        it), or to the front of the free queue if it holds nothing worth keeping."""
        block = self.blocks[block_id]
        assert block.ref_count > 0, f"block {block_id} released more often than shared"
        block.ref_count -= 1
        if block.ref_count == 0:
            (self.pinned_free if self._is_pinned(block) else self.free_queue)[block_id] = None
            if block.hash is not None:
                self.num_cached_free += 1
            elif block.partial_after is None:
                self.free_queue.move_to_end(block_id, last=False)

    def register(self, block_id: int, block_hash: bytes, token_ids: Sequence[int]) -> None:
        """Make a full block findable by its hash. A second block with the same content is not registered."""
        block = self.blocks[block_id]
        if block.hash is None and block_hash not in self.cached:
            block.hash, block.token_ids = block_hash, tuple(token_ids)
            self.cached[block_hash] = block_id

    def forget(self, hashes: set[bytes]) -> None:
        """Make these blocks, and the partial blocks kept after them, unfindable where no sequence holds them; they
        become the first to be reused."""
        for block_hash in hashes:
            partial = self.lookup_partial(block_hash)
            if partial is not None and self.blocks[partial].ref_count == 0:
                self._drop_partial(self.blocks[partial])
            block_id = self.cached.get(block_hash)
            if block_id is not None and self.blocks[block_id].ref_count == 0:
                block = self.blocks[block_id]
                del self.cached[block_hash]
                block.hash, block.token_ids = None, ()
                self.num_cached_free -= 1
                self._requeue(block_id, first=True)

    def reset_cache(self) -> None:
        """Forget every cached prefix (blocks in use keep their contents; pins stay, for content cached again)."""
        for block in self.blocks:
            block.hash, block.token_ids, block.partial_after = None, (), None
        self.cached.clear()
        self.partials.clear()
        self.num_cached_free = 0
        self.free_queue.update(self.pinned_free)
        self.pinned_free.clear()
