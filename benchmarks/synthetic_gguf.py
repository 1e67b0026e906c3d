"""A larger GGUF to measure with when no real one can be downloaded, with random but valid blocks. Its replies are
noise; its size, memory and speed are those of a real file of its shape. Two shapes:

- llama (the default): a Llama-architecture file of about a billion weights, laid out like a Q4_K_M download
  (Q4_K matrices, Q6_K for attn_v, half of ffn_down and the embedding, float32 norms), with the embedded model's
  tokenizer and chat template;
- gemma3-270m: Gemma 3 270M's shape (18 layers, hidden 640, 4 heads, 1 KV head of 256, intermediate 2048, a tied
  embedding of 262,144 tokens) with the types llama.cpp's Q4_K_M gives it: 640-wide rows do not split into K
  types' 256-weight super-blocks, so llama.cpp falls back from Q4_K to Q5_0 and from Q6_K to Q8_0 there (the
  embedding, q, k, v, gate and up); attn_output and ffn_down stay Q4_K (and Q6_K where llama.cpp gives more bits).
  Its tokenizer is a sentencepiece vocabulary without merges, as Gemma's files have (transformers rebuilds the
  merges from it): special tokens, byte fallbacks, the embedded model's tokens respelled, then pieces joined from
  those up to the full size; its chat template is Gemma's turns.

With --thinking, the llama shape's chat template is a thinking model's (DeepSeek-R1's layout on ChatML turns: the
generation prompt opens a <think> block, earlier replies' thinking is dropped), for benchmarks/thinking.py.

    python benchmarks/synthetic_gguf.py OUT.gguf [--hidden 2048 --layers 16 --intermediate 8192] [--thinking]
    python benchmarks/synthetic_gguf.py OUT.gguf --shape gemma3-270m
"""

import argparse
import itertools
from pathlib import Path

import gguf
import numpy as np
from gguf import GGMLQuantizationType as Q
from transformers.convert_slow_tokenizer import bytes_to_unicode

from localchat.engine.loading.model_catalog import embedded_gguf_path

# the fp16 scale fields of each block type (offset, count), to fill with small finite values
_SCALE_FIELDS = {Q.Q4_K: [(0, 2)], Q.Q6_K: [(208, 1)], Q.Q5_0: [(0, 1)], Q.Q8_0: [(0, 1)]}
# Gemma 3 270M (google/gemma-3-270m's config.json)
GEMMA3_270M = {"layers": 18, "hidden": 640, "heads": 4, "kv_heads": 1, "head_dim": 256, "intermediate": 2048,
               "vocab": 262144, "context": 32768, "sliding_window": 512}
GEMMA3_SPECIAL_TOKENS = ["<pad>", "<eos>", "<bos>", "<unk>", "<mask>", "<start_of_turn>", "<end_of_turn>"]
GEMMA3_CHAT_TEMPLATE = (
    "{{ bos_token }}{% for message in messages %}<start_of_turn>"
    "{{ 'model' if message['role'] == 'assistant' else 'user' }}\n{{ message['content'] | trim }}<end_of_turn>\n"
    "{% endfor %}{% if add_generation_prompt %}<start_of_turn>model\n{% endif %}")


def random_blocks(rng: np.random.Generator, rows: int, cols: int, kind: Q) -> np.ndarray:
    """Valid raw blocks: random codes (and sub-block scales), small positive fp16 block scales."""
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


def use_more_bits(layer: int, layers: int) -> bool:
    """llama.cpp's choice of the layers whose attn_v and ffn_down a Q4_K_M file gives more bits (Q6_K)."""
    return layer < layers // 8 or layer >= 7 * layers // 8 or (layer - layers // 8) % 3 == 2


THINKING_CHAT_TEMPLATE = (
    "{%- for message in messages -%}{%- set content = message.content -%}"
    "{%- if message.role == 'assistant' -%}{%- set content = content.split('</think>')[-1].lstrip() -%}{%- endif -%}"
    "{{- '<|im_start|>' + message.role + '\\n' + content + '<|im_end|>\\n' -}}{%- endfor -%}"
    "{%- if add_generation_prompt -%}{{- '<|im_start|>assistant\\n<think>\\n' -}}{%- endif -%}")


def write_llama(writer: gguf.GGUFWriter, matrix, args: argparse.Namespace) -> None:
    source = gguf.GGUFReader(embedded_gguf_path())
    vocab = len(source.fields["tokenizer.ggml.tokens"].data)
    skip = ("llama.", "general.architecture", "general.file_type") + (("tokenizer.chat_template",) if args.thinking
                                                                        else ())
    copy_metadata(writer, source, skip=skip)
    if args.thinking:
        writer.add_chat_template(THINKING_CHAT_TEMPLATE)
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
    assert args.hidden % args.heads == 0
    kv = args.kv_heads * args.hidden // args.heads
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


