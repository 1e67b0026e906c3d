"""The model families the engine runs, one module each: what it serves and how (models/family.py's ModelFamily).
Adding a family is a module here and a line below."""

from localchat.engine.worker.models.families import gemma3, llama, mistral, phi3, qwen2, qwen3
from localchat.engine.worker.models.family import ModelFamily

FAMILIES = (llama.FAMILY, mistral.FAMILY, qwen2.FAMILY, qwen3.FAMILY, phi3.FAMILY, gemma3.FAMILY)
_BY_MODEL_TYPE = {model_type: family for family in FAMILIES for model_type in family.model_types}
# what `--model` can name and `localchat models` calls supported: config model_types (a GGUF's general.architecture)
SUPPORTED_ARCHITECTURES = tuple(_BY_MODEL_TYPE)


def family_for(model_type: str | None) -> ModelFamily:
    """The family that serves a config's model_type."""
    if model_type not in _BY_MODEL_TYPE:
        raise ValueError(f"unsupported architecture {model_type!r}; supported: {', '.join(SUPPORTED_ARCHITECTURES)}")
    return _BY_MODEL_TYPE[model_type]
