"""Llama (Llama 2 and 3, SmolLM2, and the many models built on their layout)."""

from localchat.engine.loading.recommended_sampling import FamilySampling, RecommendedSampling
from localchat.engine.worker.models.family import ModelFamily

FAMILY = ModelFamily(
    model_types=("llama",),
    model="localchat.engine.worker.models.llama:LlamaForCausalLM",
    gguf_permutes_qk=True,  # llama.cpp's converter permutes q and k for "llama" models alone
    sampling=(FamilySampling("smollm2", RecommendedSampling("SmolLM2's model card", temperature=0.2, top_p=0.9)),
              FamilySampling("llama", RecommendedSampling("Llama 3's generation_config", temperature=0.6,
                                                          top_p=0.9))),
)
