"""The KV cache's disk tier: blocks read back bit for bit, damaged files recomputed, the byte limit, and engines
that restart warm but never reuse another model's, dtype's or weights' blocks."""

import os
import shutil
import subprocess
import sys
from functools import partial

import pytest
import torch

from localchat.engine import LLM, SamplingParams
from localchat.engine.core.block_pool import hash_block, hash_chain, root_hash
from localchat.engine.core.kv_cache_manager import KVCacheConfig, KVCacheManager
from localchat.engine.core.kv_disk_tier import KVDiskTier

SHAPE = (2, 2, 4, 1, 8)  # layers, K/V, block size, kv heads, head dim


def tier(path, limit=10**9, fingerprint="model-a") -> KVDiskTier:
    return KVDiskTier(path, fingerprint, limit, SHAPE, torch.float32)


def block(seed: int) -> torch.Tensor:
    return torch.randn(SHAPE, generator=torch.Generator().manual_seed(seed))


def read(disk: KVDiskTier, blocks: list[tuple[bytes, list[int]]]) -> list[torch.Tensor]:
    """The leading blocks read back intact, each read into buffers laid out as the engine's cache is."""
    cache = torch.full((SHAPE[0], SHAPE[1], len(blocks), *SHAPE[2:]), float("nan"))
    found = disk.read_into([(key, tokens, cache[:, :, i]) for i, (key, tokens) in enumerate(blocks)])
    return [cache[:, :, i].clone() for i in range(found)]


def test_a_block_reads_back_bit_for_bit_after_a_restart(tmp_path):
    first = tier(tmp_path)
    data, tokens = block(0), [5, 6, 7, 8]
    key = hash_block(root_hash("model-a"), tokens)
    first.write_behind(key, tokens, lambda: data)
    first.close()
    again = tier(tmp_path)
    assert again.stats.files == 1 and again.stats.bytes > data.numel() * 4
    (back,) = read(again, [(key, tokens)])
    assert torch.equal(back.view(torch.int32), data.view(torch.int32))
    assert read(again, [(key, [5, 6, 7, 9])]) == []  # other tokens under the same name are never used
    assert again.stats.hits == 1 and again.stats.lookups == 2


def test_a_damaged_block_fails_its_check_is_deleted_and_ends_the_run(tmp_path):
    disk = tier(tmp_path)
    keys = [bytes([i]) * 16 for i in range(3)]
    for i, key in enumerate(keys):
        disk.write_behind(key, [i] * 4, partial(block, i))
    disk.flush()
    damaged = disk.path(keys[1])
    raw = bytearray(damaged.read_bytes())
    raw[-5] ^= 0x01  # one bit of the payload
    damaged.write_bytes(raw)
    found = read(disk, [(key, [i] * 4) for i, key in enumerate(keys)])
    assert len(found) == 1 and torch.equal(found[0], block(0))  # the run stops before the damaged block
    assert disk.stats.failed_checks == 1 and not damaged.exists() and not disk.contains(keys[1])
    truncated = disk.path(keys[2])
    truncated.write_bytes(truncated.read_bytes()[:-1])
    assert read(disk, [(keys[2], [2] * 4)]) == [] and disk.stats.failed_checks == 2


def test_the_limit_drops_the_least_recently_used_blocks(tmp_path):
    probe = tier(tmp_path / "probe")
    probe.write_behind(b"p" * 16, [0] * 4, lambda: block(0))
    probe.close()
    size = probe.stats.bytes
    disk = tier(tmp_path / "kv", limit=int(2.5 * size))
    keys = [bytes([i]) * 16 for i in range(4)]
    for i in range(2):
        disk.write_behind(keys[i], [i] * 4, partial(block, i))
        disk.flush()
    assert read(disk, [(keys[0], [0] * 4)])  # block 0 is now the most recently used
    disk.write_behind(keys[2], [2] * 4, lambda: block(2))
    disk.flush()
    assert [disk.contains(k) for k in keys[:3]] == [True, False, True]
    assert disk.stats.evicted == 1 and disk.stats.bytes == 2 * size <= disk.stats.limit_bytes
    assert len(list((tmp_path / "kv").rglob("*.kv"))) == 2
    assert disk.drop([keys[0]]) == 1 and not disk.contains(keys[0]) and disk.stats.files == 1


