"""The Llama family (Llama 2/3, SmolLM2, Mistral, Qwen2/2.5, Qwen3, Phi-3) over a flat batch and a paged KV cache.

Phi-3 is Llama with its projections already fused in the checkpoint (qkv_proj, gate_up_proj), a rotary embedding
over part of each head (partial_rotary_factor) and LongRoPE scaling. Mistral and Phi-3 attend within a sliding
window, as do the sliding layers of Qwen2/Qwen3 configs that use one (layer_windows)."""

from collections.abc import Iterable

import torch
from torch import nn
from transformers import PretrainedConfig
from transformers.modeling_rope_utils import ROPE_INIT_FUNCTIONS

from localchat.engine.worker import native_kernels
from localchat.engine.worker.attention import AttentionMetadata
from localchat.engine.worker.models import head_dim
from localchat.engine.worker.models.families import family_for
from localchat.engine.worker.packed_linear import GGUFEmbedding, HeadRowsEmbedding, PackedLinear

ACTIVATIONS = {"silu": nn.functional.silu, "gelu_pytorch_tanh": lambda x: nn.functional.gelu(x, approximate="tanh")}
# positions of a rotary table computed at once, when a step first reaches them: with heads up to 256 wide, under
# torch's 32,768 elements per thread, so one thread computes each and the table's values depend neither on the
# thread count nor on the order in which steps reach them
ROPE_POSITIONS_AT_ONCE = 64


def layer_windows(config: PretrainedConfig) -> list[int | None]:
    """Each layer's sliding window w (the token at position q sees the keys at q - w < p <= q, transformers'
    convention), None for a layer that sees its whole context. As transformers reads a config: with `layer_types`
    (Gemma 3, Qwen2/3) the "sliding_attention" layers have the window, else (Mistral, Phi-3) every layer has it;
    no window when `sliding_window` is unset (Qwen2/3 unset it unless `use_sliding_window`)."""
    window = getattr(config, "sliding_window", None)
    if not window or getattr(config, "use_sliding_window", True) is False:
        window = None
    layer_types = getattr(config, "layer_types", None)
    if layer_types is not None:
        return [window if kind == "sliding_attention" else None for kind in layer_types]
    return [window] * config.num_hidden_layers


class RMSNorm(nn.Module):
    def __init__(self, size: int, eps: float):
        super().__init__()
        self.weight = nn.Parameter(torch.ones(size))
        self.eps = eps

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        kernels = native_kernels.load()
        if (kernels is not None and x.dtype == self.weight.dtype == torch.float32 and x.device.type == "cpu"
                and x.is_contiguous()):
            return kernels.rms_norm(x, self.weight, self.eps)  # one call, where torch's CPU norm runs ten
        return nn.functional.rms_norm(x, self.weight.shape, self.weight, self.eps)


