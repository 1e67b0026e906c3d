"""Full KV blocks on disk, named by their chained content hash, so a chat keeps its cache across restarts.

One file per block, in a folder per model fingerprint (the block hashes carry it too, see block_pool.root_hash):
a header with the block's token ids and a CRC-32 of the payload, then the payload: the block's K and V of every
layer, [layers, 2, block_size, kv_heads, head_dim], in the cache's dtype, bit for bit. Files are written behind by
one thread (to a temporary name, then renamed), and read back on admission straight into the cache's memory; one
that fails its check is deleted and its tokens are computed instead. The folder as a whole keeps to a byte limit,
dropping the least recently used files first (a file's time is its last write or read). Anything else found where
block files go (a folder, a FIFO, a link, a file that cannot be read) is a bad block like any other: skipped,
removed where it can be, logged once; the tier never fails a reply or the engine."""

import dataclasses
import logging
import os
import queue
import shutil
import stat
import struct
import threading
import time
import zlib
from collections import OrderedDict
from collections.abc import Callable, Iterable, Sequence
from concurrent.futures import ThreadPoolExecutor, wait
from pathlib import Path

import numpy as np
import torch

from localchat.engine.loading.dirs import private_folder, write_atomically
from localchat.engine.stats import DiskTierStats

log = logging.getLogger("localchat.engine")

FORMAT_VERSION = 1  # of the file layout; it is part of the model fingerprint too
MAGIC = b"LCKV"
HEADER = struct.Struct("<4sIIQI")  # magic, version, number of token ids, payload bytes, CRC-32 of the payload
SUFFIX = ".kv"
READ_TIME_WEIGHT = 0.3  # of the newest read in the measured time per block


