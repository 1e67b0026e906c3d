"""Turns a model argument into what the engine loads: a config, a tokenizer, and the weights.

A model is the embedded SmolLM2 GGUF (`None`), a `.gguf` file, a folder with `config.json` and
`*.safetensors`, or a Hugging Face model id already in the local HF cache. Nothing here touches the network.

A GGUF file gets a cache folder holding `config.json` and the tokenizer files (written once), and its weights in
the form the engine runs, made on first use: `packed-<kernel layout>.safetensors`, the file's quantized
matrices as packed weights for torch's weight-only kernels (packed_linear.py), its small tensors (norms, biases)
in float32, and the token embedding's raw GGUF rows (the default on CPU), or `model.safetensors`, every weight
dequantized to float32 (quantization="none": exact, for comparison with transformers). Later loads read only
the cache. An architecture or tensor type the engine cannot run is refused from the file's header, before any
conversion.
"""

import hashlib
import json
import mmap
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
from transformers import AutoConfig, AutoTokenizer, PretrainedConfig, PreTrainedTokenizerBase, PreTrainedTokenizerFast

from .dirs import private_folder, user_dir, write_atomically
from .gguf_header import HELD_AS, GGUFHeader, TensorInfo, read_header
from .model_catalog import EMBEDDED_NAME, SUPPORTED_ARCHITECTURES, embedded_gguf_path
from .packed_linear import KERNEL_LAYOUT, GGUFMatrix, HeadRowsEmbedding, PackedLinear, pack
from .tensor_file import TensorFileWriter, read_tensors

CACHE_FORMAT = 4  # bump when the cache folder's contents change
DENSE_FILE = "model.safetensors"
PACKED_FILE = f"packed-{hashlib.sha256(KERNEL_LAYOUT.encode()).hexdigest()[:12]}.safetensors"
EMBEDDING_TYPE_KEY = "model.embed_tokens.ggml_type"  # the embedding's GGML type id, beside its raw rows
VALUE_DTYPES = {"F32": np.float32, "F16": np.float16}  # the GGUF types GGUFReader gives as values, not as bytes

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
# the engine's fused linear layers and the HF matrices stacked into each (in this order)
FUSED_LINEARS = {"self_attn.qkv_proj": ("self_attn.q_proj", "self_attn.k_proj", "self_attn.v_proj"),
                 "mlp.gate_up_proj": ("mlp.gate_proj", "mlp.up_proj")}
PLAIN_LINEARS = ("self_attn.o_proj", "mlp.down_proj")


@dataclass
class ModelSource:
    name: str
    config: PretrainedConfig
    tokenizer: PreTrainedTokenizerBase
    folder: Path  # config.json and the tokenizer; for a GGUF, its cache folder
    gguf_file: Path | None = None

    def dense_files(self) -> list[Path]:
        """The safetensors files of every weight with Hugging Face names (a GGUF's are made on first use)."""
        if self.needs_conversion(packed=False):
            config = self.config.get_text_config()
            write_atomically(self.folder / DENSE_FILE, lambda tmp: _write_dense(self.gguf_file, config, tmp))
        return sorted(f for f in self.folder.glob("*.safetensors") if not f.name.startswith("packed-"))

    def needs_conversion(self, packed: bool) -> bool:
        """Whether loading (packed or dense weights) first converts the GGUF file: its first use on this machine."""
        if self.gguf_file is None:
            return False
        return not (self.folder / (PACKED_FILE if packed else DENSE_FILE)).is_file()

    def packed_file(self) -> Path:
        """A GGUF's packed weights (made on first use)."""
        path = self.folder / PACKED_FILE
        if self.needs_conversion(packed=True):
            write_atomically(path, lambda tmp: _write_packed(self.gguf_file, self.config.get_text_config(), tmp))
        return path


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


def count_weights(source: ModelSource, packed: bool = False) -> int:
    """How many tensors load_weights (or load_packed) will yield (read from the files' headers)."""
    total = 0
    for file in [source.packed_file()] if packed else source.dense_files():
        with safe_open(file, framework="pt") as f:
            total += sum(1 for name in f.keys() if not name.endswith("rotary_emb.inv_freq"))
    return total