class RotaryEmbedding(nn.Module):
    def __init__(self, config: PretrainedConfig, dim: int, max_positions: int, device: torch.device,
                 layer_type: str | None = None):
        """The cos and sin tables of positions [0, max_positions) for heads of size dim, from the config's rope
        parameters (those of layer_type's layers where they differ by layer, as in Gemma 3). Only the first
        partial_rotary_factor of each head rotates. The tables are computed as far as steps reach, like the KV
        cache they serve: a whole context's take memory (134 MB for Gemma 3's two of 32,768 x 256 in float32)."""
        super().__init__()
        rope = getattr(config, "rope_parameters", None) or {}
        rope = dict(rope[layer_type] if layer_type is not None else rope)
        rope_type = rope.get("rope_type", rope.get("type", "default"))
        rotary_dim = int(dim * rope.get("partial_rotary_factor", 1.0))
        with torch.device(device):  # the model itself may be built on the meta device
            if rope_type == "default":
                base = rope.get("rope_theta", getattr(config, "rope_theta", 10000.0))
                inv_freq = 1.0 / (base ** (torch.arange(0, rotary_dim, 2, dtype=torch.float) / rotary_dim))
                scaling = 1.0
            else:
                kwargs = {} if layer_type is None else {"layer_type": layer_type}
                if rope_type == "longrope":
                    # its long factors when the engine may run past the original context, for every position (as
                    # vLLM does; transformers switches by the length of the sequence at hand, which a cache cannot)
                    kwargs["seq_len"] = max_positions
                inv_freq, scaling = ROPE_INIT_FUNCTIONS[rope_type](config, device, **kwargs)
            self.register_buffer("inv_freq", inv_freq, persistent=False)
            self.register_buffer("cos", torch.empty(max_positions, 2 * len(inv_freq)), persistent=False)
            self.register_buffer("sin", torch.empty_like(self.cos), persistent=False)
        self.scaling = scaling
        self.computed = 0  # the tables hold positions [0, computed)

    def forward(self, meta: AttentionMetadata, dtype: torch.dtype) -> tuple[torch.Tensor, torch.Tensor]:
        """cos and sin [tokens, 1, rotary_dim] of a step's positions, computed once for every layer."""
        self._compute(max(meta.seq_lens))
        positions = meta.positions
        return self.cos[positions].to(dtype)[:, None, :], self.sin[positions].to(dtype)[:, None, :]

    def _compute(self, end: int) -> None:
        """Fill the tables up to position `end`, ROPE_POSITIONS_AT_ONCE at a time."""
        while self.computed < min(end, len(self.cos)):
            start, stop = self.computed, min(self.computed + ROPE_POSITIONS_AT_ONCE, len(self.cos))
            positions = torch.arange(start, stop, dtype=torch.float, device=self.inv_freq.device)
            freqs = positions[:, None] * self.inv_freq[None, :]
            emb = torch.cat((freqs, freqs), dim=-1)
            self.cos[start:stop] = emb.cos() * self.scaling
            self.sin[start:stop] = emb.sin() * self.scaling
            self.computed = stop


def rotate(x: torch.Tensor, rope: tuple[torch.Tensor, torch.Tensor]) -> torch.Tensor:
    """x [tokens, heads, head_dim] rotated by its tokens' positions (its first rotary_dim features)."""
    cos, sin = rope
    if cos.shape[-1] < x.shape[-1]:  # a partial rotary embedding: the rest of each head passes through
        return torch.cat((rotate(x[..., : cos.shape[-1]], rope), x[..., cos.shape[-1] :]), dim=-1)
    half = x.shape[-1] // 2
    return x * cos + torch.cat((-x[..., half:], x[..., :half]), dim=-1) * sin


class Attention(nn.Module):
    def __init__(self, config: PretrainedConfig, window: int | None = None):
        """window: this layer's sliding window (see layer_windows), None for the whole context."""
        super().__init__()
        self.window = window
        self.num_heads = config.num_attention_heads
        self.num_kv_heads = config.num_key_value_heads
        self.head_dim = head_dim(config)
        self.scale = self.head_dim**-0.5
        family = family_for(config.model_type)
        attention_bias = getattr(config, "attention_bias", False)
        self.q_size, self.kv_size = self.num_heads * self.head_dim, self.num_kv_heads * self.head_dim
        self.qkv_proj = nn.Linear(config.hidden_size, self.q_size + 2 * self.kv_size,
                                  bias=attention_bias or family.qkv_bias)
        self.o_proj = nn.Linear(self.q_size, config.hidden_size, bias=attention_bias)
        if family.qk_norm:
            self.q_norm = RMSNorm(self.head_dim, config.rms_norm_eps)
            self.k_norm = RMSNorm(self.head_dim, config.rms_norm_eps)
        else:
            self.q_norm = self.k_norm = None
        # bound by the model runner: the attention backend and this layer's part of the KV cache
        self.backend = None
        self.k_cache = self.v_cache = torch.empty(0)

    def forward(self, rope: tuple[torch.Tensor, torch.Tensor], x: torch.Tensor, meta: AttentionMetadata
                ) -> torch.Tensor:
        qkv = self.qkv_proj(x)
        heads = self.num_heads + self.num_kv_heads
        v = qkv[:, self.q_size + self.kv_size :].view(-1, self.num_kv_heads, self.head_dim)
        qk = qkv[:, : self.q_size + self.kv_size].view(-1, heads, self.head_dim)
        if self.q_norm is not None:
            qk = torch.cat((self.q_norm(qk[:, : self.num_heads]), self.k_norm(qk[:, self.num_heads :])), dim=1)
        qk = rotate(qk, rope)  # q and k in one pass
        q, k = qk[:, : self.num_heads], qk[:, self.num_heads :]
        self.backend.store(k, v, self.k_cache, self.v_cache, meta.slot_mapping)
        out = self.backend.attend(q, self.k_cache, self.v_cache, meta, self.scale, self.window)
        return self.o_proj(out.view(-1, self.q_size))