class KVDiskTier:
    def __init__(self, root: Path, fingerprint_hex: str, limit_bytes: int, block_shape: tuple[int, ...],
                 dtype: torch.dtype):
        self.root, self.folder = root, root / fingerprint_hex
        self.block_shape, self.dtype = block_shape, dtype
        self.payload_bytes = torch.Size(block_shape).numel() * torch.empty(0, dtype=dtype).element_size()
        self._stats = DiskTierStats(limit_bytes=limit_bytes)
        self.seconds_per_block: float | None = None  # a block's read, as measured (a moving average); None: none yet
        self._lock = threading.Lock()  # guards _files, _pending and stats between the engine and the writer
        self._files: OrderedDict[Path, int] = OrderedDict()  # every block file under root, least recently used first
        self._pending: dict[bytes, tuple[tuple[int, ...], torch.Tensor]] = {}  # queued, not yet on disk
        try:
            if self.folder.is_symlink() or (self.folder.exists() and not self.folder.is_dir()):
                _delete(self.folder)
            private_folder(self.folder)
            for path, size, _ in sorted(_scan(root), key=lambda entry: entry[2]):
                self._files[path] = size
        except OSError as error:
            self._disable(error)
        self._stats.bytes = sum(self._files.values())
        self._queue: queue.Queue = queue.Queue()
        self._readers = ThreadPoolExecutor(4, thread_name_prefix="localchat-kv-read")  # I/O and CRC drop the GIL
        self._thread_buffer = threading.local()  # each reader's staging block
        self._writer = threading.Thread(target=self._write_loop, name="localchat-kv-write", daemon=True)
        self._writer.start()
        self._evict()

    @property
    def stats(self) -> DiskTierStats:
        """A snapshot of the tier's use."""
        with self._lock:
            return dataclasses.replace(self._stats, files=len(self._files))

    def path(self, block_hash: bytes) -> Path:
        return self.folder / f"{block_hash.hex()}{SUFFIX}"

    def contains(self, block_hash: bytes) -> bool:
        with self._lock:
            return self._holds(block_hash)

    def write_behind(self, block_hash: bytes, token_ids: Sequence[int], copy: Callable[[], torch.Tensor]) -> None:
        """Queue a block for writing unless the tier holds it (then it is used now: the last of the files to go);
        copy() gives its K and V, taken only then."""
        with self._lock:
            if self._holds(block_hash):
                path = self.path(block_hash)
                if path in self._files:
                    self._files.move_to_end(path)
                return
            self._pending[block_hash] = (tuple(token_ids), copy())
        self._queue.put(block_hash)

    def _holds(self, block_hash: bytes) -> bool:
        """Whether the block is on disk or queued for it (under the lock)."""
        return bool(self._stats.enabled) and (block_hash in self._pending or self.path(block_hash) in self._files)

    def read_into(self, blocks: list[tuple[bytes, Sequence[int], torch.Tensor]]) -> int:
        """Read blocks (hash, token ids, the cache's memory their K and V go into: a block_shape view) into place;
        returns how many of them, from the first, were on disk and intact (the rest hold garbage). The time each took
        is measured (seconds_per_block)."""
        with self._lock:
            self._stats.lookups += len(blocks)
        started = time.perf_counter()
        reads = [self._readers.submit(self._read_one, *block) for block in blocks]
        found = 0
        for read in reads:
            if not read.result():
                break
            found += 1
        for read in reads[found:]:
            read.cancel()
        wait(reads)  # no read still writes into the cache's memory once this returns
        if found:
            sample = (time.perf_counter() - started) / found
            old = self.seconds_per_block
            self.seconds_per_block = sample if old is None else (1 - READ_TIME_WEIGHT) * old + READ_TIME_WEIGHT * sample
        with self._lock:
            self._stats.hits += found
            for block_hash, _, _ in reversed(blocks[:found]):  # a chain's head the most recently used, as save()'s
                path = self.path(block_hash)
                if path in self._files:
                    self._files.move_to_end(path)
        return found

    def drop(self, hashes: Iterable[bytes]) -> int:
        """Delete these blocks' files (a deleted conversation's own blocks); the number deleted."""
        dropped = 0
        for block_hash in hashes:
            path = self.path(block_hash)
            with self._lock:
                self._pending.pop(block_hash, None)
                known = self._remove(path)
            if known:
                _delete(path)
                dropped += 1
        return dropped

    def _remove(self, path: Path) -> bool:
        """Take a file out of the tier's count (under the lock); whether it was in it."""
        size = self._files.pop(path, None)
        if size is not None:
            self._stats.bytes -= size
        return size is not None

    def flush(self) -> None:
        """Wait until every queued block is on disk."""
        self._queue.join()

    def close(self) -> None:
        self.flush()
        self._queue.put(None)
        self._writer.join()
        self._readers.shutdown()

    def _read_one(self, block_hash: bytes, token_ids: Sequence[int], target: torch.Tensor) -> bool:
        with self._lock:
            pending = self._pending.get(block_hash)
            path = self.path(block_hash)
            on_disk = path in self._files
            if on_disk:
                self._files.move_to_end(path)
        if pending is not None:
            if pending[0] != tuple(token_ids):
                return False
            single_threaded_copy(target, pending[1])
            return True
        if not on_disk:
            return False
        try:
            ok = self._read_file(path, token_ids, target)
            if ok:
                os.utime(path)  # recently used: the last to go
        except (OSError, ValueError, struct.error):  # not a readable file, or not one of ours
            ok = False
        if not ok:
            log.warning("KV block file %s failed its check: deleted, its tokens are computed", path.name)
            with self._lock:
                self._stats.failed_checks += 1
            self.drop([block_hash])
        return ok

    def _read_file(self, path: Path, token_ids: Sequence[int], target: torch.Tensor) -> bool:
        """Read a block file's payload into target; True if the file is whole, of this format and these tokens.
        The payload goes through a buffer of the reading thread's own (reused: no fresh pages to fault in). Opened
        without following a link or waiting on a FIFO: anything but a regular file fails the check."""
        fd = os.open(path, os.O_RDONLY | os.O_NOFOLLOW | os.O_NONBLOCK)
        with open(fd, "rb", buffering=0) as file:
            if not stat.S_ISREG(os.fstat(fd).st_mode):
                return False
            head = file.read(HEADER.size + 4 * len(token_ids))
            if len(head) < HEADER.size:
                return False
            magic, version, num_tokens, payload_bytes, crc = HEADER.unpack_from(head)
            if (magic, version, num_tokens, payload_bytes) != (MAGIC, FORMAT_VERSION, len(token_ids),
                                                                 self.payload_bytes) or \
                    os.fstat(file.fileno()).st_size != len(head) + payload_bytes or \
                    struct.unpack_from(f"<{num_tokens}I", head, HEADER.size) != tuple(token_ids):
                return False
            if not hasattr(self._thread_buffer, "data"):
                self._thread_buffer.data = torch.empty(self.block_shape, dtype=self.dtype)
            staging = self._thread_buffer.data
            payload = memoryview(staging.view(-1).view(torch.uint8).numpy())
            if file.readinto(payload) != payload_bytes or zlib.crc32(payload) != crc:
                return False
        single_threaded_copy(target, staging)
        return True

    def _write_loop(self) -> None:
        while (block_hash := self._queue.get()) is not None:
            try:
                with self._lock:
                    token_ids, data = self._pending[block_hash] if block_hash in self._pending else ((), None)
                if data is not None:
                    self._write_one(block_hash, token_ids, data)
            except OSError as error:  # a full or read-only disk costs the tier, never a reply
                self._disable(error)
            finally:
                with self._lock:
                    self._pending.pop(block_hash, None)
                self._queue.task_done()
        self._queue.task_done()

    def _write_one(self, block_hash: bytes, token_ids: tuple[int, ...], data: torch.Tensor) -> None:
        payload = memoryview(data.contiguous().cpu().view(-1).view(torch.uint8).numpy())
        header = HEADER.pack(MAGIC, FORMAT_VERSION, len(token_ids), len(payload), zlib.crc32(payload))

        def write(tmp: Path) -> None:
            with open(tmp, "wb") as out:
                out.write(header + struct.pack(f"<{len(token_ids)}I", *token_ids))
                out.write(payload)

        path = self.path(block_hash)
        try:
            write_atomically(path, write)
        except IsADirectoryError:  # something that is not a block file is in its place: it goes, once
            log.warning("KV block path %s held a folder: removed", path.name)
            _delete(path)
            write_atomically(path, write)
        size = path.stat().st_size
        with self._lock:
            if block_hash not in self._pending:  # dropped while it was being written
                path.unlink(missing_ok=True)
                return
            self._files[path] = size
            self._stats.bytes += size
            self._stats.written += 1
        self._evict()

    def _disable(self, error: OSError) -> None:
        """Go on without the tier: the engine computes what it would have read."""
        with self._lock:
            was_enabled, self._stats.enabled = self._stats.enabled, 0
            self._pending.clear()
        if was_enabled:
            log.error("the KV cache's disk tier in %s is off: %s (chats are computed again after a restart)",
                      self.root, error)

    def _evict(self) -> None:
        """Drop the least recently used files until the tier is within its limit."""
        while True:
            with self._lock:
                if self._stats.bytes <= self._stats.limit_bytes or not self._files:
                    return
                path = next(iter(self._files))
                self._remove(path)
                self._stats.evicted += 1
            _delete(path)


