"""Qwen3: Llama's layout with q and k normalized per head."""

from localchat.engine.models.family import ModelFamily

FAMILY = ModelFamily(model_types=("qwen3",), model="localchat.engine.models.llama:LlamaForCausalLM", qk_norm=True)
