"""Tiny random-weight models of each supported architecture: the engine's logits equal transformers'.

The windowed models attend within a sliding window shorter than the prompts (8 to 16 tokens, blocks of 4), so
chunked prefill, decodes, prefix hits and forks all cross it."""

import contextlib
from pathlib import Path

import gguf
import pytest
import torch
from gguf import GGMLQuantizationType
from logit_rows import record_logits, reference_rows
from safetensors.torch import load_file
from transformers import (
    AutoModelForCausalLM,
    Gemma3Config,
    Gemma3ForConditionalGeneration,
    Gemma3TextConfig,
    LlamaConfig,
    MistralConfig,
    Phi3Config,
    Qwen2Config,
    Qwen3Config,
)

from localchat.engine import LLM, SamplingParams
from localchat.engine.frontend import llm_engine
from localchat.engine.loading.gguf_header import read_header
from localchat.engine.loading.loader import ModelSource
from localchat.engine.worker.models.families import family_for

# KV caches of 1,024 blocks (4,096 tokens of 4, past every model's context here): by default a tiny model's cache
# is capped at 2**20 tokens, and building that block pool (262,144 blocks) took most of each test's second
KV_BLOCKS = 1024
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
    "mistral-window": lambda: MistralConfig(**COMMON, num_key_value_heads=2, sliding_window=12),
    "qwen2-window": lambda: Qwen2Config(**{**COMMON, "num_hidden_layers": 3}, num_key_value_heads=2,
                                        use_sliding_window=True, sliding_window=9, max_window_layers=1),
    "phi3-window-partial-rope": lambda: Phi3Config(**COMMON, **PHI3_TOKENS, num_key_value_heads=2, sliding_window=10,
                                                   partial_rotary_factor=0.5, tie_word_embeddings=False),
    # LongRoPE with an original context of 4: every compared sequence is longer, so transformers uses the long
    # factors, as the engine does for any max_model_len past the original context
    "phi3-longrope": lambda: Phi3Config(**COMMON, **PHI3_TOKENS, num_key_value_heads=4,
                                        original_max_position_embeddings=4, rope_parameters=LONGROPE),
    "gemma3": lambda: gemma3_text_config(),
}


# left out of `./dev test --fast`: llama, qwen2, phi3 and the windowed mistral cover the same paths there
SLOW = {"llama3-rope-gqa4", "phi3-longrope", "mistral", "qwen2-window"}
PHI3_TOKENS = dict(bos_token_id=1, eos_token_id=2, pad_token_id=0)  # its defaults are past a tiny vocabulary
LONGROPE = {"rope_type": "longrope", "rope_theta": 10000.0, "original_max_position_embeddings": 4,
            "long_factor": [1.0 + i / 4 for i in range(8)], "short_factor": [1.0 + i / 16 for i in range(8)]}


def gemma3_text_config(**overrides) -> Gemma3TextConfig:
    """Sliding (window 8, local base 10k) and global layers (base 1M, linear scaling), q/k norms, GQA, soft-capped
    logits, query_pre_attn_scalar apart from head_dim."""
    fields = dict(vocab_size=512, hidden_size=64, intermediate_size=128, num_hidden_layers=4, num_attention_heads=4,
                  num_key_value_heads=2, head_dim=32, max_position_embeddings=256, initializer_range=0.1,
                  rms_norm_eps=1e-6, sliding_window=8, query_pre_attn_scalar=24, final_logit_softcapping=5.0,
                  layer_types=["sliding_attention", "full_attention", "sliding_attention", "full_attention"],
                  rope_scaling={"rope_type": "linear", "factor": 4.0}, rope_local_base_freq=100.0)
    return Gemma3TextConfig(**{**fields, **overrides})


def randomize_norms(model: torch.nn.Module) -> None:
    """Norm weights start all equal (Gemma's at 0, for a scale of 1) and biases at 0: make them matter."""
    with torch.no_grad():
        for name, p in model.named_parameters():
            if name.endswith("bias") or "norm" in name:
                p.add_(torch.randn_like(p) * 0.1)


