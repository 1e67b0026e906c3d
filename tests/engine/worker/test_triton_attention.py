"""The Triton paged-attention kernels against the PyTorch path (on CPU under TRITON_INTERPRET=1).

Every output starts as NaN so that an element a kernel fails to write shows, and cache slots outside the
contexts are NaN for the kernels (zero for the reference) so that a key read past a context shows too."""

import os

import pytest
import torch
from transformers import AutoModelForCausalLM, Gemma3TextConfig, LlamaConfig

from localchat.engine import LLM, SamplingParams
from localchat.engine.loading.loader import resolve_model
from localchat.engine.worker.attention import AttentionMetadata, TorchPagedAttention

pytest.importorskip("triton")
pytestmark = pytest.mark.slow  # Triton's interpreter on a CPU: left out of `./dev test --fast`
DEVICE = torch.device("cuda" if torch.cuda.is_available() else "cpu")
if DEVICE.type == "cpu" and os.environ.get("TRITON_INTERPRET") != "1":
    raise RuntimeError("without a GPU, set TRITON_INTERPRET=1 before triton is imported (tests/conftest.py does)")

from localchat.engine.worker import triton_attention  # noqa: E402
from localchat.engine.worker.triton_attention import TritonPagedAttention  # noqa: E402

TOLERANCE = {
    torch.float32: dict(atol=1e-5, rtol=1e-5),
    torch.float16: dict(atol=2e-3, rtol=2e-3),
    torch.bfloat16: dict(atol=2e-2, rtol=1e-2),
}
F32, F16, BF16 = torch.float32, torch.float16, torch.bfloat16
# (new tokens, context length) per sequence: decodes over contexts of 1, 15, 16, 17 and 70 tokens,
# whole prompts, and chunks over a cached prefix
DECODES = [(1, 1), (1, 15), (1, 16), (1, 17), (1, 70)]
PREFILLS = [(15, 15), (16, 16), (17, 17), (70, 70), (17, 70), (2, 17), (16, 33)]


@pytest.fixture
def nan_allocations(monkeypatch):
    """torch.empty and torch.empty_like return NaN-filled tensors for the rest of the test."""
    empty, empty_like = torch.empty, torch.empty_like
    monkeypatch.setattr(torch, "empty", lambda *a, **k: empty(*a, **k).fill_(float("nan")))
    monkeypatch.setattr(torch, "empty_like", lambda *a, **k: empty_like(*a, **k).fill_(float("nan")))


