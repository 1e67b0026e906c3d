"""Phi-3 (and Phi-4 mini): Llama's decoder over projections already fused in the checkpoint (qkv_proj, gate_up_proj),
a rotary embedding over part of each head (partial_rotary_factor), LongRoPE scaling and a sliding window."""

from typing import TYPE_CHECKING

from localchat.engine.worker.models.family import ModelFamily

if TYPE_CHECKING:
    from transformers import PretrainedConfig

    from localchat.engine.loading.gguf_header import GGUFHeader

ROPE_FACTORS_LONG, ROPE_FACTORS_SHORT = "rope_factors_long.weight", "rope_factors_short.weight"


def fix_gguf_config(config: "PretrainedConfig", header: "GGUFHeader", tensors: dict[str, list[float]]
                    ) -> None:
    """The sliding window (0: none), the rotary width and the LongRoPE factors, which the file holds as tensors, as
    llama.cpp reads them (transformers' config from the file leaves them out)."""
    from gguf import Keys  # here, not at import: the catalog reads this module fast

    window = header.value(Keys.Attention.SLIDING_WINDOW)
    if window is not None:
        config.sliding_window = window or None
    rope = dict(config.rope_parameters)
    rotary_dims = header.value(Keys.Rope.DIMENSION_COUNT)
    if rotary_dims:
        rope["partial_rotary_factor"] = rotary_dims / (config.hidden_size // config.num_attention_heads)
    if tensors:
        original = header.value(Keys.Rope.SCALING_ORIG_CTX_LEN) or config.max_position_embeddings
        rope.update(rope_type="longrope", long_factor=tensors[ROPE_FACTORS_LONG],
                    short_factor=tensors[ROPE_FACTORS_SHORT], original_max_position_embeddings=original)
        config.original_max_position_embeddings = original
        if (attention_factor := header.value(Keys.Rope.SCALING_ATTN_FACTOR)) is not None:
            rope["attention_factor"] = attention_factor
    config.rope_parameters = rope


FAMILY = ModelFamily(
    model_types=("phi3",),
    model="localchat.engine.worker.models.llama:LlamaForCausalLM",
    gguf_block_names={"attn_qkv": "self_attn.qkv_proj", "ffn_up": "mlp.gate_up_proj"},  # q|k|v and gate|up rows
    gguf_config_tensors=(ROPE_FACTORS_LONG, ROPE_FACTORS_SHORT),
    fix_gguf_config=fix_gguf_config,
)