class MLP(nn.Module):
    def __init__(self, config: PretrainedConfig):
        super().__init__()
        bias = getattr(config, "mlp_bias", False)
        self.intermediate_size = config.intermediate_size
        self.gate_up_proj = nn.Linear(config.hidden_size, 2 * config.intermediate_size, bias=bias)
        self.down_proj = nn.Linear(config.intermediate_size, config.hidden_size, bias=bias)
        activation = getattr(config, "hidden_activation", None) or getattr(config, "hidden_act", "silu")
        if activation not in ACTIVATIONS:
            raise ValueError(f"unsupported activation {activation!r}; supported: {', '.join(ACTIVATIONS)}")
        self.activation = ACTIVATIONS[activation]

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        gate_up = self.gate_up_proj(x)
        kernels = native_kernels.load()
        if (kernels is not None and self.activation is nn.functional.silu and gate_up.dtype == torch.float32
                and gate_up.device.type == "cpu" and gate_up.is_contiguous()):
            return self.down_proj(kernels.silu_mul(gate_up))  # the fused layers' SiLU (fused_decoder.py): same bits
        gate, up = gate_up.split(self.intermediate_size, dim=-1)
        return self.down_proj(self.activation(gate) * up)


class DecoderLayer(nn.Module):
    def __init__(self, config: PretrainedConfig, window: int | None = None):
        super().__init__()
        self.input_layernorm = RMSNorm(config.hidden_size, config.rms_norm_eps)
        self.self_attn = Attention(config, window)
        self.post_attention_layernorm = RMSNorm(config.hidden_size, config.rms_norm_eps)
        self.mlp = MLP(config)

    def forward(self, rope: tuple[torch.Tensor, torch.Tensor], x: torch.Tensor, meta: AttentionMetadata
                ) -> torch.Tensor:
        x = x + self.self_attn(rope, self.input_layernorm(x), meta)
        return x + self.mlp(self.post_attention_layernorm(x))


