"""Gemma 3 (`gemma3_text`, and the text part of the multimodal `gemma3` checkpoints) over a flat batch and a paged
KV cache: Llama's attention layer, MLP and weight loading, with Gemma's own parts.

- RMSNorm as x * (1 + w), computed in float32; q and k normalized per head the same way;
- the embeddings scaled by sqrt(hidden_size), rounded to the model's dtype as transformers does;
- GeGLU (gelu, tanh approximation) in the MLP;
- four norms per layer: before and after attention, before and after the MLP;
- attention scaled by query_pre_attn_scalar ** -0.5;
- interleaved layers (`layer_types`): sliding-window layers with their local rotary base and full-attention layers
  with the global base and any rope scaling;
- the logits soft-capped when final_logit_softcapping is set; tied embeddings.
"""

import torch
from torch import nn
from transformers import PretrainedConfig

from localchat.engine.worker.attention import AttentionMetadata
from localchat.engine.worker.models import head_dim
from localchat.engine.worker.models.llama import MLP, Attention, LlamaForCausalLM, RotaryEmbedding

# weights of a multimodal checkpoint that the text model does not use
VISION_PREFIXES = ("vision_tower.", "multi_modal_projector.", "model.vision_tower.", "model.multi_modal_projector.")
# where a multimodal checkpoint puts the text model: transformers' own layout, then the older one on the Hub
LANGUAGE_MODEL_PREFIXES = ("model.language_model.", "language_model.model.", "language_model.")


class GemmaRMSNorm(nn.Module):
    """x / rms(x) * (1 + w) in float32, cast back to x's dtype (transformers' Gemma3RMSNorm): a checkpoint's w is
    centered on 0."""

    def __init__(self, size: int, eps: float):
        super().__init__()
        self.weight = nn.Parameter(torch.zeros(size))
        self.eps = eps

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        normed = nn.functional.rms_norm(x.float(), self.weight.shape, eps=self.eps)
        return (normed * (1.0 + self.weight.float())).type_as(x)


class Gemma3Attention(Attention):
    def __init__(self, config: PretrainedConfig, window: int | None = None):
        super().__init__(config, window)
        self.scale = config.query_pre_attn_scalar**-0.5
        self.q_norm = GemmaRMSNorm(self.head_dim, config.rms_norm_eps)
        self.k_norm = GemmaRMSNorm(self.head_dim, config.rms_norm_eps)


class Gemma3DecoderLayer(nn.Module):
    def __init__(self, config: PretrainedConfig, window: int | None = None):
        super().__init__()
        size, eps = config.hidden_size, config.rms_norm_eps
        self.input_layernorm = GemmaRMSNorm(size, eps)
        self.self_attn = Gemma3Attention(config, window)
        self.post_attention_layernorm = GemmaRMSNorm(size, eps)
        self.pre_feedforward_layernorm = GemmaRMSNorm(size, eps)
        self.mlp = MLP(config)
        self.post_feedforward_layernorm = GemmaRMSNorm(size, eps)

    def forward(self, rope: tuple[torch.Tensor, torch.Tensor], x: torch.Tensor, meta: AttentionMetadata
                ) -> torch.Tensor:
        x = x + self.post_attention_layernorm(self.self_attn(rope, self.input_layernorm(x), meta))
        return x + self.post_feedforward_layernorm(self.mlp(self.pre_feedforward_layernorm(x)))


class Gemma3ForCausalLM(LlamaForCausalLM):
    layer_class = Gemma3DecoderLayer
    norm_class = GemmaRMSNorm

    def __init__(self, config: PretrainedConfig, max_positions: int, rope_device: torch.device):
        if getattr(config, "use_bidirectional_attention", False):
            raise ValueError("Gemma 3 with bidirectional attention (an embedding model) cannot generate text")
        if getattr(config, "attn_logit_softcapping", None) is not None:
            raise ValueError("Gemma 3 with attn_logit_softcapping is not supported (no Gemma 3 release sets it)")
        super().__init__(config, max_positions, rope_device)

    def build_rotary(self, max_positions: int, device: torch.device) -> nn.Module:
        """A rotary table per kind of layer: the sliding layers' local base, the global layers' base and scaling."""
        kinds = sorted(set(self.config.layer_types))
        return nn.ModuleDict({kind: RotaryEmbedding(self.config, head_dim(self.config), max_positions, device, kind)
                              for kind in kinds})

    def forward(self, input_ids: torch.Tensor, meta: AttentionMetadata) -> torch.Tensor:
        x = self.embed_tokens(input_ids)
        x = x * torch.tensor(self.config.hidden_size**0.5).to(x.dtype).item()  # the scale in the model's dtype
        ropes = {kind: rotary(meta, x.dtype) for kind, rotary in self.rotary.items()}
        for layer, kind in zip(self.layers, self.config.layer_types):
            x = layer(ropes[kind], x, meta)
        return self.norm(x)

    def checkpoint_name(self, name: str) -> str | None:
        """The text model's weights in a text-only or a multimodal checkpoint; None for the vision tower's."""
        if name.startswith(VISION_PREFIXES):
            return None
        prefix = next((p for p in LANGUAGE_MODEL_PREFIXES if name.startswith(p)), "")
        return super().checkpoint_name(name.removeprefix(prefix))
