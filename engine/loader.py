"""Turns a model argument into files the engine can load: a config, a tokenizer and safetensors weights.

A model is the embedded SmolLM2 GGUF (`None`), a `.gguf` file, a folder with `config.json` and
`*.safetensors`, or a Hugging Face model id already in the local HF cache. Nothing here touches the network.
A GGUF file is dequantized once into a cache folder holding float32 safetensors with Hugging Face names,
`config.json` and the tokenizer files; later loads read only that folder. The 4-bit Q4_1 weights of a GGUF
file are also kept as they are (`q4_1/blocks.safetensors`) so the engine can run them without loss.
"""

import hashlib
import shutil
import tempfile
from collections.abc import Iterator
from dataclasses import dataclass
from pathlib import Path

import gguf
import numpy as np
import torch
from huggingface_hub import snapshot_download
from huggingface_hub.errors import HFValidationError, LocalEntryNotFoundError
from safetensors import safe_open
from safetensors.torch import save_file
from transformers import AutoConfig, AutoTokenizer, PretrainedConfig, PreTrainedTokenizerBase

from .dirs import user_dir
from .model_catalog import EMBEDDED_NAME, SUPPORTED_ARCHITECTURES, embedded_gguf_path
from .quantization import unpack_q4_1

CACHE_FORMAT = 2  # bump when the cache folder's contents change
Q4_FILE = "q4_1/blocks.safetensors"

# GGUF tensor names -> Hugging Face names; block tensors are `blk.N.<part>.<weight|bias>`.
_TOP_LEVEL_NAMES = {"token_embd": "model.embed_tokens", "output_norm": "model.norm", "output": "lm_head"}
_BLOCK_NAMES = {
    "attn_q": "self_attn.q_proj",
    "attn_k": "self_attn.k_proj",
    "attn_v": "self_attn.v_proj",
    "attn_output": "self_attn.o_proj",
    "attn_q_norm": "self_attn.q_norm",
    "attn_k_norm": "self_attn.k_norm",
    "ffn_gate": "mlp.gate_proj",
    "ffn_up": "mlp.up_proj",
    "ffn_down": "mlp.down_proj",
    "attn_norm": "input_layernorm",
    "ffn_norm": "post_attention_layernorm",
}
# Per architecture (the config's model_type), the block names that differ from _BLOCK_NAMES: llama.cpp names a tensor
# by its role, so Gemma 3's ffn_norm is the norm before its MLP and Phi-3's fused tensors keep their HF layout.
_ARCH_BLOCK_NAMES = {
    "gemma3_text": {
        "post_attention_norm": "post_attention_layernorm",
        "ffn_norm": "pre_feedforward_layernorm",
        "post_ffw_norm": "post_feedforward_layernorm",
    },
    "phi3": {"attn_qkv": "self_attn.qkv_proj", "ffn_up": "mlp.gate_up_proj"},  # q|k|v rows and gate|up rows
}
# GGUF tensors that are configuration, not weights: Phi-3's LongRoPE factors (_gguf_config_fixes reads them)
_CONFIG_TENSORS = ("rope_factors_long.weight", "rope_factors_short.weight")


@dataclass
class ModelSource:
    name: str
    config: PretrainedConfig
    tokenizer: PreTrainedTokenizerBase
    weight_files: list[Path]
    q4_file: Path | None = None  # a GGUF's Q4_1 weights: `<name>.q`, `<name>.d`, `<name>.m` per HF weight name


def resolve_model(model: str | None) -> ModelSource:
    """Find the model named by `model` (see the module docstring) and load its config and tokenizer."""
    if model in (None, EMBEDDED_NAME):
        return _from_gguf(embedded_gguf_path(), EMBEDDED_NAME)
    path = Path(model).expanduser()
    if path.suffix == ".gguf":
        if not path.is_file():
            raise ValueError(f"model {model!r} not found: no GGUF file at {path}")
        return _from_gguf(path, path.stem)
    if path.is_dir():
        return _from_folder(path, path.name)
    try:
        snapshot = snapshot_download(model, local_files_only=True)
    except (LocalEntryNotFoundError, HFValidationError):
        raise ValueError(
            f"model {model!r} not found: it is not a .gguf file, not a folder, and not a Hugging Face model id "
            "in the local cache (nothing is downloaded)"
        ) from None
    return _from_folder(Path(snapshot), model)