def load_weights(source: ModelSource, dtype: torch.dtype) -> Iterator[tuple[str, torch.Tensor]]:
    """Yield every (Hugging Face parameter name, tensor cast to `dtype`) of `source`."""
    for file in source.dense_files():
        with safe_open(file, framework="pt") as f:
            for name in f.keys():
                if not name.endswith("rotary_emb.inv_freq"):
                    yield name, f.get_tensor(name).to(dtype)


def load_packed(source: ModelSource) -> Iterator[tuple[str, torch.Tensor]]:
    """Yield a GGUF's packed weights, by the engine's module names (see _write_packed)."""
    yield from read_tensors(source.packed_file())


def _from_folder(folder: Path, name: str) -> ModelSource:
    if not (folder / "config.json").is_file() or not any(folder.glob("*.safetensors")):
        raise ValueError(f"model {name!r} not found: {folder} has no config.json and *.safetensors files")
    config = AutoConfig.from_pretrained(folder)
    _check_supported(config.model_type, name)
    return ModelSource(name, config, AutoTokenizer.from_pretrained(folder), folder)


def model_identity(source: ModelSource) -> str:
    """Names the weights a model runs: its file (or folder) with the size and time of each weight file, so a
    replaced or edited model is another model."""
    files = [source.gguf_file] if source.gguf_file is not None else sorted(source.folder.glob("*.safetensors"))
    stats = [(f.name, f.stat().st_size, f.stat().st_mtime_ns) for f in files]
    return f"{(source.gguf_file or source.folder).resolve()}:{stats}"


def _check_supported(architecture: str | None, name: str) -> None:
    if architecture not in SUPPORTED_ARCHITECTURES:
        raise ValueError(
            f"model {name!r} has architecture {architecture!r}; supported: {', '.join(SUPPORTED_ARCHITECTURES)}"
        )


def check_gguf(header: GGUFHeader, name: str) -> None:
    """Refuse, from the header alone, a GGUF whose architecture or tensor types the engine cannot run."""
    _check_supported(header.architecture, name)
    unsupported = sorted({t.type_name for t in header.tensors} - set(HELD_AS))
    if unsupported:
        raise ValueError(f"model {name!r} has tensors of type {', '.join(unsupported)}; supported: "
                         f"{', '.join(HELD_AS)}")


def _from_gguf(path: Path, name: str) -> ModelSource:
    """A GGUF model through its cache folder: config and tokenizer written once; weights when first loaded."""
    cache = _gguf_cache_dir(path)
    if not (cache / "config.json").is_file():
        header = read_header(path)
        check_gguf(header, name)  # before the slow part
        private_folder(cache.parent)
        tmp = Path(tempfile.mkdtemp(prefix=f".{cache.name}-", dir=cache.parent))  # 0700
        try:
            _write_config_and_tokenizer(path, header, tmp)
            for written in tmp.iterdir():  # transformers writes them with the umask's mode
                written.chmod(0o600)
            try:
                tmp.rename(cache)
            except OSError:
                if not (cache / "config.json").is_file():  # else another process finished the same work first
                    raise
        finally:
            shutil.rmtree(tmp, ignore_errors=True)
    return ModelSource(name, AutoConfig.from_pretrained(cache), _cached_tokenizer(cache), cache, path)


def _cached_tokenizer(cache: Path) -> PreTrainedTokenizerBase:
    """The tokenizer written to the cache, its tokenizer.json read by the tokenizers library alone. The class
    transformers names there for a Gemma file (GemmaTokenizer) would rebuild it from Python copies of the vocabulary
    and merges that it then keeps: 250 MB more for Gemma 3's 262,144 tokens, for the same encoding and decoding."""
    return PreTrainedTokenizerFast.from_pretrained(cache)


def _gguf_cache_dir(path: Path) -> Path:
    stat = path.stat()
    key = hashlib.sha256(f"{CACHE_FORMAT}:{stat.st_size}:{stat.st_mtime_ns}".encode()).hexdigest()[:16]
    return user_dir("cache") / "models" / f"{path.stem}-{key}"


def _write_config_and_tokenizer(path: Path, header: GGUFHeader, out: Path) -> None:
    config = AutoConfig.from_pretrained(path.parent, gguf_file=path.name)
    if hasattr(config, "quantization_config"):
        del config.quantization_config
    config.tie_word_embeddings = not any(t.name == "output.weight" for t in header.tensors)
    _gguf_config_fixes(config, path)
    config.save_pretrained(out)
    tokenizer = AutoTokenizer.from_pretrained(path.parent, gguf_file=path.name)
    tokenizer.save_pretrained(out)
    _record_added_tokens(tokenizer, out)


