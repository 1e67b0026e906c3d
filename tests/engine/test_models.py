"""Tiny random-weight models of each supported architecture: the engine's logits equal transformers'."""

import pytest
import torch
from transformers import AutoModelForCausalLM, LlamaConfig, MistralConfig, Qwen2Config, Qwen3Config

from localchat.engine import LLM, SamplingParams
from localchat.engine.loader import resolve_model

COMMON = dict(vocab_size=512, hidden_size=64, intermediate_size=128, num_hidden_layers=2, num_attention_heads=4,
              max_position_embeddings=256, initializer_range=0.1, rms_norm_eps=1e-6)

CONFIGS = {
    "llama": lambda: LlamaConfig(**COMMON, num_key_value_heads=2, tie_word_embeddings=False),
    "llama3-rope-gqa4": lambda: LlamaConfig(**COMMON, num_key_value_heads=1, rope_parameters={
        "rope_type": "llama3", "rope_theta": 500000.0, "factor": 8.0, "low_freq_factor": 1.0,
        "high_freq_factor": 4.0, "original_max_position_embeddings": 64}),
    "mistral": lambda: MistralConfig(**COMMON, num_key_value_heads=2, sliding_window=None),
    "qwen2": lambda: Qwen2Config(**COMMON, num_key_value_heads=2, tie_word_embeddings=True),
    "qwen3": lambda: Qwen3Config(**COMMON, num_key_value_heads=2, head_dim=32, tie_word_embeddings=True),
}


@pytest.fixture(scope="module")
def tokenizer():
    return resolve_model(None).tokenizer


@pytest.mark.parametrize("arch", sorted(CONFIGS))
def test_prefill_and_decode_logits_match_transformers(arch, tokenizer, tmp_path):
    torch.manual_seed(0)
    reference = AutoModelForCausalLM.from_config(CONFIGS[arch](), dtype=torch.float32).eval()
    if arch == "qwen2":  # its q/k/v biases start at zero: make them matter
        with torch.no_grad():
            for name, p in reference.named_parameters():
                if name.endswith("bias"):
                    p.normal_(0, 0.1)
    reference.save_pretrained(tmp_path)
    tokenizer.save_pretrained(tmp_path)

    # small blocks and a small token budget: prompts span many blocks and prefill in chunks
    llm = LLM(str(tmp_path), dtype="float32", block_size=4, max_num_batched_tokens=24)
    seen: list[tuple[list[int], torch.Tensor]] = []
    sample = llm.engine.sampler

    def recording_sampler(logits, rows):
        seen.extend((list(row.token_ids), logits[i].clone()) for i, row in enumerate(rows))
        return sample(logits, rows)

    llm.engine.sampler = recording_sampler
    generator = torch.Generator().manual_seed(1)
    prompts = [torch.randint(0, 512, (n,), generator=generator).tolist() for n in (5, 23, 41)]
    outputs = llm.generate(prompts, SamplingParams(temperature=0, max_tokens=33, ignore_eos=True))

    assert [len(o.outputs[0].token_ids) for o in outputs] == [33, 33, 33]
    assert len(seen) == 3 * 33  # prefill, then 32 decode steps per prompt
    with torch.no_grad():
        for tokens, ours in seen:
            theirs = reference(torch.tensor([tokens])).logits[0, -1]
            torch.testing.assert_close(ours, theirs, atol=1e-4, rtol=1e-4)
    assert llm.stats()["kv_blocks_used"] == 0


def test_generation_config_eos_and_sliding_window_limit(tokenizer, tmp_path):
    torch.manual_seed(0)
    config = MistralConfig(**{**COMMON, "max_position_embeddings": 512}, num_key_value_heads=2, sliding_window=96)
    AutoModelForCausalLM.from_config(config).save_pretrained(tmp_path)
    tokenizer.save_pretrained(tmp_path)
    (tmp_path / "generation_config.json").write_text('{"eos_token_id": [7, 9]}')
    llm = LLM(str(tmp_path), dtype="float32")
    assert {7, 9} <= llm.engine.output.eos_token_ids
    assert llm.engine.max_model_len == 96  # no sliding-window attention: the engine stays inside the window