def saved(reference: torch.nn.Module, tokenizer, path) -> str:
    reference.save_pretrained(path)
    tokenizer.save_pretrained(path)
    return str(path)


def assert_logits_match(reference: torch.nn.Module, seen: list[tuple[list[int], torch.Tensor]], outputs) -> int:
    """Each recorded row on a reply's way (kept drafts' included) equals transformers' logits at the last of its
    tokens; how many rows that was."""
    rows = reference_rows(reference, seen, outputs)
    for ours, expected in rows:
        torch.testing.assert_close(ours, expected, atol=1e-4, rtol=1e-4)
    return len(rows)


def random_prompts(lengths, seed=1) -> list[list[int]]:
    generator = torch.Generator().manual_seed(seed)
    return [torch.randint(0, 512, (n,), generator=generator).tolist() for n in lengths]


@pytest.mark.parametrize("arch", [pytest.param(a, marks=pytest.mark.slow) if a in SLOW else a for a in sorted(CONFIGS)])
def test_prefill_and_decode_logits_match_transformers(arch, tokenizer, tmp_path):
    torch.manual_seed(0)
    reference = AutoModelForCausalLM.from_config(CONFIGS[arch](), dtype=torch.float32).eval()
    randomize_norms(reference)

    # small blocks and a small token budget: prompts span many blocks and prefill in chunks
    llm = LLM(saved(reference, tokenizer, tmp_path), dtype="float32", block_size=4, max_num_batched_tokens=24,
              num_kv_blocks=KV_BLOCKS)
    seen = record_logits(llm)
    outputs = llm.generate(random_prompts((5, 23, 41)), SamplingParams(temperature=0, max_tokens=33, ignore_eos=True))

    assert [len(o.outputs[0].token_ids) for o in outputs] == [33, 33, 33]
    assert assert_logits_match(reference, seen, outputs) == 3 * 33  # a row for each token, drafted or not
    assert llm.stats().kv.used == 0


@pytest.mark.parametrize("arch", ["gemma3", pytest.param("mistral-window", marks=pytest.mark.slow)])
def test_windowed_prefix_hits_and_forks_match_transformers(arch, tokenizer, tmp_path):
    """A second request finds a cached prefix far longer than the window, and forks n=3 sampled replies that
    diverge (copy-on-write of the shared last block): every row still equals transformers'."""
    torch.manual_seed(0)
    reference = AutoModelForCausalLM.from_config(CONFIGS[arch](), dtype=torch.float32).eval()
    randomize_norms(reference)
    llm = LLM(saved(reference, tokenizer, tmp_path), dtype="float32", block_size=4, max_num_batched_tokens=16,
              num_kv_blocks=KV_BLOCKS)
    shared, first, second = random_prompts((30, 3, 6))
    seen = record_logits(llm)
    outputs = llm.generate([shared + first], SamplingParams(temperature=0, max_tokens=4, ignore_eos=True))
    params = SamplingParams(n=3, temperature=1.0, seed=5, max_tokens=12, ignore_eos=True)
    outputs += llm.generate([shared + second], params)

    assert outputs[1].num_cached_tokens == 28  # seven full blocks, far past the window
    replies = [tuple(c.token_ids) for c in outputs[1].outputs]
    assert len(set(replies)) == 3
    assert assert_logits_match(reference, seen, outputs) == 4 + 3 * 12
    assert llm.stats().kv.used == 0


def test_multimodal_gemma3_checkpoint_runs_its_text_model(tokenizer, tmp_path):
    """A `gemma3` checkpoint (vision tower, projector and text model): the engine loads its text part alone."""
    torch.manual_seed(0)
    vision = dict(hidden_size=32, intermediate_size=64, num_hidden_layers=1, num_attention_heads=2, image_size=28,
                  patch_size=14)
    # no logit soft cap: transformers' multimodal class leaves it out (no Gemma 3 release sets one)
    text_config = gemma3_text_config(final_logit_softcapping=None).to_dict()
    config = Gemma3Config(text_config=text_config, vision_config=vision, mm_tokens_per_image=4)
    reference = Gemma3ForConditionalGeneration(config).eval()
    randomize_norms(reference)
    llm = LLM(saved(reference, tokenizer, tmp_path), dtype="float32", block_size=4, num_kv_blocks=KV_BLOCKS)
    assert llm.engine.runner.model.config.model_type == "gemma3_text"
    seen = record_logits(llm)
    outputs = llm.generate(random_prompts((19,)), SamplingParams(temperature=0, max_tokens=5, ignore_eos=True))
    assert_logits_match(reference, seen, outputs)