def sentencepiece_vocabulary(size: int) -> tuple[list[str], list[int]]:
    """Tokens and GGUF token types (1 normal, 3 control, 6 byte) of a Gemma-like vocabulary of `size` tokens: the
    special tokens, the 256 byte fallbacks, the embedded model's byte-level tokens respelled as text ("▁" for a
    space), then pieces joined from two earlier ones until the size is reached."""
    byte_of = {char: byte for byte, char in bytes_to_unicode().items()}
    source = gguf.GGUFReader(embedded_gguf_path())
    tokens = GEMMA3_SPECIAL_TOKENS + [f"<0x{byte:02X}>" for byte in range(256)]
    types = [3] * len(GEMMA3_SPECIAL_TOKENS) + [6] * 256
    seen = set(tokens)
    pieces = []
    for token, kind in zip(source.fields["tokenizer.ggml.tokens"].contents(),
                           source.fields["tokenizer.ggml.token_type"].contents()):
        try:
            piece = bytes(byte_of[char] for char in token).decode("utf-8").replace(" ", "▁")
        except (KeyError, UnicodeDecodeError):
            continue  # a special token, or part of a character
        if kind == 1 and piece not in seen:
            seen.add(piece)
            pieces.append(piece)
    base = len(pieces)
    for left, right in itertools.product(range(base), repeat=2):
        if len(tokens) + len(pieces) >= size:
            break
        joined = pieces[(left * 7919) % base] + pieces[right].removeprefix("▁")
        if joined not in seen:
            seen.add(joined)
            pieces.append(joined)
    return tokens + pieces, types + [1] * len(pieces)


def write_gemma3_270m(writer: gguf.GGUFWriter, matrix) -> None:
    shape = GEMMA3_270M
    hidden, layers = shape["hidden"], shape["layers"]
    q, kv = shape["heads"] * shape["head_dim"], shape["kv_heads"] * shape["head_dim"]
    writer.add_name("gemma-3-270m-synthetic")
    writer.add_context_length(shape["context"])
    writer.add_embedding_length(hidden)
    writer.add_block_count(layers)
    writer.add_feed_forward_length(shape["intermediate"])
    writer.add_head_count(shape["heads"])
    writer.add_head_count_kv(shape["kv_heads"])
    writer.add_key_length(shape["head_dim"])
    writer.add_value_length(shape["head_dim"])
    writer.add_rope_freq_base(1_000_000.0)
    writer.add_layer_norm_rms_eps(1e-6)
    writer.add_sliding_window(shape["sliding_window"])
    writer.add_vocab_size(shape["vocab"])
    tokens, types = sentencepiece_vocabulary(shape["vocab"])
    writer.add_tokenizer_model("llama")
    writer.add_tokenizer_pre("default")
    writer.add_token_list(tokens)
    writer.add_token_scores([float(-i) for i in range(len(tokens))])
    writer.add_token_types(types)
    for name, token in (("bos", "<bos>"), ("eos", "<eos>"), ("unk", "<unk>"), ("pad", "<pad>")):
        getattr(writer, f"add_{name}_token_id")(tokens.index(token))
    writer.add_add_bos_token(True)
    writer.add_add_space_prefix(False)
    writer.add_chat_template(GEMMA3_CHAT_TEMPLATE)

    def norm(name: str, size: int) -> None:
        writer.add_tensor(name, np.ones(size, dtype=np.float32))  # llama.cpp stores 1 + w: w = 0

    matrix("token_embd.weight", shape["vocab"], hidden, Q.Q8_0)
    norm("output_norm.weight", hidden)
    for layer in range(layers):
        blk, more_bits = f"blk.{layer}", use_more_bits(layer, layers)
        for part in ("attn_norm", "post_attention_norm", "ffn_norm", "post_ffw_norm"):
            norm(f"{blk}.{part}.weight", hidden)
        norm(f"{blk}.attn_q_norm.weight", shape["head_dim"])
        norm(f"{blk}.attn_k_norm.weight", shape["head_dim"])
        matrix(f"{blk}.attn_q.weight", q, hidden, Q.Q5_0)
        matrix(f"{blk}.attn_k.weight", kv, hidden, Q.Q5_0)
        matrix(f"{blk}.attn_v.weight", kv, hidden, Q.Q8_0 if more_bits else Q.Q5_0)
        matrix(f"{blk}.attn_output.weight", hidden, q, Q.Q4_K)
        matrix(f"{blk}.ffn_gate.weight", shape["intermediate"], hidden, Q.Q5_0)
        matrix(f"{blk}.ffn_up.weight", shape["intermediate"], hidden, Q.Q5_0)
        matrix(f"{blk}.ffn_down.weight", hidden, shape["intermediate"], Q.Q6_K if more_bits else Q.Q4_K)


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("out", type=Path)
    parser.add_argument("--shape", choices=("llama", "gemma3-270m"), default="llama")
    parser.add_argument("--hidden", type=int, default=2048, help="llama only, as are the options below")
    parser.add_argument("--layers", type=int, default=16)
    parser.add_argument("--intermediate", type=int, default=8192)
    parser.add_argument("--heads", type=int, default=32)
    parser.add_argument("--kv-heads", type=int, default=8)
    parser.add_argument("--thinking", action="store_true", help="a thinking model's chat template")
    args = parser.parse_args()
    writer = gguf.GGUFWriter(args.out, "gemma3" if args.shape == "gemma3-270m" else "llama")
    rng = np.random.default_rng(0)

    def matrix(name: str, rows: int, cols: int, kind: Q) -> None:
        writer.add_tensor(name, random_blocks(rng, rows, cols, kind), raw_shape=gguf.quants.quant_shape_to_byte_shape(
            (rows, cols), kind), raw_dtype=kind)

    if args.shape == "gemma3-270m":
        write_gemma3_270m(writer, matrix)
    else:
        write_llama(writer, matrix, args)
    writer.write_header_to_file()
    writer.write_kv_data_to_file()
    writer.write_tensors_to_file()
    writer.close()
    print(f"{args.out}: {args.out.stat().st_size / 1e6:,.0f} MB")


if __name__ == "__main__":
    main()
