"""A GGUF file's weights converted into the forms the engine loads, as its model family's declaration says
(models/family.py: the tensors' Hugging Face names, q/k rows to unpermute, norms to shift, fused layers).

- `write_packed`: the file's quantized matrices as packed weights for torch's weight-only kernels
  (packed_linear.py), by the engine's module names, its small tensors (norms, biases) in float32, and the token
  embedding's raw GGUF rows (the default on CPU);
- `write_dense`: every weight dequantized to float32, by Hugging Face names (quantization="none": exact, for
  comparison with transformers).

The loader calls them once per file and machine (ModelSource.ensure_converted) and keeps what they write.
"""

import mmap
from pathlib import Path

import gguf
import numpy as np
import torch
from safetensors.torch import save_file
from transformers import PretrainedConfig

from localchat.engine.loading.gguf_header import GGUFHeader, TensorInfo, read_header
from localchat.engine.loading.tensor_file import TensorFileWriter
from localchat.engine.worker.models.families import family_for
from localchat.engine.worker.models.family import DECODER_PRECISE_INPUT_LINEARS, ModelFamily
from localchat.engine.worker.packed_linear import GGUFMatrix, HeadRowsEmbedding, PackedLinear, pack

EMBEDDING_TYPE_KEY = "model.embed_tokens.ggml_type"  # the embedding's GGML type id, beside its raw rows
VALUE_DTYPES = {"F32": np.float32, "F16": np.float16}  # the GGUF types GGUFReader gives as values, not as bytes


def map_tensors(path: Path, header: GGUFHeader) -> tuple[np.memmap, list[tuple[TensorInfo, np.ndarray]]]:
    """The file mapped, and each tensor with its data there as gguf's GGUFReader gives it (F32 and F16 values, the
    bytes of other types' rows), located from the header alone: GGUFReader makes numpy objects of every item of every
    metadata array (620 MB and 14 s for a 262,144-token vocabulary)."""
    mapped = np.memmap(path, mode="r")
    tensors = []
    for tensor in header.tensors:
        dims, dtype = tuple(reversed(tensor.shape)), VALUE_DTYPES.get(tensor.type_name)
        if dtype is None:  # rows of blocks, as bytes
            kind = gguf.GGMLQuantizationType[tensor.type_name]
            dtype, dims = np.uint8, gguf.quants.quant_shape_to_byte_shape(dims, kind)
        start = header.data_start + tensor.offset
        size = int(np.prod(dims)) * np.dtype(dtype).itemsize
        tensors.append((tensor, mapped[start : start + size].view(dtype).reshape(dims)))
    return mapped, tensors


def config_tensors(path: Path, header: GGUFHeader, family: ModelFamily) -> dict[str, list[float]]:
    """The family's configuration tensors in the file (ModelFamily.gguf_config_tensors), as float lists."""
    if not family.gguf_config_tensors:
        return {}
    return {info.name: np.asarray(data, dtype=np.float32).tolist() for info, data in map_tensors(path, header)[1]
            if info.name in family.gguf_config_tensors}


def write_dense(path: Path, config: PretrainedConfig, out: Path) -> None:
    """Every weight dequantized to float32, with Hugging Face names."""
    family = family_for(config.model_type)
    tensors = small_tensors(gguf_matrices(map_tensors(path, read_header(path))[1], config), family)
    save_file(tensors, out, metadata={"format": "pt"})


def write_packed(path: Path, config: PretrainedConfig, out: Path) -> None:
    """The engine's module names -> tensors: each linear layer (the family's fused ones stacked) packed by
    packed_linear.pack with its bias; the logits head packed too (from the token embedding when they are
    tied); the token embedding's raw GGUF rows and type, read row by row at run time, unless a tied head's int8
    rows serve (HeadRowsEmbedding); every other tensor (the norms) in float32.

    Written a layer at a time (TensorFileWriter), and the file's pages read so far dropped from this process after
    each layer: packing holds about one layer, not the model (measured by benchmarks/memory.py)."""
    family = family_for(config.model_type)
    mapped, tensors = map_tensors(path, read_header(path))
    matrices = gguf_matrices(tensors, config)
    writer = TensorFileWriter(out)
    try:
        for layer in range(config.num_hidden_layers):
            _add_layer(writer, matrices, f"model.layers.{layer}", family)
            _drop_pages(mapped)
        _add_head_and_embedding(writer, matrices)
        for name, tensor in small_tensors(matrices, family).items():
            writer.add(name, tensor)
    except BaseException:
        writer.abort()
        raise
    writer.close({"format": "pt"})