def test_generation_config_eos_and_a_context_past_the_sliding_window(tokenizer, tmp_path):
    torch.manual_seed(0)
    config = MistralConfig(**{**COMMON, "max_position_embeddings": 512}, num_key_value_heads=2, sliding_window=96)
    path = saved(AutoModelForCausalLM.from_config(config), tokenizer, tmp_path)
    (tmp_path / "generation_config.json").write_text('{"eos_token_id": [7, 9]}')
    llm = LLM(path, dtype="float32")
    assert {7, 9} <= llm.engine.scheduler.stop.eos_token_ids
    assert llm.engine.max_model_len == 512  # sliding-window attention: the whole context, not just the window


GGUF_ARCH = {"gemma3": gguf.MODEL_ARCH.GEMMA3, "phi3-window-partial-rope": gguf.MODEL_ARCH.PHI3,
             "llama": gguf.MODEL_ARCH.LLAMA, "qwen2": gguf.MODEL_ARCH.QWEN2}
TYPES = [GGMLQuantizationType.Q4_0, GGMLQuantizationType.Q8_0, GGMLQuantizationType.Q5_1]


def as_gguf(reference: torch.nn.Module, arch: str, path: Path) -> None:
    """Write the model's weights as llama.cpp names them (q/k permuted for llama, Gemma's norms as 1 + w),
    matrices quantized to Q4_0, Q8_0 or Q5_1 by turns (a tied embedding to Q8_0, whose int8 head rows the engine
    also embeds with), and make `reference` hold the dequantized weights, so that it is the float32 model of
    exactly what the file holds."""
    config = reference.config
    family = family_for(config.model_type)
    hf_to_gguf = {}
    for tensor in gguf.MODEL_TENSORS[GGUF_ARCH[arch]]:
        for layer in range(config.num_hidden_layers):
            for suffix in (".weight", ".bias"):  # Qwen2's q, k and v have biases
                name = gguf.TENSOR_NAMES[tensor].format(bid=layer) + suffix
                with contextlib.suppress(ValueError):
                    hf_to_gguf[family.hf_name(name)] = name
    writer = gguf.GGUFWriter(path, GGUF_ARCH[arch].name.lower())
    state = reference.state_dict()
    with torch.no_grad():
        for i, (hf_name, weight) in enumerate(state.items()):
            if hf_name == "lm_head.weight" and config.tie_word_embeddings:
                continue
            data = weight.numpy()
            if weight.dim() == 1:
                writer.add_tensor(hf_to_gguf[hf_name], data + 1 if config.model_type == "gemma3_text" else data)
                continue
            tied_embedding = hf_name == "model.embed_tokens.weight" and config.tie_word_embeddings
            kind = GGMLQuantizationType.Q8_0 if tied_embedding else TYPES[i % len(TYPES)]  # int8 head, shared rows
            raw = gguf.quants.quantize(data, kind)
            weight.copy_(torch.from_numpy(gguf.quants.dequantize(raw, kind)))
            if config.model_type == "llama" and ("q_proj" in hf_name or "k_proj" in hf_name):
                heads = config.num_attention_heads if "q_proj" in hf_name else config.num_key_value_heads
                raw = gguf.quants.quantize(permute(weight.numpy(), heads), kind)
            writer.add_tensor(hf_to_gguf[hf_name], raw, raw_shape=raw.shape, raw_dtype=kind)
    for write in (writer.write_header_to_file, writer.write_kv_data_to_file, writer.write_tensors_to_file):
        write()
    writer.close()