def _scan(root: Path) -> list[tuple[Path, int, float]]:
    """(path, size, time) of every block file under root (a regular file, in a model's folder); left-over temporary
    files are deleted, and so is anything else in a model's folder (a folder, a FIFO, a link: logged once)."""
    found, unexpected = [], []
    for folder in os.scandir(root):
        if not folder.is_dir(follow_symlinks=False):
            continue
        for entry in os.scandir(folder.path):
            if entry.name.startswith(".") and entry.is_file(follow_symlinks=False):
                _delete(Path(entry.path))  # a write cut short by a crash
            elif entry.name.endswith(SUFFIX) and entry.is_file(follow_symlinks=False):
                info = entry.stat(follow_symlinks=False)
                found.append((Path(entry.path), info.st_size, info.st_mtime))
            else:
                unexpected.append(Path(entry.path))
    if unexpected:
        log.warning("the KV cache's disk tier in %s held %d things that are not block files (%s): removed",
                    root, len(unexpected), ", ".join(p.name[:40] for p in unexpected[:3]))
        for path in unexpected:
            _delete(path)
    return found


def _delete(path: Path) -> None:
    """Remove a block file, or whatever is in its place (a folder with what it holds; a link, not its target).
    What cannot be removed stays, left alone from then on: the tier does not count it."""
    try:
        if path.is_dir() and not path.is_symlink():
            shutil.rmtree(path)
        else:
            path.unlink(missing_ok=True)
    except OSError as error:
        log.warning("could not remove %s from the KV cache's disk tier: %s", path, error)


def single_threaded_copy(target: torch.Tensor, source: torch.Tensor) -> None:
    """target.copy_(source) on the calling thread alone (through numpy), for threads other than the engine's: a
    torch copy of this size would start an OpenMP pool of that thread's own (see the module's docstring)."""
    if target.dtype != source.dtype or target.shape != source.shape:
        raise ValueError(f"copy of {source.dtype} {tuple(source.shape)} into {target.dtype} {tuple(target.shape)}")
    np.copyto(target.view(torch.uint8).numpy(), source.view(torch.uint8).numpy())
