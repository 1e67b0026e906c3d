"""Gemma 3: `gemma3_text`, and the multimodal `gemma3` checkpoints, run as their text part (models/gemma3.py)."""

from typing import TYPE_CHECKING

from localchat.engine.loading.recommended_sampling import FamilySampling, RecommendedSampling
from localchat.engine.worker.models.family import ModelFamily

if TYPE_CHECKING:
    from transformers import PretrainedConfig

    from localchat.engine.loading.gguf_header import GGUFHeader

GEMMA3_27B_LAYERS = 62  # how llama.cpp tells the 27B, whose attention scale differs


def fix_gguf_config(config: "PretrainedConfig", header: "GGUFHeader", tensors: dict[str, list[float]]
                    ) -> None:
    """The rope scaling of the global layers, and the 27B's attention scale (hidden_size / heads, not head_dim), as
    llama.cpp reads the file (transformers' config from the file leaves them out)."""
    from gguf import Keys  # here, not at import: the catalog reads this module fast

    scaling, factor = header.value(Keys.Rope.SCALING_TYPE), header.value(Keys.Rope.SCALING_FACTOR)
    if scaling == "linear" and factor and factor != 1.0:
        config.rope_parameters["full_attention"].update(rope_type="linear", factor=factor)
    if config.num_hidden_layers == GEMMA3_27B_LAYERS:
        config.query_pre_attn_scalar = config.hidden_size // config.num_attention_heads


FAMILY = ModelFamily(
    model_types=("gemma3", "gemma3_text"),
    model="localchat.engine.worker.models.gemma3:Gemma3ForCausalLM",
    # llama.cpp names a norm by its place: Gemma's ffn_norm is the one before its MLP
    gguf_block_names={"post_attention_norm": "post_attention_layernorm", "ffn_norm": "pre_feedforward_layernorm",
                      "post_ffw_norm": "post_feedforward_layernorm"},
    gguf_norms_plus_one=True,  # llama.cpp's RMSNorm multiplies by the weight, Gemma's by 1 + w
    fix_gguf_config=fix_gguf_config,
    sampling=(FamilySampling("", RecommendedSampling("Gemma 3's generation_config", temperature=1.0, top_p=0.95,
                                                     top_k=64, min_p=0.0)),),
)