def count_weights(source: ModelSource) -> int:
    """How many tensors load_weights will yield (read from the files' headers)."""
    total = 0
    for file in source.weight_files:
        with safe_open(file, framework="pt") as f:
            total += sum(1 for name in f.keys() if not name.endswith("rotary_emb.inv_freq"))
    return total


def load_weights(source: ModelSource, dtype: torch.dtype) -> Iterator[tuple[str, torch.Tensor]]:
    """Yield every (Hugging Face parameter name, tensor cast to `dtype`) of `source`."""
    for file in source.weight_files:
        with safe_open(file, framework="pt") as f:
            for name in f.keys():
                if not name.endswith("rotary_emb.inv_freq"):
                    yield name, f.get_tensor(name).to(dtype)


def _from_folder(folder: Path, name: str) -> ModelSource:
    weight_files = sorted(folder.glob("*.safetensors"))
    if not (folder / "config.json").is_file() or not weight_files:
        raise ValueError(f"model {name!r} not found: {folder} has no config.json and *.safetensors files")
    config = AutoConfig.from_pretrained(folder)
    _check_supported(config, name)
    return ModelSource(name, config, AutoTokenizer.from_pretrained(folder), weight_files)


def _check_supported(config: PretrainedConfig, name: str) -> None:
    if config.model_type not in SUPPORTED_ARCHITECTURES:
        raise ValueError(
            f"model {name!r} has architecture {config.model_type!r}; supported: {', '.join(SUPPORTED_ARCHITECTURES)}"
        )


def _from_gguf(path: Path, name: str) -> ModelSource:
    """Load a GGUF model through its cache folder, converting it first if the cache is missing or stale."""
    cache = _gguf_cache_dir(path)
    if not cache.is_dir():
        cache.parent.mkdir(parents=True, exist_ok=True)
        tmp = Path(tempfile.mkdtemp(prefix=f".{cache.name}-", dir=cache.parent))
        try:
            _convert_gguf(path, name, tmp)
            try:
                tmp.rename(cache)
            except OSError:
                if not cache.is_dir():  # else another process finished the same conversion first
                    raise
        finally:
            shutil.rmtree(tmp, ignore_errors=True)
    source = _from_folder(cache, name)
    q4_file = cache / Q4_FILE
    source.q4_file = q4_file if q4_file.is_file() else None
    return source


def _gguf_cache_dir(path: Path) -> Path:
    stat = path.stat()
    key = hashlib.sha256(f"{CACHE_FORMAT}:{stat.st_size}:{stat.st_mtime_ns}".encode()).hexdigest()[:16]
    return user_dir("cache") / "models" / f"{path.stem}-{key}"


def _convert_gguf(path: Path, name: str, out: Path) -> None:
    """Write config.json, the tokenizer files and float32 model.safetensors of the GGUF file into `out`."""
    config = AutoConfig.from_pretrained(path.parent, gguf_file=path.name)
    _check_supported(config, name)
    if hasattr(config, "quantization_config"):
        del config.quantization_config
    reader = gguf.GGUFReader(path)
    _gguf_config_fixes(config, reader)
    # llama.cpp permutes the q and k rows of "llama" models for its rotary layout; other architectures keep HF's.
    permuted = config.model_type == "llama"
    tensors, q4 = {}, {}
    for tensor in reader.tensors:
        if tensor.name in _CONFIG_TENSORS:
            continue
        hf_name = _hf_name(tensor.name, config.model_type)
        heads = None
        if permuted and ".self_attn.q_proj." in hf_name:
            heads = config.num_attention_heads
        elif permuted and ".self_attn.k_proj." in hf_name:
            heads = config.num_key_value_heads
        weight = _from_llama_cpp(config.model_type, tensor.name,
                                 np.array(gguf.quants.dequantize(tensor.data, tensor.tensor_type), dtype=np.float32))
        tensors[hf_name] = torch.from_numpy(_unpermute(weight, heads) if heads else weight)
        if tensor.tensor_type == gguf.GGMLQuantizationType.Q4_1:
            for part, array in zip("qdm", unpack_q4_1(np.asarray(tensor.data))):
                rows = _unpermute(array, heads) if heads else array
                q4[f"{hf_name}.{part}"] = torch.from_numpy(np.ascontiguousarray(rows))
    config.tie_word_embeddings = "lm_head.weight" not in tensors
    save_file(tensors, out / "model.safetensors", metadata={"format": "pt"})
    if q4:
        (out / Q4_FILE).parent.mkdir()
        save_file(q4, out / Q4_FILE, metadata={"format": "pt"})
    config.save_pretrained(out)
    AutoTokenizer.from_pretrained(path.parent, gguf_file=path.name).save_pretrained(out)


