"""Pins that keep a chat's blocks warm within a budget, and where a chat's history is (its warmth), found by a few
lookups and kept between calls: the KV cache manager and the scheduler, without a model."""

import torch
from hypothesis import given, settings
from hypothesis import strategies as st

from localchat.engine.core import block_chains
from localchat.engine.core.block_pool import hash_chain
from localchat.engine.core.kv_cache_manager import PIN_SHARE_OF_CACHE, KVCacheConfig, KVCacheManager, PinRefused
from localchat.engine.core.kv_disk_tier import KVDiskTier
from localchat.engine.core.scheduler import Scheduler
from localchat.engine.core.sequence import Sequence
from localchat.engine.core.step_outputs import LogitRows
from localchat.engine.sampling_params import SamplingParams

BS = 4


def chat(kv: KVCacheManager, tokens: list[int]) -> Sequence:
    """A finished chat turn: its tokens computed (every full block findable, its partial last block kept), freed."""
    seq = Sequence("r", 0, list(tokens), len(tokens), SamplingParams())
    kv.hash_blocks(seq)
    hit = kv.find_prefix(seq)
    assert kv.allocate_slots(seq, len(seq) - hit.num_tokens, hit)
    seq.num_computed_tokens = len(seq)
    kv.cache_computed(seq, hit.num_tokens)
    kv.take_block_updates()
    kv.save(seq)  # to the disk tier, if there is one, as a finished reply is
    kv.free(seq)
    return seq


def pressure(kv: KVCacheManager, blocks: int) -> None:
    """Another chat takes `blocks` blocks and keeps them (evicting the least recently used free ones)."""
    for _ in range(blocks):
        kv.pool.allocate()


def resident(kv: KVCacheManager, tokens: list[int]) -> int:
    return kv.held(kv.chain(tokens), tokens)[0]


def test_a_pinned_chat_survives_the_pressure_that_evicts_an_unpinned_one_of_the_same_age():
    older, newer = [1] * 22, [2] * 22  # five full blocks and a partial one each
    for pin in (False, True):
        kv = KVCacheManager(KVCacheConfig(num_blocks=16, block_size=BS))
        chat(kv, older)
        chat(kv, newer)  # freed after `older`: the older chat is the first to go
        if pin:
            kv.pin("older", kv.chain(older), older)
        pressure(kv, 4 + 6)  # the four blocks never used, then six more: one chat's worth
        if pin:
            assert resident(kv, older) == 22 and resident(kv, newer) == 0
        else:  # the control: without the pin, the least recently used chat goes
            assert resident(kv, older) == 0 and resident(kv, newer) == 22


def test_pinned_blocks_go_only_when_nothing_else_is_free_and_unpinning_returns_them_to_the_lru():
    kv = KVCacheManager(KVCacheConfig(num_blocks=16, block_size=BS))
    tokens = [3] * 21
    chat(kv, tokens)
    kv.pin("c", kv.chain(tokens), tokens)
    pressure(kv, 10)  # every unpinned block
    assert kv.pool.num_unpinned_free == 0 and resident(kv, tokens) == 21
    kv.pool.allocate()  # now the pinned ones, tail first (the kept partial block)
    assert resident(kv, tokens) == 20
    assert kv.unpin("c") and not kv.unpin("c")
    assert kv.pool.num_pinned == 0 and kv.pool.num_unpinned_free == 5  # back in the LRU
    pressure(kv, 1)
    assert resident(kv, tokens) == 16  # evicted tail first, as any chat


def test_a_pin_over_the_budget_is_refused_and_changes_nothing():
    kv = KVCacheManager(KVCacheConfig(num_blocks=16, block_size=BS))
    assert kv.pin_limit == int(16 * PIN_SHARE_OF_CACHE) == 8
    first, second = [5] * 20, [6] * 16  # five blocks; four
    kv.pin("first", kv.chain(first), first)
    assert kv.pool.num_pinned == 5
    try:
        kv.pin("second", kv.chain(second), second)
        raise AssertionError("a pin over the budget was taken")
    except PinRefused as refused:
        assert "36 tokens" in str(refused) and "32 the budget allows" in str(refused)
    assert kv.pool.num_pinned == 5 and "second" not in kv.pins
    kv.pin("first", kv.chain(first[:8]), first[:8])  # the first chat's pin moves on, smaller
    kv.pin("second", kv.chain(second), second)
    assert kv.pool.num_pinned == 6 and kv.pin_usage(100).limit_tokens == 32 and kv.pin_usage(100).bytes == 600


def test_chats_that_share_a_prefix_pin_it_once_and_keep_it_until_both_unpin():
    kv = KVCacheManager(KVCacheConfig(num_blocks=32, block_size=BS))
    system = [7] * 8
    a, b = system + [1] * 8, system + [2] * 8
    for tokens in (a, b):
        chat(kv, tokens)
    kv.pin("a", kv.chain(a), a)
    kv.pin("b", kv.chain(b), b)
    assert kv.pool.num_pinned == 2 + 2 + 2  # the shared system prompt's two blocks once
    kv.unpin("a")
    pressure(kv, kv.pool.num_unpinned_free)
    assert resident(kv, b) == 16 and resident(kv, a) == 8  # a's own blocks went, the shared prefix stayed


@settings(max_examples=200, deadline=None)
@given(st.lists(st.tuples(st.integers(0, 2), st.integers(1, 30)), min_size=1, max_size=8), st.integers(0, 30),
       st.data())