def _record_added_tokens(tokenizer: PreTrainedTokenizerBase, folder: Path) -> None:
    """Write the tokenizer's added tokens into its tokenizer_config.json, as transformers 4 did: without them there,
    loading parses the whole tokenizer.json in Python to find them (1.3 s and 160 MB at the peak for 262,144 tokens)."""
    path = folder / "tokenizer_config.json"
    config = json.loads(path.read_text())
    config["added_tokens_decoder"] = {
        str(token_id): {"content": token.content, "single_word": token.single_word, "lstrip": token.lstrip,
                        "rstrip": token.rstrip, "normalized": token.normalized, "special": token.special}
        for token_id, token in tokenizer.added_tokens_decoder.items()}
    path.write_text(json.dumps(config, indent=2, ensure_ascii=False))


def _map_tensors(path: Path, header: GGUFHeader) -> tuple[np.memmap, list[tuple[TensorInfo, np.ndarray]]]:
    """The file mapped, and each tensor with its data there as gguf's GGUFReader gives it (F32 and F16 values, the
    bytes of other types' rows), located from the header alone: GGUFReader makes numpy objects of every item of every
    metadata array (620 MB and 14 s for a 262,144-token vocabulary)."""
    mapped = np.memmap(path, mode="r")
    tensors = []
    for tensor in header.tensors:
        dims, dtype = tuple(reversed(tensor.shape)), VALUE_DTYPES.get(tensor.type_name)
        if dtype is None:  # rows of blocks, as bytes
            kind = gguf.GGMLQuantizationType[tensor.type_name]
            dtype, dims = np.uint8, gguf.quants.quant_shape_to_byte_shape(dims, kind)
        start = header.data_start + tensor.offset
        size = int(np.prod(dims)) * np.dtype(dtype).itemsize
        tensors.append((tensor, mapped[start : start + size].view(dtype).reshape(dims)))
    return mapped, tensors


def _gguf_tensors(tensors: list[tuple[TensorInfo, np.ndarray]], config: PretrainedConfig) -> dict[str, "GGUFMatrix"]:
    """Every tensor of the file (as _map_tensors gives them) by its Hugging Face name, with the row order that undoes
    llama.cpp's permutation of q and k (it permutes them for "llama" models' rotary layout; other architectures keep
    HF's)."""
    permuted = config.model_type == "llama"
    matrices = {}
    for tensor, data in tensors:
        if tensor.name in _CONFIG_TENSORS:
            continue
        hf_name = _hf_name(tensor.name, config.model_type)
        shape = (data.shape[0], tensor.shape[0]) if len(tensor.shape) == 2 else (tensor.shape[0],)
        heads = None
        if permuted and ".self_attn.q_proj." in hf_name:
            heads = config.num_attention_heads
        elif permuted and ".self_attn.k_proj." in hf_name:
            heads = config.num_key_value_heads
        rows = _unpermute(np.arange(shape[0]), heads) if heads else None
        matrices[hf_name] = GGUFMatrix(data, gguf.GGMLQuantizationType[tensor.type_name], shape, rows)
    return matrices


def _dequantized(matrix: GGUFMatrix) -> torch.Tensor:
    weight = np.array(gguf.quants.dequantize(matrix.data, matrix.tensor_type), dtype=np.float32)
    return torch.from_numpy(weight if matrix.rows is None else weight[matrix.rows])


def _small_tensors(matrices: dict[str, GGUFMatrix], config: PretrainedConfig) -> dict[str, torch.Tensor]:
    """Tensors kept in float32 by their Hugging Face names, with Gemma 3's norm weights w shifted back: llama.cpp's
    converter stores them as 1 + w (its RMSNorm multiplies by the weight, Gemma's by 1 + w), and transformers'
    GGUF loading subtracts the same 1."""
    shift = config.model_type == "gemma3_text"
    return {name: _dequantized(m) - 1 if shift and name.endswith("norm.weight") else _dequantized(m)
            for name, m in matrices.items()}


def _write_dense(path: Path, config: PretrainedConfig, out: Path) -> None:
    """Every weight dequantized to float32, with Hugging Face names."""
    tensors = _small_tensors(_gguf_tensors(_map_tensors(path, read_header(path))[1], config), config)
    save_file(tensors, out, metadata={"format": "pt"})


