"""Each chat's chain of block hashes, kept between calls: a chat only grows, so asking where its history is (its
warmth, LLMEngine.warmth) hashes only the blocks added since it was last asked, not the whole history each time."""

import threading
from array import array
from collections import OrderedDict
from collections.abc import Callable, Sequence


class BlockChains:
    """The chained hashes of the full blocks of keyed token sequences (a chat's history by its conversation's id). A
    call with tokens that extend the key's last ones hashes only the new full blocks; other tokens (another branch
    shown, an edit) are hashed anew. The least recently asked keys beyond CAPACITY are forgotten. Safe to call from
    any thread."""

    CAPACITY = 4096  # keys kept: a user's chats, and a chain costs about 20 bytes a token

    def __init__(self, hash_tokens: Callable[[Sequence[int], Sequence[bytes]], list[bytes]]):
        """hash_tokens(token_ids, hashes of their first blocks) gives the hashes of all their full blocks."""
        self._hash_tokens = hash_tokens
        self._lock = threading.Lock()
        self._chains: OrderedDict[str, tuple[array, list[bytes]]] = OrderedDict()

    def get(self, key: str, token_ids: Sequence[int]) -> list[bytes]:
        """The hashes of token_ids' full blocks."""
        tokens = array("I", token_ids)
        with self._lock:
            kept, hashes = self._chains.pop(key, (array("I"), []))
        if len(kept) > len(tokens) or tokens[: len(kept)] != kept:
            hashes = []  # not the same tokens grown: hashed anew
        hashes = self._hash_tokens(token_ids, hashes)
        with self._lock:
            self._chains[key] = (tokens, hashes)
            while len(self._chains) > self.CAPACITY:
                self._chains.popitem(last=False)
        return hashes

    def forget(self, key: str) -> None:
        with self._lock:
            self._chains.pop(key, None)
