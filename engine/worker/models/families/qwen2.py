"""Qwen2 and Qwen2.5: Llama's layout with biases on q, k and v (and sliding layers when the config uses them)."""

from localchat.engine.loading.recommended_sampling import FamilySampling, RecommendedSampling
from localchat.engine.worker.models.family import ModelFamily

FAMILY = ModelFamily(
    model_types=("qwen2",), model="localchat.engine.worker.models.llama:LlamaForCausalLM", qkv_bias=True,
    sampling=(FamilySampling("", RecommendedSampling("Qwen 2.5's generation_config", temperature=0.7, top_p=0.8,
                                                     top_k=20, repetition_penalty=1.05)),),
)
