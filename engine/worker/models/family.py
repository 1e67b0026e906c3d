"""What the engine knows about one family of models, declared in one module of families/ and read by the loader,
the model runner and the model catalog. Light: no torch, no transformers, no gguf (the catalog reads it fast).

The GGUF fields say how llama.cpp's converter writes a family's files; the rest, how the engine runs it."""

import importlib
from collections.abc import Callable, Mapping
from dataclasses import dataclass, field
from typing import TYPE_CHECKING

from localchat.engine.loading.recommended_sampling import FamilySampling

if TYPE_CHECKING:
    from transformers import PretrainedConfig

    from localchat.engine.loading.gguf_header import GGUFHeader

# GGUF tensor names -> Hugging Face names; block tensors are `blk.N.<part>.<weight|bias>`.
GGUF_TOP_LEVEL_NAMES = {"token_embd": "model.embed_tokens", "output_norm": "model.norm", "output": "lm_head"}
GGUF_BLOCK_NAMES = {
    "attn_q": "self_attn.q_proj",
    "attn_k": "self_attn.k_proj",
    "attn_v": "self_attn.v_proj",
    "attn_output": "self_attn.o_proj",
    "attn_q_norm": "self_attn.q_norm",
    "attn_k_norm": "self_attn.k_norm",
    "ffn_gate": "mlp.gate_proj",
    "ffn_up": "mlp.up_proj",
    "ffn_down": "mlp.down_proj",
    "attn_norm": "input_layernorm",
    "ffn_norm": "post_attention_layernorm",
}
# the linear layers of a decoder layer (models/llama.py's Attention and MLP): the fused ones with the Hugging Face
# matrices stacked into each (in this order), and the others
DECODER_FUSED_LINEARS = {"self_attn.qkv_proj": ("self_attn.q_proj", "self_attn.k_proj", "self_attn.v_proj"),
                         "mlp.gate_up_proj": ("mlp.gate_proj", "mlp.up_proj")}
DECODER_PLAIN_LINEARS = ("self_attn.o_proj", "mlp.down_proj")
# the linear layer whose input (the attention norm's output) has the widest outlier channels: under int8
# activations it gets a second pass for their rounding (packed_linear._Panels)
DECODER_PRECISE_INPUT_LINEARS = ("self_attn.qkv_proj",)

# (config, the file's header, the file's gguf_config_tensors by name as float lists) -> None; changes config
GGUFConfigFix = Callable[["PretrainedConfig", "GGUFHeader", dict[str, list[float]]], None]


@dataclass(frozen=True)
class ModelFamily:
    """One family's declaration: the loader converts and checks its files by it, the model runner builds its model
    class, and the catalog lists its model types as supported."""

    model_types: tuple[str, ...]  # the config model_types it serves, which name a GGUF's general.architecture too
    model: str  # its torch model, "module:Class", imported only when a model is built (model_class)
    # the Llama decoder's options (models/llama.py): q, k and v projections with a bias whatever the config says;
    # q and k RMS-normalized per head before the rotary embedding
    qkv_bias: bool = False
    qk_norm: bool = False
    fused_linears: Mapping[str, tuple[str, ...]] = field(default_factory=lambda: DECODER_FUSED_LINEARS)
    plain_linears: tuple[str, ...] = DECODER_PLAIN_LINEARS
    # GGUF: block tensor names that differ from GGUF_BLOCK_NAMES (llama.cpp names a tensor by its role)
    gguf_block_names: Mapping[str, str] = field(default_factory=dict)
    gguf_permutes_qk: bool = False  # q and k rows in llama.cpp's rotary layout (gguf_conversion.unpermute)
    gguf_norms_plus_one: bool = False  # norm weights w stored as 1 + w
    gguf_config_tensors: tuple[str, ...] = ()  # tensors that are configuration, not weights (read by fix_gguf_config)
    fix_gguf_config: GGUFConfigFix | None = None  # what transformers' config from a GGUF file leaves out
    # the sampling values the family's authors publish, by what a model's name holds (the first entry that matches),
    # for files that carry none of their own (recommended_sampling.py)
    sampling: tuple[FamilySampling, ...] = ()

    def model_class(self) -> type:
        module, name = self.model.split(":")
        return getattr(importlib.import_module(module), name)

    def hf_name(self, gguf_name: str) -> str:
        """The Hugging Face name of a GGUF tensor of this family's files."""
        stem, suffix = gguf_name.rsplit(".", 1)
        if stem.startswith("blk."):
            _, layer, part = stem.split(".", 2)
            names = {**GGUF_BLOCK_NAMES, **self.gguf_block_names}
            if part in names:
                return f"model.layers.{layer}.{names[part]}.{suffix}"
        elif stem in GGUF_TOP_LEVEL_NAMES:
            return f"{GGUF_TOP_LEVEL_NAMES[stem]}.{suffix}"
        raise ValueError(f"unsupported GGUF tensor {gguf_name!r}")

    @property
    def fused_parts(self) -> dict[str, tuple[str, int]]:
        """Each matrix stacked into a fused linear layer: (that layer, its place in the stack)."""
        return {part: (fused, shard) for fused, parts in self.fused_linears.items() for shard, part in enumerate(parts)}
