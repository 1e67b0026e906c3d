"""/api/models: the models on this machine, switching the engine's model, and pulling one from the Hugging Face
Hub."""

from typing import Annotated, Literal

import msgspec
from msgspec import Struct

# a model repo's id on the Hub (OWNER/NAME: app/model_pull.py's check_repo says what is wrong with one), and a file's
# path in it
RepoId = Annotated[str, msgspec.Meta(min_length=1, max_length=200)]
RepoFile = Annotated[str, msgspec.Meta(pattern=r"^[^\x00]+$", max_length=500)]


class ModelInfo(Struct, kw_only=True):
    name: str  # what POST /api/models/current takes (and `localchat serve --model`)
    served_name: str  # what the engine calls it once loaded: /health's model, a message's model
    source: Literal["embedded", "hf-cache", "folder"]
    format: Literal["gguf", "safetensors"]
    architecture: str | None
    quantization: str | None  # a GGUF's main tensor type ("Q4_K", ...)
    size_bytes: int
    memory_bytes: int | None  # its weights in memory, as the engine holds them
    supported: bool
    current: bool  # the one the engine runs (or loads) now


class ModelCatalog(Struct, kw_only=True):
    models: list[ModelInfo]
    current: str | None  # the name the engine runs or loads, as in `models`
    switchable: bool  # False with --engine-url: the remote server's model is its own


class ModelChoice(Struct, forbid_unknown_fields=True):
    model: str  # a name from GET /api/models


class PullRequest(Struct, kw_only=True, forbid_unknown_fields=True):
    repo: RepoId  # a model repo on the Hub (HF_ENDPOINT), OWNER/NAME
    file: RepoFile | None = None  # one of its GGUF files (None: its only one, or its Q4_K_M)


class ModelPull(Struct, kw_only=True):
    """A GGUF file being pulled from the Hugging Face Hub into its cache, as far as it got."""

    repo: str
    file: str | None = None  # once chosen
    state: Literal["starting", "downloading", "checking", "done", "failed"] = "starting"
    bytes_done: int = 0
    bytes_total: int | None = None
    resumed_from: int = 0  # bytes an earlier, interrupted pull had already: this one went on from there
    error: str | None = None  # failed: why, and what to do
    model: str | None = None  # done: its name in GET /api/models (what a switch and `--model` take)