def _add_layer(writer: TensorFileWriter, matrices: dict[str, GGUFMatrix], prefix: str, family: ModelFamily) -> None:
    """One decoder layer's linear layers, packed (their matrices taken out of `matrices`)."""
    for fused, parts in family.fused_linears.items():
        in_file = (fused,) if f"{prefix}.{fused}.weight" in matrices else parts  # some families' files hold it fused
        _add_linear(writer, matrices, f"{prefix}.{fused}", [f"{prefix}.{p}" for p in in_file])
    for plain in family.plain_linears:
        _add_linear(writer, matrices, f"{prefix}.{plain}", [f"{prefix}.{plain}"])


def _add_linear(writer: TensorFileWriter, matrices: dict[str, GGUFMatrix], module: str, sources: list[str]) -> None:
    precise = any(module.endswith(f".{name}") for name in DECODER_PRECISE_INPUT_LINEARS)
    for key, tensor in pack([matrices.pop(f"{source}.weight") for source in sources], precise_input=precise).items():
        writer.add(f"{module}.{key}", tensor)
    biases = [matrices.pop(f"{s}.bias") for s in sources if f"{s}.bias" in matrices]
    if biases:
        writer.add(f"{module}.bias", torch.cat([_dequantized(b) for b in biases]))


def _add_head_and_embedding(writer: TensorFileWriter, matrices: dict[str, GGUFMatrix]) -> None:
    embedding = matrices.pop("model.embed_tokens.weight")
    head = matrices.pop("lm_head.weight", embedding)
    packed_head = pack([head], head=True)
    for key, tensor in packed_head.items():
        writer.add(f"lm_head.{key}", tensor)
    if head is not embedding or not HeadRowsEmbedding.fits(PackedLinear(packed_head)):
        writer.add("model.embed_tokens.raw", torch.from_numpy(np.array(embedding.data).view(np.uint8)))
        writer.add(EMBEDDING_TYPE_KEY, torch.tensor([int(embedding.tensor_type)]))


def gguf_matrices(tensors: list[tuple[TensorInfo, np.ndarray]], config: PretrainedConfig) -> dict[str, GGUFMatrix]:
    """Every weight of the file (as map_tensors gives them) by its Hugging Face name, with the row order that undoes
    llama.cpp's permutation of q and k where the family's files have it (its rotary layout)."""
    family = family_for(config.model_type)
    matrices = {}
    for tensor, data in tensors:
        if tensor.name in family.gguf_config_tensors:
            continue
        hf_name = family.hf_name(tensor.name)
        shape = (data.shape[0], tensor.shape[0]) if len(tensor.shape) == 2 else (tensor.shape[0],)
        heads = None
        if family.gguf_permutes_qk and ".self_attn.q_proj." in hf_name:
            heads = config.num_attention_heads
        elif family.gguf_permutes_qk and ".self_attn.k_proj." in hf_name:
            heads = config.num_key_value_heads
        rows = unpermute(np.arange(shape[0]), heads) if heads else None
        matrices[hf_name] = GGUFMatrix(data, gguf.GGMLQuantizationType[tensor.type_name], shape, rows)
    return matrices


def small_tensors(matrices: dict[str, GGUFMatrix], family: ModelFamily) -> dict[str, torch.Tensor]:
    """Tensors kept in float32 by their Hugging Face names, with the norm weights w shifted back where the family's
    files store them as 1 + w (llama.cpp's RMSNorm multiplies by the weight; transformers' GGUF loading subtracts
    the same 1)."""
    shift = family.gguf_norms_plus_one
    return {name: _dequantized(m) - 1 if shift and name.endswith("norm.weight") else _dequantized(m)
            for name, m in matrices.items()}


def unpermute(weight: np.ndarray, n_head: int) -> np.ndarray:
    """Undo llama.cpp's `w.reshape(n_head, 2, head_dim // 2, *rest).swapaxes(1, 2)` of q/k rows."""
    rest = weight.shape[1:]
    return weight.reshape(n_head, -1, 2, *rest).swapaxes(1, 2).reshape(weight.shape)


def _dequantized(matrix: GGUFMatrix) -> torch.Tensor:
    weight = np.array(gguf.quants.dequantize(matrix.data, matrix.tensor_type), dtype=np.float32)
    return torch.from_numpy(weight if matrix.rows is None else weight[matrix.rows])


def _drop_pages(mapped: np.memmap) -> None:
    """Let go of the file's pages this process has read through its memory map (they stay in the page cache):
    otherwise every page read counts in the process's resident memory until the end."""
    mapping = getattr(mapped, "_mmap", None)  # numpy.memmap's mmap.mmap
    if mapping is not None and hasattr(mmap, "MADV_DONTNEED"):
        mapping.madvise(mmap.MADV_DONTNEED)