def permute(weight, heads: int):
    """llama.cpp's rotary layout of a q or k projection (what gguf_conversion.unpermute undoes)."""
    return weight.reshape(heads, 2, weight.shape[0] // heads // 2, -1).swapaxes(1, 2).reshape(weight.shape)


def packed_llm(arch: str, tokenizer, tmp_path: Path, monkeypatch) -> tuple[LLM, torch.nn.Module, ModelSource]:
    """A tiny random model of `arch` written as a quantized GGUF (as_gguf) and served packed, the default; with
    transformers' float32 model of the same weights and the engine's model source."""
    torch.manual_seed(0)
    reference = AutoModelForCausalLM.from_config(CONFIGS[arch](), dtype=torch.float32).eval()
    randomize_norms(reference)
    as_gguf(reference, arch, tmp_path / "model.gguf")
    (tmp_path / "cache").mkdir()
    source = ModelSource(arch, reference.config, tokenizer, tmp_path / "cache", tmp_path / "model.gguf")
    monkeypatch.setattr(llm_engine, "resolve_model", lambda model: source)
    llm = LLM(arch, block_size=4, num_kv_blocks=KV_BLOCKS)
    assert llm.engine.packed
    return llm, reference, source


@pytest.mark.parametrize("arch", [a if a == "gemma3" else pytest.param(a, marks=pytest.mark.slow) for a in GGUF_ARCH])
def test_a_quantized_gguf_runs_packed_close_to_its_float32_model(arch, tokenizer, tmp_path, monkeypatch):
    """The default path on a GGUF of each architecture family: its matrices packed (norm shift, fused q|k|v and
    gate|up, Phi-3's fused rows, llama's permuted q/k, Qwen2's biases), within the kernels' error of transformers'
    float32 model of the same (dequantized) weights. A wiring mistake (a wrong name, order or shift) gives errors
    near 100%."""
    llm, reference, source = packed_llm(arch, tokenizer, tmp_path, monkeypatch)
    held = sum(t.nbytes for t in load_file(source.packed_file()).values())
    assert abs(read_header(tmp_path / "model.gguf").held_bytes() - held) < 0.05 * held  # `localchat models` says
    seen = record_logits(llm)
    outputs = llm.generate(random_prompts((7, 21)), SamplingParams(temperature=0, max_tokens=6, ignore_eos=True))
    for ours, expected in reference_rows(reference, seen, outputs):
        assert (ours - expected).norm() / expected.norm() < 0.05


@pytest.mark.slow
@pytest.mark.parametrize("arch", ["gemma3", "qwen2"])
def test_a_packed_gguf_keeps_the_fidelity_bars(arch, tokenizer, tmp_path, monkeypatch):
    """The packed default's bars on other families' shapes (the embedded Llama's are in test_packed_model.py):
    top-1 agreement with transformers' float32 model of the same weights of at least 97% over 240 greedy positions
    of 24 prompts; and 20 seeded replies at temperature 1 the same cold and cached, alone and batched."""
    llm, reference, _ = packed_llm(arch, tokenizer, tmp_path, monkeypatch)
    seen = record_logits(llm)
    prompts = random_prompts(range(5, 53, 2), seed=2)
    outputs = llm.generate(prompts, SamplingParams(temperature=0, max_tokens=10, ignore_eos=True))
    rows = reference_rows(reference, seen, outputs)
    agree = sum(int(ours.argmax() == expected.argmax()) for ours, expected in rows)
    assert len(rows) == 240 and agree / len(rows) >= 0.97, f"top-1 {agree}/{len(rows)}"

    seeded = [SamplingParams(temperature=1.0, seed=i, max_tokens=8, ignore_eos=True) for i in range(20)]
    prompts = prompts[:20]
    llm.engine.reset_prefix_cache()
    cold = [llm.generate(p, params)[0].outputs[0].token_ids for p, params in zip(prompts, seeded)]
    hits = llm.stats().cached_prompt_tokens
    cached = [llm.generate(p, params)[0].outputs[0].token_ids for p, params in zip(prompts, seeded)]
    assert llm.stats().cached_prompt_tokens - hits >= sum(len(p) // 4 * 4 - 4 for p in prompts)  # from the cache
    batched = [o.outputs[0].token_ids for o in llm.generate(prompts, seeded)]
    assert cold == cached == batched
