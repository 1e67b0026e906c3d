"""Mistral: Llama's layout, with a sliding window in its config (models/llama.py's layer_windows)."""

from localchat.engine.worker.models.family import ModelFamily

FAMILY = ModelFamily(model_types=("mistral",), model="localchat.engine.worker.models.llama:LlamaForCausalLM")