def random_batch(seqs: list[tuple[int, int]], block_size: int, num_blocks: int, gen: torch.Generator
                 ) -> tuple[AttentionMetadata, list[list[int]]]:
    """Metadata of a step over seqs, each with its own blocks, drawn at random (non-contiguous) from the pool."""
    free = torch.randperm(num_blocks, generator=gen).tolist()
    tables = []
    for _, context in seqs:
        n = -(-context // block_size)
        table, free = free[:n], free[n:]
        tables.append(table)
    meta = AttentionMetadata.build([n for n, _ in seqs], [c for _, c in seqs], tables, block_size, DEVICE)
    return meta, tables


def random_caches(meta: AttentionMetadata, tables: list[list[int]], num_blocks: int, block_size: int,
                  num_kv_heads: int, head_dim: int, dtype: torch.dtype, gen: torch.Generator,
                  window: int | None = None):
    """(reference, poisoned) K and V caches: random in every context slot that a new token can see (within the
    window), zero or NaN elsewhere."""
    shape = (2, num_blocks * block_size, num_kv_heads, head_dim)
    in_context = torch.zeros(num_blocks * block_size, dtype=torch.bool)
    for table, new, context in zip(tables, meta.query_lens, meta.seq_lens):
        for p in range(0 if window is None else max(0, context - new - window + 1), context):
            in_context[table[p // block_size] * block_size + p % block_size] = True
    values = torch.randn(shape, generator=gen).to(dtype)
    reference = torch.where(in_context[:, None, None], values, 0.0).view(2, num_blocks, block_size, num_kv_heads,
                                                                         head_dim)
    poisoned = torch.where(in_context[:, None, None], values, float("nan")).view_as(reference)
    return reference.to(DEVICE), poisoned.to(DEVICE)


def check_attend(seqs, dtype, num_kv_heads, group, head_dim, block_size, seed=0, window=None):
    gen = torch.Generator().manual_seed(seed)
    num_blocks = sum(-(-c // block_size) for _, c in seqs) + 5
    meta, tables = random_batch(seqs, block_size, num_blocks, gen)
    reference, poisoned = random_caches(meta, tables, num_blocks, block_size, num_kv_heads, head_dim, dtype, gen,
                                        window)
    query = torch.randn(sum(n for n, _ in seqs), num_kv_heads * group, head_dim, generator=gen).to(dtype).to(DEVICE)
    scale = head_dim**-0.5
    expected = TorchPagedAttention.attend(query, reference[0], reference[1], meta, scale, window)
    actual = TritonPagedAttention.attend(query, poisoned[0], poisoned[1], meta, scale, window)
    torch.testing.assert_close(actual, expected, **TOLERANCE[dtype])


@pytest.mark.parametrize("dtype, num_kv_heads, group, head_dim, block_size", [
    (F32, 2, 1, 64, 16), (F32, 1, 3, 64, 16), (F32, 1, 8, 64, 16), (F32, 1, 3, 128, 8),
    (BF16, 2, 1, 64, 16), (BF16, 1, 3, 64, 16), (BF16, 1, 8, 128, 16),
    (F16, 1, 3, 64, 16), (F16, 1, 8, 64, 8),
])
def test_attend_mixed_batch_matches_torch(dtype, num_kv_heads, group, head_dim, block_size, nan_allocations):
    """Decodes and prefill chunks in one step: every output row comes from the right kernel."""
    check_attend(DECODES + PREFILLS, dtype, num_kv_heads, group, head_dim, block_size)


@pytest.mark.parametrize("dtype, window, block_size", [
    (F32, 1, 16), (F32, 8, 16), (F32, 16, 8), (F32, 20, 16), (F32, 64, 16), (F32, 65, 16), (BF16, 24, 16),
])
def test_attend_sliding_window_matches_torch(dtype, window, block_size, nan_allocations):
    """A sliding window in decodes, whole prompts and chunks over a cached prefix; keys outside every window
    are NaN for the kernels."""
    check_attend(DECODES + PREFILLS + [(100, 150), (1, 200)], dtype, 1, 3, 64, block_size, window=window)


@pytest.mark.parametrize("target_programs, window", [(1, None), (6, None), (512, None), (6, 150), (512, 100)])
def test_decode_split_k(target_programs, window, nan_allocations, monkeypatch):
    """A long context in 1, 2 or one split per tile of keys, next to contexts shorter than a split; with a window,
    the splits cover the window only."""
    monkeypatch.setattr(triton_attention, "DECODE_TARGET_PROGRAMS", target_programs)
    check_attend([(1, 300), (1, 17), (1, 1)], F32, 1, 3, 64, 16, window=window)


@pytest.mark.parametrize("dtype", [F32, BF16, F16])
def test_store_skips_slot_minus_one(dtype):
    gen = torch.Generator().manual_seed(1)
    num_blocks, block_size, num_kv_heads, head_dim = 6, 16, 2, 64
    slots = torch.randperm(num_blocks * block_size, generator=gen)[:40]
    slots[::7] = -1
    fused = torch.randn(40, 3, num_kv_heads, head_dim, generator=gen).to(dtype).to(DEVICE)
    key, value = fused[:, 0], fused[:, 2]  # non-contiguous, like the projection's split
    cache = torch.full((2, num_blocks, block_size, num_kv_heads, head_dim), float("nan"), dtype=dtype, device=DEVICE)
    expected = cache.clone()
    kept = slots >= 0
    TorchPagedAttention.store(key[kept.to(DEVICE)], value[kept.to(DEVICE)], expected[0], expected[1],
                              slots[kept].to(DEVICE))
    TritonPagedAttention.store(key, value, cache[0], cache[1], slots.to(DEVICE))
    torch.testing.assert_close(cache, expected, atol=0, rtol=0, equal_nan=True)


@pytest.mark.parametrize("dtype", [F32, BF16])
def test_copy_blocks_all_layers(dtype):
    gen = torch.Generator().manual_seed(2)
    cache = torch.randn(3, 2, 10, 16, 2, 64, generator=gen).to(dtype).to(DEVICE)
    copies = [(0, 7), (4, 2), (4, 9), (5, 3)]
    cache[:, :, [d for _, d in copies]] = float("nan")
    expected = cache.clone()
    TorchPagedAttention.copy_blocks(expected, copies)
    TritonPagedAttention.copy_blocks(cache, copies)
    torch.testing.assert_close(cache, expected, atol=0, rtol=0)


@pytest.mark.parametrize("window", [None, 5, 40])
def test_one_decode_over_consecutive_blocks(window, nan_allocations):
    """The step of a lone decode whose blocks are consecutive (the torch path reads them in place)."""
    gen = torch.Generator().manual_seed(4)
    meta = AttentionMetadata.build([1], [37], [[3, 4, 5]], 16, DEVICE)
    assert isinstance(meta.view(window)[0].blocks, slice)
    reference, poisoned = random_caches(meta, [[3, 4, 5]], 8, 16, 2, 64, F32, gen, window)
    query = torch.randn(1, 6, 64, generator=gen).to(DEVICE)
    expected = TorchPagedAttention.attend(query, reference[0], reference[1], meta, 0.125, window)
    actual = TritonPagedAttention.attend(query, poisoned[0], poisoned[1], meta, 0.125, window)
    torch.testing.assert_close(actual, expected, **TOLERANCE[F32])


ENGINE_CONFIGS = {
    "llama": lambda: LlamaConfig(**ENGINE_COMMON),
    # sliding layers with a window of 12 tokens and global layers
    "gemma3-window": lambda: Gemma3TextConfig(**ENGINE_COMMON, sliding_window=12, query_pre_attn_scalar=64,
                                              layer_types=["sliding_attention", "full_attention"]),
}
ENGINE_COMMON = dict(vocab_size=512, hidden_size=128, intermediate_size=256, num_hidden_layers=2, num_attention_heads=4,
                     num_key_value_heads=2, head_dim=64, max_position_embeddings=256, initializer_range=0.1)


@pytest.mark.parametrize("arch", sorted(ENGINE_CONFIGS))
def test_engine_greedy_tokens_match_torch_backend(arch, tmp_path, monkeypatch):
    """A tiny random Llama, and a Gemma 3 with a sliding window (GQA 2, head dim 64): chunked prefill, prefix hits
    and copy-on-write forks give the same greedy tokens with either backend."""
    torch.manual_seed(0)
    AutoModelForCausalLM.from_config(ENGINE_CONFIGS[arch]()).save_pretrained(tmp_path)
    resolve_model(None).tokenizer.save_pretrained(tmp_path)
    copies = []
    copy_blocks = TritonPagedAttention.copy_blocks
    monkeypatch.setattr(TritonPagedAttention, "copy_blocks",
                        staticmethod(lambda cache, pairs: (copies.extend(pairs), copy_blocks(cache, pairs))))
    gen = torch.Generator().manual_seed(3)
    shared = torch.randint(0, 512, (20,), generator=gen).tolist()
    # contexts of 21 to 68 tokens: decodes over one key tile and, at the end, over two (split-K); 8 tokens a reply
    # (the interpreter's decode steps are what takes the time) still cross a block in every reply
    prompts = [shared + torch.randint(0, 512, (n,), generator=gen).tolist() for n in (1, 13, 40)]
    params = SamplingParams(temperature=0, max_tokens=8, ignore_eos=True, n=2)
    outputs = {}
    for backend in ("torch", "triton"):
        # 512 blocks (4,096 tokens): a tiny model's default cache of 2**20 tokens takes a while to set up
        llm = LLM(str(tmp_path), dtype="float32", block_size=8, max_num_batched_tokens=24, num_kv_blocks=512,
                  attention_backend=backend)
        outputs[backend] = [[c.token_ids for c in o.outputs] for o in llm.generate(prompts, params)]
        assert llm.stats().cached_prompt_tokens > 0
    assert llm.engine.runner.backend is TritonPagedAttention and copies
    assert outputs["triton"] == outputs["torch"]