def test_a_folder_that_cannot_be_made_leaves_the_tier_off(tmp_path, caplog):
    (tmp_path / "file").write_text("not a folder")
    disk = tier(tmp_path / "file" / "kv")
    assert disk.stats.enabled == 0 and "disk tier" in caplog.text
    disk.write_behind(b"x" * 16, [1] * 4, lambda: block(1))
    disk.flush()
    assert not disk.contains(b"x" * 16) and read(disk, [(b"x" * 16, [1] * 4)]) == []


def test_a_restart_scans_every_models_blocks_under_one_limit_and_clears_cut_writes(tmp_path):
    a = tier(tmp_path, fingerprint="model-a")
    a.write_behind(b"a" * 16, [1] * 4, lambda: block(1))
    a.close()
    (a.folder / ".leftover.kv.123").write_bytes(b"half")  # a write cut short by a crash
    b = tier(tmp_path, fingerprint="model-b")
    assert b.stats.files == 1 and not b.contains(b"a" * 16)  # counted against the limit, never read
    assert not (a.folder / ".leftover.kv.123").exists()


def plant(path, kind: str) -> None:
    """Put something that is not a block file at `path` (where one was, or might be)."""
    path.unlink(missing_ok=True)
    if kind == "folder":
        path.mkdir()
        (path / "inside").write_text("a file in it")
    elif kind == "fifo":
        os.mkfifo(path)  # an open() that waits for a writer would stop the engine
    elif kind == "link":
        path.symlink_to(path.parent.parent)  # to a folder: its files must stay
    else:
        path.write_bytes(b"not ours")


THINGS = ("folder", "fifo", "link", "stray file")


@pytest.mark.parametrize("kind", THINGS)
def test_a_thing_in_a_block_files_place_fails_its_check_and_goes(tmp_path, kind, caplog):
    disk = tier(tmp_path)
    keys = [bytes([i]) * 16 for i in range(2)]
    for i, key in enumerate(keys):
        disk.write_behind(key, [i] * 4, partial(block, i))
    disk.flush()
    plant(disk.path(keys[1]), kind)
    assert len(read(disk, [(key, [i] * 4) for i, key in enumerate(keys)])) == 1  # a bad block, as any other
    assert not disk.path(keys[1]).exists() and not disk.path(keys[1]).is_symlink() and disk.stats.failed_checks == 1
    assert disk.drop(keys) == 1  # dropping a conversation's blocks never raises
    disk.write_behind(keys[1], [1] * 4, lambda: block(1))
    disk.flush()
    assert disk.stats.enabled and torch.equal(read(disk, [(keys[1], [1] * 4)])[0], block(1))
    assert (tmp_path / "model-a").is_dir()  # a link's target is left alone


@pytest.mark.parametrize("kind", THINGS[:3])  # a stray regular file is found out when it is read (above)
def test_a_thing_found_at_start_is_removed_once_and_the_tier_works(tmp_path, kind, caplog):
    first = tier(tmp_path)
    first.write_behind(b"k" * 16, [1] * 4, lambda: block(1))
    first.close()
    plant(first.path(b"s" * 16), kind)
    again = tier(tmp_path)
    assert again.stats.enabled and again.stats.files == 1 and not first.path(b"s" * 16).exists()
    assert caplog.text.count("not block files") == 1
    assert torch.equal(read(again, [(b"k" * 16, [1] * 4)])[0], block(1))


def test_a_folder_where_the_block_is_to_be_written_is_replaced(tmp_path):
    disk = tier(tmp_path)
    plant(disk.path(b"w" * 16), "folder")
    disk.write_behind(b"w" * 16, [3] * 4, lambda: block(3))
    disk.flush()
    assert disk.stats.enabled and torch.equal(read(disk, [(b"w" * 16, [3] * 4)])[0], block(3))


