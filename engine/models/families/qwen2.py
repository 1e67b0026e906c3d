"""Qwen2 and Qwen2.5: Llama's layout with biases on q, k and v (and sliding layers when the config uses them)."""

from localchat.engine.models.family import ModelFamily

FAMILY = ModelFamily(model_types=("qwen2",), model="localchat.engine.models.llama:LlamaForCausalLM", qkv_bias=True)
