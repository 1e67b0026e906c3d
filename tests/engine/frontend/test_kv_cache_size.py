"""The KV cache's default size on the CPU: a share of the machine's available memory, within bounds
(llm_engine.cpu_kv_cache_bytes), turned into blocks by default_num_blocks."""

import os

import pytest
import torch
from transformers import LlamaConfig

from localchat.engine.frontend import llm_engine
from localchat.engine.frontend.llm_engine import available_memory, cpu_kv_cache_bytes, default_num_blocks

MiB, GiB = 1024**2, 1024**3


@pytest.mark.parametrize(("available", "expected"), [
    (8 * GiB, 2 * GiB),  # a quarter of what is available
    (2 * GiB, 512 * MiB),
    (512 * MiB, 256 * MiB),  # at least the floor, on a machine short of memory
    (64 * GiB, 4 * GiB),  # at most the ceiling
    (None, 4 * GiB),  # the memory not known: the ceiling (vLLM's fixed size)
])
def test_the_cpu_default_is_a_quarter_of_the_available_memory_within_bounds(available, expected):
    assert cpu_kv_cache_bytes(available) == expected


def test_the_default_number_of_blocks_follows_the_machines_memory(monkeypatch):
    config = LlamaConfig(num_hidden_layers=16, hidden_size=2048, num_attention_heads=32, num_key_value_heads=8)
    block_bytes = 2 * 16 * 16 * 8 * 64 * 4  # K and V, layers, tokens, KV heads, head size, float32
    blocks = {}
    for available in (2 * GiB, 8 * GiB):
        monkeypatch.setattr(llm_engine, "available_memory", lambda available=available: available)
        blocks[available] = default_num_blocks(config, 16, torch.float32, torch.device("cpu"))
    assert blocks == {2 * GiB: 512 * MiB // block_bytes, 8 * GiB: 2 * GiB // block_bytes}


def test_a_tiny_models_default_stops_at_a_million_tokens(monkeypatch):
    """Its 4 KB blocks would be half a million in 2 GiB, each an object of the pool."""
    config = LlamaConfig(num_hidden_layers=2, hidden_size=64, num_attention_heads=4, num_key_value_heads=2)
    monkeypatch.setattr(llm_engine, "available_memory", lambda: 8 * GiB)
    assert default_num_blocks(config, 16, torch.float32, torch.device("cpu")) == 2**20 // 16


def test_the_available_memory_is_read_from_the_machine():
    available = available_memory()
    assert available is not None and 0 < available <= os.sysconf("SC_PAGE_SIZE") * os.sysconf("SC_PHYS_PAGES")