def test_the_model_folder_replaced_by_a_file_is_made_again(tmp_path):
    (tmp_path / "model-a").write_text("a file where the model's folder goes")
    disk = tier(tmp_path)
    disk.write_behind(b"m" * 16, [4] * 4, lambda: block(4))
    disk.flush()
    assert disk.stats.enabled and disk.contains(b"m" * 16)


GREEDY = SamplingParams(temperature=0, max_tokens=24)
TURN_1 = [{"role": "user", "content": "Explain how a paged KV cache works in an inference engine. " * 6}]


@pytest.fixture(scope="module")
def warm_dir(tmp_path_factory):
    """A disk tier written by a first engine (two turns of a chat), which is then closed: a restart's state."""
    folder = tmp_path_factory.mktemp("kv")
    llm = LLM(kv_disk_bytes=10**9, kv_disk_dir=str(folder))
    ids = llm.engine.apply_chat_template(TURN_1)
    (first,) = llm.generate(ids, GREEDY)
    llm.close()
    assert llm.stats().disk.written >= len(ids) // 16
    return folder, ids + first.outputs[0].token_ids


def next_turn(llm, history: list[int]) -> list[int]:
    return history + llm.engine.tokenize("<|im_end|>\n<|im_start|>user\nNow shorter.<|im_end|>\n"
                                         "<|im_start|>assistant\n")


@pytest.mark.slow
def test_after_a_restart_only_the_new_tokens_are_computed_and_the_reply_is_the_same(warm_dir):
    folder, history = warm_dir
    restarted = LLM(kv_disk_bytes=10**9, kv_disk_dir=str(folder))
    prompt = next_turn(restarted, history)
    (warm,) = restarted.generate(prompt, GREEDY)
    new_tokens = len(prompt) - len(history)
    assert len(prompt) - warm.num_cached_tokens <= new_tokens + 1 + 16  # the reply's last token, and one block
    assert restarted.stats().disk.hits == warm.num_cached_tokens // 16
    cold = LLM()  # no disk tier: everything computed
    (expected,) = cold.generate(prompt, GREEDY)
    assert expected.num_cached_tokens == 0
    assert warm.outputs[0].token_ids == expected.outputs[0].token_ids


@pytest.mark.slow
@pytest.mark.parametrize("change", [dict(quantization="none"), dict(dtype="bfloat16"), dict(block_size=32)],
                         ids=["dense-float", "bfloat16", "block-size"])
def test_other_weights_dtype_or_block_size_never_reuse_a_block(warm_dir, change):
    folder, history = warm_dir
    other = LLM(kv_disk_bytes=10**9, kv_disk_dir=str(folder), **change)
    (out,) = other.generate(next_turn(other, history), SamplingParams(temperature=0, max_tokens=2))
    assert out.num_cached_tokens == 0 and other.stats().disk.hits == 0


