"""/api/models: the models on this machine, and switching the engine's model."""

from typing import Literal

from msgspec import Struct


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