class LlamaForCausalLM(nn.Module):
    """A decoder over the paged cache; another family subclasses it with its own layer_class and norm_class (and
    whatever of build_rotary, forward and checkpoint_name differs)."""

    layer_class = DecoderLayer  # built as layer_class(config, window)
    norm_class = RMSNorm

    def __init__(self, config: PretrainedConfig, max_positions: int, rope_device: torch.device):
        """Build under torch.device("meta") and call load_weights: the rotary tables go to rope_device."""
        super().__init__()
        self.config = config
        self.family = family_for(config.model_type)
        self.rotary = self.build_rotary(max_positions, rope_device)
        # an explicit weight skips Embedding's normal_ init, which on the meta device imports torch._dynamo (~1 s)
        self.embed_tokens = nn.Embedding(config.vocab_size, config.hidden_size,
                                         _weight=torch.empty(config.vocab_size, config.hidden_size))
        self.layers = nn.ModuleList(self.layer_class(config, window) for window in layer_windows(config))
        self.norm = self.norm_class(config.hidden_size, config.rms_norm_eps)
        self.final_logit_softcapping = getattr(config, "final_logit_softcapping", None)
        self.tie_word_embeddings = getattr(config, "tie_word_embeddings", False)
        self.lm_head = (None if self.tie_word_embeddings
                        else nn.Linear(config.hidden_size, config.vocab_size, bias=False))

    def build_rotary(self, max_positions: int, device: torch.device) -> nn.Module:
        return RotaryEmbedding(self.config, head_dim(self.config), max_positions, device)

    def forward(self, input_ids: torch.Tensor, meta: AttentionMetadata) -> torch.Tensor:
        """Hidden states [num_tokens, hidden] of one flat batch of new tokens."""
        x = self.embed_tokens(input_ids)
        rope = self.rotary(meta, x.dtype)
        for layer in self.layers:
            x = layer(rope, x, meta)
        return self.norm(x)

    def compute_logits(self, hidden: torch.Tensor) -> torch.Tensor:
        """float32 logits; a tied head multiplies by the embedding; Gemma's soft cap: cap * tanh(logits / cap)."""
        if self.lm_head is None:
            logits = torch.nn.functional.linear(hidden, self.embed_tokens.weight).float()
        else:
            logits = self.lm_head(hidden).float()
        if self.final_logit_softcapping:
            logits = torch.tanh(logits / self.final_logit_softcapping) * self.final_logit_softcapping
        return logits

    @torch.no_grad()
    def load_weights(self, weights: Iterable[tuple[str, torch.Tensor]], dtype: torch.dtype,
                     device: torch.device) -> None:
        """Replace every parameter with the checkpoint's tensor (HF names), stacking the family's fused layers
        (q/k/v and gate/up)."""
        params = dict(self.named_parameters())
        fused_parts = self.family.fused_parts
        shards: dict[str, dict[int, torch.Tensor]] = {}
        for name, tensor in weights:
            name = self.checkpoint_name(name)
            if name is None or (name == "lm_head.weight" and self.lm_head is None):
                continue
            part = next((p for p in fused_parts if f".{p}." in name), None)
            shard = 0
            if part is not None:
                fused, shard = fused_parts[part]
                name = name.replace(part, fused)
            if name not in params:
                raise ValueError(f"the checkpoint has a weight this model does not: {name}")
            shards.setdefault(name, {})[shard] = tensor
        missing = sorted(set(params) - set(shards))
        if missing:
            raise ValueError(f"weights missing from the checkpoint: {missing[:5]}")
        for name, parts in shards.items():
            tensor = torch.cat([parts[i] for i in sorted(parts)]) if len(parts) > 1 else parts[0]
            if tensor.shape != params[name].shape:
                raise ValueError(f"weight {name} has shape {tuple(tensor.shape)}, expected {tuple(params[name].shape)}")
            module, attr = name.rsplit(".", 1)
            param = torch.nn.Parameter(tensor.to(device=device, dtype=dtype), requires_grad=False)
            setattr(self.get_submodule(module), attr, param)

    def checkpoint_name(self, name: str) -> str | None:
        """This model's parameter name for a checkpoint's weight name; None for a weight it does not use."""
        return name.removeprefix("model.")

    @torch.no_grad()
    def load_packed(self, tensors: Iterable[tuple[str, torch.Tensor]], dtype: torch.dtype,
                    device: torch.device) -> None:
        """A GGUF's weights as loader.load_packed gives them: each linear layer (and the logits head) becomes a
        PackedLinear, the embedding a GGUFEmbedding over its raw rows (or the rows of a tied int8 head), and the
        rest (norms) load as usual."""
        by_module: dict[str, dict[str, torch.Tensor]] = {}
        dense = {}
        packed_modules = self._packed_modules()
        for name, tensor in tensors:
            short = name.removeprefix("model.")
            module = next((m for m in packed_modules if short.startswith(m + ".")), None)
            if module is None:
                dense[name] = tensor
            else:
                by_module.setdefault(module, {})[short[len(module) + 1:]] = tensor
        for module, parts in by_module.items():
            parent, _, attr = module.rpartition(".")
            if module == "embed_tokens":
                self.embed_tokens = GGUFEmbedding(parts["raw"], int(parts["ggml_type"]), dtype)
            else:
                setattr(self.get_submodule(parent) if parent else self, attr, PackedLinear(parts))
        if "embed_tokens" not in by_module:  # tied to a per-row int8 head: its rows
            self.embed_tokens = HeadRowsEmbedding(self.lm_head, dtype)
        self.load_weights(dense.items(), dtype, device)

    def _packed_modules(self) -> list[str]:
        linears = [name for name, module in self.named_modules() if isinstance(module, nn.Linear | PackedLinear)]
        return ["embed_tokens", "lm_head", *linears]
