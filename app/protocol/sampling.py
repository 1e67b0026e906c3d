"""The sampling values a model's replies get where a request names none (every API's, and the UIs')."""

from msgspec import Struct


class SamplingDefaults(Struct, kw_only=True):
    """What a reply samples with where its request names no value, for the model the engine runs: the values its
    authors recommend where localchat finds them (its file's, else its family's), else localchat's own
    (app/sampling_defaults.py). Every API applies them; GET /health, /v1/models and /api/show say them."""

    temperature: float
    top_p: float
    top_k: int
    min_p: float
    repetition_penalty: float
    presence_penalty: float
    frequency_penalty: float
    source: str  # where they come from, in words: "SmolLM2's model card", "the model file", "localchat's defaults"
    fork_temperature: float  # what the replies of a fork sample at, unless the fork's request sets a temperature
