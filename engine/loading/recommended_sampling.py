"""The sampling values a model's authors recommend, where they are found: the file's own (a GGUF's general.sampling.*,
which llama.cpp reads; a model folder's generation_config.json, which vLLM and transformers read), else the values its
family publishes (each family module's `sampling`), else none. The app applies them where a request names no value
of its own (app/sampling_defaults.py). Light: no torch, no transformers."""

import json
from dataclasses import dataclass, fields
from pathlib import Path

GGUF_KEYS = {"temperature": "general.sampling.temp", "top_p": "general.sampling.top_p",
             "top_k": "general.sampling.top_k", "min_p": "general.sampling.min_p",
             "repetition_penalty": "general.sampling.penalty_repeat"}


@dataclass(frozen=True)
class RecommendedSampling:
    source: str  # where the values come from, in words: "the model file", "Qwen 3's model card"
    temperature: float | None = None
    top_p: float | None = None
    top_k: int | None = None
    min_p: float | None = None
    repetition_penalty: float | None = None

    def values(self) -> dict[str, float]:
        """The values it gives, by SamplingParams' names."""
        given = {f.name: getattr(self, f.name) for f in fields(self) if f.name != "source"}
        return {name: value for name, value in given.items() if value is not None}


@dataclass(frozen=True)
class FamilySampling:
    """A family's published values for the models whose names hold `name` ("" holds for every one)."""

    name: str
    sampling: RecommendedSampling


def from_gguf(metadata: dict) -> RecommendedSampling | None:
    values = {name: metadata[key] for name, key in GGUF_KEYS.items() if key in metadata}
    return RecommendedSampling("the model file", **values) if values else None


def from_generation_config(folder: Path) -> RecommendedSampling | None:
    """A folder's generation_config.json, where it samples (do_sample false: it recommends greedy decoding, which
    would make every regenerated or forked reply the same: left to the family's or localchat's values)."""
    path = folder / "generation_config.json"
    try:
        config = json.loads(path.read_text())
    except (OSError, ValueError):
        return None
    if not isinstance(config, dict) or config.get("do_sample") is False:
        return None
    values = {name: config[name] for name in GGUF_KEYS if isinstance(config.get(name), int | float)}
    return RecommendedSampling("the model's generation_config.json", **values) if values else None


def from_family(family: tuple[FamilySampling, ...], names: list[str]) -> RecommendedSampling | None:
    """The first of a family's entries whose name one of the model's names holds (lower case)."""
    names = [n.lower() for n in names if n]
    return next((entry.sampling for entry in family if any(entry.name in n for n in names)), None)
