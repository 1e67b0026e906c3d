"""Turns a model argument into what the engine loads: a config, a tokenizer, and the weights.

A model is the embedded SmolLM2 GGUF (`None`), a `.gguf` file, a folder with `config.json` and
`*.safetensors`, or a Hugging Face model id already in the local HF cache. Nothing here touches the network.

`resolve_model` finds it and reads its config and tokenizer; a GGUF file gets a cache folder holding `config.json`
and the tokenizer files (written once, the config completed as its model family says). Its weights are converted
into that folder by an explicit `ModelSource.ensure_converted(packed)` on first use (gguf_conversion.py):
`packed-<kernel layout>.safetensors`, the file's own quantized matrices packed (the default on CPU), or
`model.safetensors`, every weight dequantized to float32. Later loads read only the cache; `count_weights`,
`load_weights` and `load_packed` only read. An architecture or tensor type the engine cannot run is refused from
the file's header, before any conversion.
"""

import hashlib
import json
import shutil
import tempfile
from collections.abc import Iterator
from dataclasses import dataclass
from pathlib import Path

import torch
from huggingface_hub import snapshot_download
from huggingface_hub.errors import HFValidationError, LocalEntryNotFoundError
from safetensors import safe_open
from transformers import AutoConfig, AutoTokenizer, PretrainedConfig, PreTrainedTokenizerBase, PreTrainedTokenizerFast

from localchat.engine.loading.dirs import private_folder, user_dir, write_atomically
from localchat.engine.loading.gguf_conversion import config_tensors, write_dense, write_packed
from localchat.engine.loading.gguf_header import HELD_AS, GGUFHeader, read_header
from localchat.engine.loading.model_catalog import EMBEDDED_NAME, embedded_gguf_path
from localchat.engine.loading.tensor_file import read_tensors
from localchat.engine.worker.models.families import SUPPORTED_ARCHITECTURES, family_for
from localchat.engine.worker.packed_linear import kernel_layout

CACHE_FORMAT = 4  # bump when the cache folder's contents change
DENSE_FILE = "model.safetensors"


def packed_file_name() -> str:
    """The packed weights' file, named by the layout they have on this machine (packed_linear.kernel_layout)."""
    return f"packed-{hashlib.sha256(kernel_layout().encode()).hexdigest()[:12]}.safetensors"


@dataclass
class ModelSource:
    name: str
    config: PretrainedConfig
    tokenizer: PreTrainedTokenizerBase
    folder: Path  # config.json and the tokenizer; for a GGUF, its cache folder
    gguf_file: Path | None = None

    def needs_conversion(self, packed: bool) -> bool:
        """Whether loading (packed or dense weights) first converts the GGUF file: its first use on this machine."""
        if self.gguf_file is None:
            return False
        return not (self.folder / (packed_file_name() if packed else DENSE_FILE)).is_file()

    def ensure_converted(self, packed: bool) -> None:
        """Convert a GGUF file's weights into its cache folder, packed or dense, unless they are there already (the
        slow part of a first start); a safetensors model needs nothing."""
        if self.needs_conversion(packed):
            convert = write_packed if packed else write_dense
            config = self.config.get_text_config()
            write_atomically(self.folder / (packed_file_name() if packed else DENSE_FILE),
                             lambda tmp: convert(self.gguf_file, config, tmp))

    def dense_files(self) -> list[Path]:
        """The safetensors files of every weight with Hugging Face names (a GGUF's once converted)."""
        self._check_converted(packed=False)
        return sorted(f for f in self.folder.glob("*.safetensors") if not f.name.startswith("packed-"))

    def packed_file(self) -> Path:
        """A GGUF's packed weights (once converted)."""
        self._check_converted(packed=True)
        return self.folder / packed_file_name()

    def _check_converted(self, packed: bool) -> None:
        if self.needs_conversion(packed):
            raise RuntimeError(f"the weights of {self.name} are not converted yet: "
                               f"ensure_converted(packed={packed}) first")


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
    """How many tensors load_weights (or load_packed) will yield (read from the converted files' headers)."""
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
    """Yield a GGUF's packed weights, by the engine's module names (see gguf_conversion.write_packed)."""
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
    """A GGUF model through its cache folder: config and tokenizer written once; weights by ensure_converted."""
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
    transformers names there for a sentencepiece vocabulary's file would rebuild it from Python copies of the
    vocabulary and merges that it then keeps: 250 MB more for 262,144 tokens, for the same encoding and decoding."""
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
    _fix_gguf_config(config, path, header)
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


def _fix_gguf_config(config: PretrainedConfig, path: Path, header: GGUFHeader) -> None:
    """Set what transformers' config from a GGUF file leaves out, as the model's family reads the file
    (ModelFamily.fix_gguf_config); most families need nothing, and their files are not read again."""
    family = family_for(config.model_type)
    if family.fix_gguf_config is not None:
        family.fix_gguf_config(config, header, config_tensors(path, header, family))
