"""A Llama-family model's decoder layers in one native call a step (native/decoder_layers.c), where torch would
dispatch some thirty operators a layer: for a small model's decode step, most of its time.

It runs where the native kernels load and the model is one they cover whole: packed weights held as the kernels'
panels, float32 activations, the native paged attention, a SiLU MLP, a rotary embedding over whole heads, no q/k
norm (llama.py's DecoderLayer: Llama, SmolLM2, Mistral, Qwen2). Its bits are the torch path's (the native kernels
there too; decoder_layers.c's header says how), so the engine may run either. `build` says None elsewhere, and the
model runner keeps the torch path."""

import ctypes
import logging
from dataclasses import dataclass

import torch

from localchat.engine.worker import native_kernels
from localchat.engine.worker.attention import AttentionMetadata, NativePagedAttention
from localchat.engine.worker.models.llama import DecoderLayer, LlamaForCausalLM, RMSNorm
from localchat.engine.worker.packed_linear import PackedLinear

log = logging.getLogger(__name__)
_p, _i64, _i32, _f32 = ctypes.c_void_p, ctypes.c_int64, ctypes.c_int32, ctypes.c_float


class _Part(ctypes.Structure):
    _fields_ = [("panels", _p), ("out_features", _i64), ("bits", _i32), ("passes", _i32)]


class _Linear(ctypes.Structure):
    _fields_ = [("parts", ctypes.POINTER(_Part)), ("num_parts", _i64), ("in_features", _i64),
                ("out_features", _i64), ("bias", _p)]


class _Layer(ctypes.Structure):
    _fields_ = [("input_norm", _p), ("post_norm", _p), ("qkv", _Linear), ("o", _Linear), ("gate_up", _Linear),
                ("down", _Linear), ("k_cache", _p), ("v_cache", _p), ("window", _i64)]


class _Model(ctypes.Structure):
    _fields_ = [("hidden", _i64), ("heads", _i64), ("kv_heads", _i64), ("dim", _i64), ("intermediate", _i64),
                ("block_size", _i64), ("cache_bf16", _i32), ("eps", _f32), ("scale", _f32), ("cos", _p),
                ("sin", _p)]


class _Step(ctypes.Structure):
    _fields_ = [("tokens", _i64), ("table_width", _i64), ("positions", _p), ("slots", _p), ("token_seqs", _p),
                ("block_tables", _p), ("x", _p), ("threads", _i32)]


class _Scratch(ctypes.Structure):
    _fields_ = [(name, _p) for name in ("h", "qkv", "q", "attn", "part", "gu", "act", "codes", "scales")]


@dataclass
class _Buffers:
    """The scratch of a step of up to `tokens` tokens (grown when a step needs more, never shrunk)."""

    tokens: int
    tensors: dict[str, torch.Tensor]
    struct: _Scratch


