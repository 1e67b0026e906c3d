"""localchat's inference engine: a paged KV cache shared across requests, turns and branches.

The public names load on first use, so that importing a light module (dirs, model_catalog, sampling_params)
does not import torch and transformers (~3 s)."""

import importlib

_PUBLIC = {
    "LLM": "frontend.llm", "AsyncLLM": "frontend.async_llm", "SamplingParams": "sampling_params",
    "RequestOutput": "frontend.outputs", "CompletionOutput": "frontend.outputs", "TokenLogprob": "frontend.outputs",
    "StructuredOutput": "frontend.structured_output",
}
__all__ = list(_PUBLIC)


def __getattr__(name: str):
    if name not in _PUBLIC:
        raise AttributeError(f"module {__name__!r} has no attribute {name!r}")
    return getattr(importlib.import_module(f"{__name__}.{_PUBLIC[name]}"), name)
