"""A larger GGUF to measure with when no real one can be downloaded: a Llama-architecture file of about a billion
weights, laid out like a Q4_K_M download (Q4_K matrices, Q6_K for attn_v, half of ffn_down and the embedding,
float32 norms), with random but valid blocks and the embedded model's tokenizer and chat template. Its replies
are noise; its size, memory and speed are those of a real file of its shape.

    python benchmarks/synthetic_gguf.py OUT.gguf [--hidden 2048 --layers 16 --intermediate 8192]
"""

import argparse
from pathlib import Path

import gguf
import numpy as np
from gguf import GGMLQuantizationType as Q

from localchat.engine.model_catalog import embedded_gguf_path

# the fp16 scale fields of each K block (offset, count), to fill with small finite values
_SCALE_FIELDS = {Q.Q4_K: [(0, 2)], Q.Q6_K: [(208, 1)]}


def random_blocks(rng: np.random.Generator, rows: int, cols: int, kind: Q) -> np.ndarray:
    """Valid raw blocks of a K type: random codes and sub-block scales, small positive fp16 super-block scales."""
    shape = gguf.quants.quant_shape_to_byte_shape((rows, cols), kind)
    raw = rng.integers(0, 256, size=shape, dtype=np.uint8)
    block_bytes = gguf.GGML_QUANT_SIZES[kind][1]
    blocks = raw.reshape(rows, -1, block_bytes)
    for offset, count in _SCALE_FIELDS[kind]:
        scales = rng.uniform(1e-4, 2e-3, size=(*blocks.shape[:2], count)).astype(np.float16)
        blocks[..., offset : offset + 2 * count] = scales.view(np.uint8)
    return raw


def copy_metadata(writer: gguf.GGUFWriter, source: gguf.GGUFReader, skip: tuple[str, ...]) -> None:
    for field in source.fields.values():
        if field.name.startswith(skip) or field.name.startswith("GGUF."):
            continue
        kind = field.types[0]
        sub_type = field.types[-1] if kind == gguf.GGUFValueType.ARRAY else None
        writer.add_key_value(field.name, field.contents(), kind, sub_type)


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("out", type=Path)
    parser.add_argument("--hidden", type=int, default=2048)
    parser.add_argument("--layers", type=int, default=16)
    parser.add_argument("--intermediate", type=int, default=8192)
    parser.add_argument("--heads", type=int, default=32)
    parser.add_argument("--kv-heads", type=int, default=8)
    args = parser.parse_args()
    source = gguf.GGUFReader(embedded_gguf_path())
    vocab = len(source.fields["tokenizer.ggml.tokens"].data)
    writer = gguf.GGUFWriter(args.out, "llama")
    copy_metadata(writer, source, skip=("llama.", "general.architecture", "general.file_type"))
    writer.add_context_length(8192)
    writer.add_embedding_length(args.hidden)
    writer.add_block_count(args.layers)
    writer.add_feed_forward_length(args.intermediate)
    writer.add_head_count(args.heads)
    writer.add_head_count_kv(args.kv_heads)
    writer.add_rope_freq_base(500000.0)
    writer.add_layer_norm_rms_eps(1e-5)
    writer.add_rope_dimension_count(args.hidden // args.heads)
    writer.add_vocab_size(vocab)
    rng = np.random.default_rng(0)
    head_dim, kv = args.hidden // args.heads, args.kv_heads * args.hidden // args.heads

    def matrix(name: str, rows: int, cols: int, kind: Q) -> None:
        writer.add_tensor(name, random_blocks(rng, rows, cols, kind), raw_shape=gguf.quants.quant_shape_to_byte_shape(
            (rows, cols), kind), raw_dtype=kind)

    matrix("token_embd.weight", vocab, args.hidden, Q.Q6_K)
    writer.add_tensor("output_norm.weight", np.ones(args.hidden, dtype=np.float32))
    for layer in range(args.layers):
        blk = f"blk.{layer}"
        writer.add_tensor(f"{blk}.attn_norm.weight", np.ones(args.hidden, dtype=np.float32))
        writer.add_tensor(f"{blk}.ffn_norm.weight", np.ones(args.hidden, dtype=np.float32))
        matrix(f"{blk}.attn_q.weight", args.hidden, args.hidden, Q.Q4_K)
        matrix(f"{blk}.attn_k.weight", kv, args.hidden, Q.Q4_K)
        matrix(f"{blk}.attn_v.weight", kv, args.hidden, Q.Q6_K)
        matrix(f"{blk}.attn_output.weight", args.hidden, args.hidden, Q.Q4_K)
        matrix(f"{blk}.ffn_gate.weight", args.intermediate, args.hidden, Q.Q4_K)
        matrix(f"{blk}.ffn_up.weight", args.intermediate, args.hidden, Q.Q4_K)
        matrix(f"{blk}.ffn_down.weight", args.hidden, args.intermediate, Q.Q6_K if layer % 2 == 0 else Q.Q4_K)
    assert head_dim * args.heads == args.hidden
    writer.write_header_to_file()
    writer.write_kv_data_to_file()
    writer.write_tensors_to_file()
    writer.close()
    print(f"{args.out}: {args.out.stat().st_size / 1e6:,.0f} MB")


if __name__ == "__main__":
    main()