class FusedDecoder:
    def __init__(self, model: LlamaForCausalLM, kernels: native_kernels.Kernels):
        self.model, self.kernels = model, kernels
        first = model.layers[0]
        attn, config = first.self_attn, model.config
        self.widths = {"hidden": config.hidden_size, "q": attn.q_size, "qkv": attn.q_size + 2 * attn.kv_size,
                       "intermediate": first.mlp.intermediate_size}
        self._keep: list = []  # the ctypes arrays the structs point into
        self.layers = (_Layer * len(model.layers))(*(self._layer(layer) for layer in model.layers))
        rotary = model.rotary
        self.struct = _Model(config.hidden_size, attn.num_heads, attn.num_kv_heads, attn.head_dim,
                             first.mlp.intermediate_size, attn.k_cache.shape[1],
                             int(attn.k_cache.dtype == torch.bfloat16), first.input_layernorm.eps, attn.scale,
                             rotary.cos.data_ptr(), rotary.sin.data_ptr())
        self.buffers: _Buffers | None = None

    @classmethod
    def build(cls, model: torch.nn.Module) -> "FusedDecoder | None":
        """The fused layers of a model whose every part they cover, after the model runner bound the layers' caches
        and attention backend; None where they cannot run it (the torch path runs it, and the log says why once)."""
        kernels = native_kernels.load()
        reason = "the native kernels are off" if kernels is None else cls.uncovered(model)
        if reason is not None:
            log.info("decoder layers run as torch operators: %s", reason)
            return None
        log.info("decoder layers run in one native call a step (fused_decoder.py)")
        return cls(model, kernels)

    @staticmethod
    def uncovered(model: torch.nn.Module) -> str | None:
        """What of the model the fused layers do not cover; None: they cover it whole."""
        if type(model) is not LlamaForCausalLM:
            return f"{type(model).__name__} has layers of its own"
        if model.rotary.cos.device.type != "cpu":
            return "not on the CPU"
        for layer in model.layers:
            attn, mlp = layer.self_attn, layer.mlp
            linears = (attn.qkv_proj, attn.o_proj, mlp.gate_up_proj, mlp.down_proj)
            checks = {"a q/k norm": attn.q_norm is None, "attention other than the native kernel's":
                      attn.backend is NativePagedAttention, "an activation other than SiLU":
                      mlp.activation is torch.nn.functional.silu, "a rotary embedding over part of each head":
                      model.rotary.cos.shape[-1] == attn.head_dim, "float32 norms":
                      type(layer.input_layernorm) is RMSNorm and layer.input_layernorm.weight.dtype == torch.float32,
                      "weights not held as the kernels' panels": all(map(_panels_only, linears))}
            missing = [what for what, ok in checks.items() if not ok]
            if type(layer) is not DecoderLayer or missing:
                return f"{', '.join(missing) or type(layer).__name__}"
        return None

    def _linear(self, linear: PackedLinear) -> _Linear:
        parts = (_Part * len(linear.parts))(*(_Part(part.panels.data_ptr(), part.out_features, part.code_bits,
                                                    part.code_passes) for part in linear.parts))
        self._keep.append(parts)
        bias = linear.bias.data_ptr() if linear.bias is not None else None
        return _Linear(parts, len(linear.parts), linear.in_features, linear.out_features, bias)

    def _layer(self, layer: DecoderLayer) -> _Layer:
        attn, mlp = layer.self_attn, layer.mlp
        return _Layer(layer.input_layernorm.weight.data_ptr(), layer.post_attention_layernorm.weight.data_ptr(),
                      self._linear(attn.qkv_proj), self._linear(attn.o_proj), self._linear(mlp.gate_up_proj),
                      self._linear(mlp.down_proj), attn.k_cache.data_ptr(), attn.v_cache.data_ptr(), attn.window or 0)

    def _scratch(self, tokens: int) -> _Scratch:
        if self.buffers is None or self.buffers.tokens < tokens:
            w = self.widths
            widest_out = max(w["hidden"], w["qkv"], 2 * w["intermediate"])
            widest_in = max(w["hidden"], w["q"], w["intermediate"])
            shapes = {"h": (tokens, max(w["hidden"], w["q"])), "qkv": (tokens, w["qkv"]), "q": (tokens, w["q"]),
                      "attn": (tokens, w["q"]), "part": (tokens, widest_out), "gu": (tokens, 2 * w["intermediate"]),
                      "act": (tokens, w["intermediate"]),
                      "scales": (4, 2 * tokens, widest_in // native_kernels.GROUP)}
            tensors = {name: torch.empty(shape) for name, shape in shapes.items()}
            tensors["codes"] = torch.empty(2 * tokens, widest_in, dtype=torch.int8)
            struct = _Scratch(**{name: tensors[name].data_ptr() for name, _ in _Scratch._fields_})
            self.buffers = _Buffers(tokens, tensors, struct)
        return self.buffers.struct

    def forward(self, input_ids: torch.Tensor, meta: AttentionMetadata) -> torch.Tensor:
        """Hidden states [num_tokens, hidden] of one flat batch of new tokens, as LlamaForCausalLM.forward."""
        model = self.model
        x = model.embed_tokens(input_ids).float().contiguous()
        model.rotary(meta, x.dtype)  # its tables reach this step's positions
        tables = meta.block_tables
        step = _Step(len(input_ids), tables.shape[1], meta.positions.data_ptr(), meta.slot_mapping.data_ptr(),
                     meta.token_seqs.data_ptr(), tables.data_ptr(), x.data_ptr(), torch.get_num_threads())
        scratch = self._scratch(len(input_ids))
        self.kernels.library.decoder_layers(ctypes.addressof(self.struct), ctypes.addressof(self.layers),
                                            len(model.layers), ctypes.addressof(step), ctypes.addressof(scratch))
        return model.norm(x)


def _panels_only(linear: torch.nn.Module) -> bool:
    return isinstance(linear, PackedLinear) and linear.on_panels