def test_residency_found_by_bisection_is_what_the_next_turn_finds(turns, evicted, data):
    """Chats computed and freed in turns (a later turn may extend an earlier chat), then some blocks evicted: what
    held() reports of a chat is what find_prefix gives a request that continues it."""
    kv = KVCacheManager(KVCacheConfig(num_blocks=40, block_size=BS))
    chats: list[list[int]] = []
    for base, length in turns:
        start = data.draw(st.sampled_from(chats), label="continued chat") if chats and base == 0 else []
        tokens = start + [base] * length
        chats.append(tokens)
        if len(tokens) <= 40 * BS // 2:
            chat(kv, tokens)
    pressure(kv, min(evicted, kv.pool.num_free))
    for tokens in chats:
        next_turn = Sequence("n", 0, tokens + [9, 9], len(tokens) + 2, SamplingParams())
        kv.hash_blocks(next_turn)
        assert kv.held(kv.chain(tokens), tokens) == (kv.find_prefix(next_turn).num_tokens, 0)


def test_a_chats_block_hashes_are_kept_and_only_its_new_blocks_hashed(monkeypatch):
    kv = KVCacheManager(KVCacheConfig(num_blocks=8, block_size=BS))
    hashed = []
    monkeypatch.setattr(kv, "chain", lambda tokens, start=(): hashed.append(len(tokens) // BS - len(start)) or
                        KVCacheManager.chain(kv, tokens, start))
    chains = block_chains.BlockChains(kv.chain)
    history = list(range(1000))
    assert chains.get("c", history) == list(hash_chain(kv.pool.root_hash, history, BS))
    grown = history + list(range(50))
    assert chains.get("c", grown) == list(hash_chain(kv.pool.root_hash, grown, BS))
    assert hashed == [250, 12]  # the second call hashed only the 12 new blocks
    edited = [7] + grown[1:]  # the same length, another first token
    assert chains.get("c", edited) == list(hash_chain(kv.pool.root_hash, edited, BS))
    assert hashed[-1] == 262  # another history: hashed anew


def test_a_pinned_chat_comes_back_from_the_disk_tier_when_it_is_pinned(tmp_path):
    """After a restart (a new cache over the same disk tier) pinning a chat reads its full blocks back into memory:
    the next turn finds them there."""
    shape = (1, 2, BS, 1, 2)

    def manager() -> KVCacheManager:
        memory = torch.zeros(shape[0], shape[1], 16, *shape[2:])
        disk = KVDiskTier(tmp_path, "m", 10**9, shape, torch.float32)
        return KVCacheManager(KVCacheConfig(16, BS, disk=disk, read_block=lambda b: memory[:, :, b].clone(),
                                            block_view=lambda b: memory[:, :, b]))

    tokens = [4] * 22
    first = manager()
    chat(first, tokens)
    first.disk.close()
    again = manager()
    assert again.held(again.chain(tokens), tokens) == (0, 20)
    again.pin("c", again.chain(tokens), tokens)
    assert again.held(again.chain(tokens), tokens) == (20, 0)
    assert again.pool.num_unpinned_free == 16 - 5  # the five blocks read back wait in the pinned queue
    again.disk.close()


def test_the_disk_tier_drops_a_chain_tail_first(tmp_path):
    """save() writes a chat's blocks tail first, and a chat used again moves all of them to the recent end: the
    byte limit takes an old chat's tail before its head, so what the tier holds of a chain is a prefix of it."""
    shape = (1, 2, BS, 1, 2)
    memory = torch.zeros(shape[0], shape[1], 16, *shape[2:])
    block_file = 8 * 4 + 4 * BS + memory[:, :, 0].numel() * 4  # header, token ids, payload
    disk = KVDiskTier(tmp_path, "m", 6 * block_file, shape, torch.float32)
    kv = KVCacheManager(KVCacheConfig(16, BS, disk=disk, read_block=lambda b: memory[:, :, b].clone(),
                                      block_view=lambda b: memory[:, :, b]))
    old, new = [1] * 16, [2] * 16
    for tokens in (old, new):
        chat(kv, tokens)
        disk.flush()
    assert [disk.contains(h) for h in kv.chain(old)] == [True, True, False, False]
    assert all(disk.contains(h) for h in kv.chain(new))
    disk.close()


def test_prompts_that_share_a_prefix_and_arrive_together_compute_it_once():
    """32 chats with one 64-token system prompt arrive at once, within a 96-token step budget: the first computes the
    system prompt; the others wait while it computes a block they need next, then find it cached."""
    scheduler = Scheduler(KVCacheConfig(256, 16), max_num_seqs=32, max_num_batched_tokens=96)
    system = list(range(100, 164))
    seqs = [Sequence(f"c{i}", 0, system + [i] * 20, 84, SamplingParams(), max_tokens=1) for i in range(32)]
    for seq in seqs:
        scheduler.add(seq)
    computed = 0
    while any(not s.is_finished for s in seqs):
        batch = scheduler.schedule()
        computed += batch.num_tokens
        rows = scheduler.commit_and_fork(LogitRows(torch.empty(0), batch))
        for seq in rows.seqs:
            scheduler.take(seq, 1, text_stopped=False)
    assert computed == 64 + 32 * 20
    assert [s.num_cached_tokens for s in seqs] == [0] + [64] * 31
