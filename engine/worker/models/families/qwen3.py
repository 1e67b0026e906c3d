"""Qwen3: Llama's layout with q and k normalized per head."""

from localchat.engine.loading.recommended_sampling import FamilySampling, RecommendedSampling
from localchat.engine.worker.models.family import ModelFamily

FAMILY = ModelFamily(
    model_types=("qwen3",), model="localchat.engine.worker.models.llama:LlamaForCausalLM", qk_norm=True,
    # the thinking mode's values (without thinking its card gives 0.7 and top_p 0.8)
    sampling=(FamilySampling("", RecommendedSampling("Qwen 3's model card", temperature=0.6, top_p=0.95, top_k=20,
                                                     min_p=0.0)),),
)