def _hf_name(gguf_name: str, model_type: str) -> str:
    stem, suffix = gguf_name.rsplit(".", 1)
    if stem.startswith("blk."):
        _, layer, part = stem.split(".", 2)
        names = {**_BLOCK_NAMES, **_ARCH_BLOCK_NAMES.get(model_type, {})}
        if part in names:
            return f"model.layers.{layer}.{names[part]}.{suffix}"
    elif stem in _TOP_LEVEL_NAMES:
        return f"{_TOP_LEVEL_NAMES[stem]}.{suffix}"
    raise ValueError(f"unsupported GGUF tensor {gguf_name!r}")


def _from_llama_cpp(model_type: str, gguf_name: str, weight: np.ndarray) -> np.ndarray:
    """Undo a change llama.cpp's converter makes to a tensor's values: it stores Gemma 3's norm weights w as 1 + w
    (its RMSNorm multiplies by the weight, Gemma's by 1 + w). transformers' GGUF loading subtracts the same 1."""
    if model_type == "gemma3_text" and gguf_name.endswith("norm.weight"):
        return weight - 1
    return weight


def _gguf_config_fixes(config: PretrainedConfig, reader: gguf.GGUFReader) -> None:
    """Set what transformers' config from a GGUF file leaves out for Phi-3 and Gemma 3, as llama.cpp reads the file.

    Phi-3: the sliding window (0: none), the rotary width (partial_rotary_factor) and the LongRoPE factors, which
    the file holds as tensors. Gemma 3: the rope scaling of its global layers, and the attention scale of the 27B
    (hidden_size / heads, not head_dim: llama.cpp tells it by its 62 layers)."""

    arch = reader.fields["general.architecture"].contents()

    def value(key: str):
        field = reader.fields.get(key.format(arch=arch))
        return None if field is None else field.contents()

    if config.model_type == "phi3":
        window = value(gguf.Keys.Attention.SLIDING_WINDOW)
        if window is not None:
            config.sliding_window = window or None
        rope = dict(config.rope_parameters)
        rotary_dims = value(gguf.Keys.Rope.DIMENSION_COUNT)
        if rotary_dims:
            rope["partial_rotary_factor"] = rotary_dims / (config.hidden_size // config.num_attention_heads)
        factors = {t.name: np.asarray(t.data, dtype=np.float32).tolist() for t in reader.tensors
                   if t.name in _CONFIG_TENSORS}
        if factors:
            original = value(gguf.Keys.Rope.SCALING_ORIG_CTX_LEN) or config.max_position_embeddings
            rope.update(rope_type="longrope", long_factor=factors["rope_factors_long.weight"],
                        short_factor=factors["rope_factors_short.weight"], original_max_position_embeddings=original)
            config.original_max_position_embeddings = original
            if (attention_factor := value(gguf.Keys.Rope.SCALING_ATTN_FACTOR)) is not None:
                rope["attention_factor"] = attention_factor
        config.rope_parameters = rope
    elif config.model_type == "gemma3_text":
        scaling, factor = value(gguf.Keys.Rope.SCALING_TYPE), value(gguf.Keys.Rope.SCALING_FACTOR)
        if scaling == "linear" and factor and factor != 1.0:
            config.rope_parameters["full_attention"].update(rope_type="linear", factor=factor)
        if config.num_hidden_layers == 62:
            config.query_pre_attn_scalar = config.hidden_size // config.num_attention_heads


def _unpermute(weight: np.ndarray, n_head: int) -> np.ndarray:
    """Undo llama.cpp's `w.reshape(n_head, 2, head_dim // 2, *rest).swapaxes(1, 2)` of q/k rows."""
    rest = weight.shape[1:]
    return weight.reshape(n_head, -1, 2, *rest).swapaxes(1, 2).reshape(weight.shape)