def _write_packed(path: Path, config: PretrainedConfig, out: Path) -> None:
    """The engine's module names -> tensors: each linear layer (q/k/v and gate/up fused) packed by
    packed_linear.pack with its bias; the logits head packed too (from the token embedding when they are
    tied); the token embedding's raw GGUF rows and type, read row by row at run time, unless a tied head's int8
    rows serve (HeadRowsEmbedding); every other tensor (the norms) in float32.

    Written a layer at a time (TensorFileWriter), and the file's pages read so far dropped from this process after
    each layer: packing holds about one layer, not the model (measured by benchmarks/memory.py)."""
    mapped, tensors = _map_tensors(path, read_header(path))
    matrices = _gguf_tensors(tensors, config)
    writer = TensorFileWriter(out)

    def add_linear(module: str, sources: list[str]) -> None:
        for key, tensor in pack([matrices.pop(f"{source}.weight") for source in sources]).items():
            writer.add(f"{module}.{key}", tensor)
        biases = [matrices.pop(f"{s}.bias") for s in sources if f"{s}.bias" in matrices]
        if biases:
            writer.add(f"{module}.bias", torch.cat([_dequantized(b) for b in biases]))

    try:
        for layer in range(config.num_hidden_layers):
            prefix = f"model.layers.{layer}"
            for fused, parts in FUSED_LINEARS.items():
                fused_in_file = f"{prefix}.{fused}.weight" in matrices  # Phi-3 stores q|k|v and gate|up as one matrix
                add_linear(f"{prefix}.{fused}", [f"{prefix}.{p}" for p in ((fused,) if fused_in_file else parts)])
            for plain in PLAIN_LINEARS:
                add_linear(f"{prefix}.{plain}", [f"{prefix}.{plain}"])
            _drop_pages(mapped)
        embedding = matrices.pop("model.embed_tokens.weight")
        head = matrices.pop("lm_head.weight", embedding)
        packed_head = pack([head], head=True)
        for key, tensor in packed_head.items():
            writer.add(f"lm_head.{key}", tensor)
        if head is not embedding or not HeadRowsEmbedding.fits(PackedLinear(packed_head)):
            writer.add("model.embed_tokens.raw", torch.from_numpy(np.array(embedding.data).view(np.uint8)))
            writer.add(EMBEDDING_TYPE_KEY, torch.tensor([int(embedding.tensor_type)]))
        for name, tensor in _small_tensors(matrices, config).items():
            writer.add(name, tensor)
    except BaseException:
        writer.abort()
        raise
    writer.close({"format": "pt"})


def _drop_pages(mapped: np.memmap) -> None:
    """Let go of the file's pages this process has read through its memory map (they stay in the page cache):
    otherwise every page read counts in the process's resident memory until the end."""
    mapping = getattr(mapped, "_mmap", None)  # numpy.memmap's mmap.mmap
    if mapping is not None and hasattr(mmap, "MADV_DONTNEED"):
        mapping.madvise(mmap.MADV_DONTNEED)


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


def _gguf_config_fixes(config: PretrainedConfig, path: Path) -> None:
    """Set what transformers' config from a GGUF file leaves out for Phi-3 and Gemma 3, as llama.cpp reads the file.

    Phi-3: the sliding window (0: none), the rotary width (partial_rotary_factor) and the LongRoPE factors, which
    the file holds as tensors. Gemma 3: the rope scaling of its global layers, and the attention scale of the 27B
    (hidden_size / heads, not head_dim: llama.cpp tells it by its 62 layers). Other architectures need nothing, and
    the file is not parsed again for them."""
    if config.model_type not in ("phi3", "gemma3_text"):
        return
    header = read_header(path)

    def value(key: str):
        return header.metadata.get(key.format(arch=header.architecture))

    if config.model_type == "phi3":
        window = value(gguf.Keys.Attention.SLIDING_WINDOW)
        if window is not None:
            config.sliding_window = window or None
        rope = dict(config.rope_parameters)
        rotary_dims = value(gguf.Keys.Rope.DIMENSION_COUNT)
        if rotary_dims:
            rope["partial_rotary_factor"] = rotary_dims / (config.hidden_size // config.num_attention_heads)
        factors = {t.name: np.asarray(data, dtype=np.float32).tolist() for t, data in _map_tensors(path, header)[1]
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