@pytest.mark.slow
def test_a_damaged_block_on_disk_is_recomputed(warm_dir, tmp_path):
    folder, history = warm_dir
    copy = tmp_path / "kv"
    shutil.copytree(folder, copy, ignore=shutil.ignore_patterns(".*"))  # not the writes of engines still open
    for path in copy.rglob("*.kv"):  # damage every block file in the middle of its payload
        raw = bytearray(path.read_bytes())
        raw[len(raw) // 2] ^= 0xFF
        path.write_bytes(raw)
    llm = LLM(kv_disk_bytes=10**9, kv_disk_dir=str(copy))
    prompt = next_turn(llm, history)
    (out,) = llm.generate(prompt, GREEDY)
    assert out.num_cached_tokens == 0 and llm.stats().disk.failed_checks >= 1 and llm.stats().disk.hits == 0
    (again,) = LLM().generate(prompt, GREEDY)
    assert out.outputs[0].token_ids == again.outputs[0].token_ids


@pytest.mark.slow
def test_a_workload_larger_than_the_limit_keeps_the_tier_within_it(tmp_path):
    # about 20 blocks of the embedded model: 30 layers x K and V x 16 tokens x 3 heads x 64 x 2 bytes (bfloat16)
    llm = LLM(kv_disk_bytes=20 * 368_700, kv_disk_dir=str(tmp_path))
    prompts = [llm.engine.tokenize(f"Question {i}: " + "tell me more about caches " * 12) for i in range(6)]
    llm.generate(prompts, SamplingParams(temperature=0, max_tokens=16))
    llm.close()
    stats = llm.stats()
    on_disk = sum(p.stat().st_size for p in tmp_path.rglob("*.kv"))
    assert stats.disk.evicted > 0 and on_disk == stats.disk.bytes <= stats.disk.limit_bytes


@pytest.mark.slow
def test_a_folder_that_fails_mid_run_turns_the_tier_off_and_replies_go_on(tmp_path, caplog):
    folder = tmp_path / "kv"
    llm = LLM(kv_disk_bytes=10**9, kv_disk_dir=str(folder))
    prompt = llm.engine.apply_chat_template(TURN_1)
    (first,) = llm.generate(prompt, GREEDY)
    llm.engine.disk.flush()
    shutil.rmtree(folder)
    folder.write_text("the disk tier's folder is gone: every write fails")  # as a full or read-only disk would
    (second,) = llm.generate(prompt[:-20], GREEDY)
    (third,) = llm.generate(prompt, GREEDY)
    llm.engine.disk.flush()
    assert llm.stats().disk.enabled == 0 and "disk tier" in caplog.text
    assert third.outputs[0].token_ids == first.outputs[0].token_ids  # served from memory, as without a tier


KILLED_WHILE_WRITING = """
import os, signal, sys
from localchat.engine import LLM, SamplingParams
llm = LLM(kv_disk_bytes=10**9, kv_disk_dir=sys.argv[1])
prompts = [llm.engine.tokenize(f"Story {i}: " + "once upon a time in a paged cache " * 12) for i in range(4)]
llm.generate(prompts, SamplingParams(temperature=0, max_tokens=4))
os.kill(os.getpid(), signal.SIGKILL)  # the writer thread has most of the blocks still to write
"""


@pytest.mark.slow
def test_a_sigkill_during_write_behind_leaves_nothing_torn(tmp_path):
    result = subprocess.run([sys.executable, "-c", KILLED_WHILE_WRITING, str(tmp_path)], capture_output=True)
    assert result.returncode == -9, result.stderr.decode()[-2000:]
    llm = LLM(kv_disk_bytes=10**9, kv_disk_dir=str(tmp_path))
    assert not [p for p in tmp_path.rglob(".*") if p.is_file()]  # cut writes are cleared at start
    prompts = [llm.engine.tokenize(f"Story {i}: " + "once upon a time in a paged cache " * 12) for i in range(4)]
    outs = llm.generate(prompts, SamplingParams(temperature=0, max_tokens=4))
    assert llm.stats().disk.failed_checks == 0  # every file in place is whole
    cold = LLM().generate(prompts, SamplingParams(temperature=0, max_tokens=4))
    assert [o.outputs[0].token_ids for o in outs] == [o.outputs[0].token_ids for o in cold]


def test_forget_drops_only_the_blocks_no_kept_sequence_shares(tmp_path):
    """Shared prefixes (a system prompt) stay; a kept sequence that shares a longer prefix keeps that much."""
    kv = KVCacheManager(KVCacheConfig(8, 4, fingerprint="f"))
    deleted = list(range(16))  # four blocks
    kept = [list(range(4)) + [99] * 8, list(range(8)) + [77] * 4]  # share one block, and two blocks
    hashes = list(hash_chain(kv.pool.root_hash, deleted, 4))
    dropped = []
    kv.pool.forget = dropped.extend
    assert kv.forget([deleted], kept) == 2
    assert set(dropped) == set(hashes[2:])
