"""Llama (Llama 2 and 3, SmolLM2, and the many models built on their layout)."""

from localchat.engine.models.family import ModelFamily

FAMILY = ModelFamily(
    model_types=("llama",),
    model="localchat.engine.models.llama:LlamaForCausalLM",
    gguf_permutes_qk=True,  # llama.cpp's converter permutes q and k for "llama" models alone
)
