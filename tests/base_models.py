"""Base models for the tests: GGUF files without `tokenizer.chat_template`, as a base-model download is.

`tiny-base-llama` has the Llama shape and the embedded model's byte-level BPE tokenizer (as SmolLM2's base model
has); `tiny-base-gemma3` has the Gemma 3 shape (five sliding-window layers then a global one, q/k norms, norms
before and after the attention and the MLP, stored as llama.cpp stores them) and a small sentencepiece vocabulary
laid out as Gemma's. Random weights (seeded), Q8_0 matrices, a few MB each. Their text is noise; that they load,
answer /v1/completions and refuse chats is the point."""

import fcntl
import os
from collections.abc import Iterator
from contextlib import contextmanager
from pathlib import Path

import gguf
import numpy as np

from localchat.engine.loading.model_catalog import embedded_gguf_path
from support import SESSION_HOME, Server, running_server, second_model_dir

BASE_LLAMA, BASE_GEMMA3 = "tiny-base-llama", "tiny-base-gemma3"
FORMAT = 1  # bump when the files written here change: the kept cache builds them again
HIDDEN, HEADS, KV_HEADS, HEAD_DIM, INTERMEDIATE = 64, 4, 2, 16, 128
LLAMA_LAYERS, GEMMA3_LAYERS = 2, 6
GEMMA_WORDS = ["the", "of", "and", "to", "in", "is", "that", "for", "it", "was", "on", "with", "as", "at", "be",
               "this", "from", "or", "one", "once", "upon", "time", "there", "hello", "world", "story", "little"]
SPACE = "\u2581"  # sentencepiece's mark of a space
TEST_REFERENCES = SESSION_HOME / "cache" / "test-references"  # kept between test runs (tests/conftest.py)


@contextmanager
def base_model_server(home: Path, model: str) -> Iterator[Server]:
    """`localchat serve --model <the file of base model `model`>`, which also finds the other base model and
    tiny-llama, a chat model (support.second_model_dir), to switch to."""
    file = base_model_file(model)
    model_dirs = os.pathsep.join([str(file.parent), str(second_model_dir(TEST_REFERENCES / "second-model"))])
    with running_server(home, kv_blocks=64, args=["--model", str(file)], env={"LOCALCHAT_MODEL_DIRS": model_dirs}
                        ) as server:
        yield server


def base_model_file(model: str) -> Path:
    """The GGUF file of base model `model` (BASE_LLAMA or BASE_GEMMA3), built once for all test runs."""
    return base_model_files(TEST_REFERENCES / "base-models")[model]


def base_model_files(root: Path) -> dict[str, Path]:
    """The two GGUF files by model name, built once (a file lock lets the test workers share them)."""
    folder = root / f"v{FORMAT}"
    folder.mkdir(parents=True, exist_ok=True)
    files = {name: folder / f"{name}.gguf" for name in (BASE_LLAMA, BASE_GEMMA3)}
    with open(folder / ".lock", "w") as lock:
        fcntl.flock(lock, fcntl.LOCK_EX)
        for name, path in files.items():
            if not path.is_file():
                tmp = path.with_name(f".{path.name}-{os.getpid()}")
                (write_llama if name == BASE_LLAMA else write_gemma3)(tmp)
                tmp.rename(path)
    return files


def write_llama(path: Path) -> None:
    writer = _writer(path, "llama", LLAMA_LAYERS)
    vocab = _copy_embedded_tokenizer(writer)
    writer.add_vocab_size(vocab)
    writer.add_rope_dimension_count(HEAD_DIM)
    rng = np.random.default_rng(0)
    _matrix(writer, rng, "token_embd.weight", vocab, HIDDEN)  # tied: the logits head reads it too
    writer.add_tensor("output_norm.weight", _norm(rng, HIDDEN))
    for layer in range(LLAMA_LAYERS):
        blk = f"blk.{layer}"
        writer.add_tensor(f"{blk}.attn_norm.weight", _norm(rng, HIDDEN))
        writer.add_tensor(f"{blk}.ffn_norm.weight", _norm(rng, HIDDEN))
        _attention_and_mlp(writer, rng, blk)
    _finish(writer)


def write_gemma3(path: Path) -> None:
    writer = _writer(path, "gemma3", GEMMA3_LAYERS)
    vocab = _add_gemma_tokenizer(writer)
    writer.add_vocab_size(vocab)
    writer.add_key_length(HEAD_DIM)
    writer.add_value_length(HEAD_DIM)
    writer.add_sliding_window(8)
    rng = np.random.default_rng(1)
    _matrix(writer, rng, "token_embd.weight", vocab, HIDDEN)
    writer.add_tensor("output_norm.weight", _norm(rng, HIDDEN))  # Gemma's norms scale by 1 + w: the file holds 1 + w
    for layer in range(GEMMA3_LAYERS):
        blk = f"blk.{layer}"
        for norm in ("attn_norm", "post_attention_norm", "ffn_norm", "post_ffw_norm"):
            writer.add_tensor(f"{blk}.{norm}.weight", _norm(rng, HIDDEN))
        for norm in ("attn_q_norm", "attn_k_norm"):
            writer.add_tensor(f"{blk}.{norm}.weight", _norm(rng, HEAD_DIM))
        _attention_and_mlp(writer, rng, blk)
    _finish(writer)


def _writer(path: Path, architecture: str, layers: int) -> gguf.GGUFWriter:
    """A writer with this shape's metadata."""
    writer = gguf.GGUFWriter(path, architecture)
    writer.add_context_length(2048)
    writer.add_embedding_length(HIDDEN)
    writer.add_block_count(layers)
    writer.add_feed_forward_length(INTERMEDIATE)
    writer.add_head_count(HEADS)
    writer.add_head_count_kv(KV_HEADS)
    writer.add_rope_freq_base(10000.0)
    writer.add_layer_norm_rms_eps(1e-6)
    return writer


def _copy_embedded_tokenizer(writer: gguf.GGUFWriter) -> int:
    """The embedded model's tokenizer without its chat template; returns the vocabulary's size."""
    source = gguf.GGUFReader(embedded_gguf_path())
    for field in source.fields.values():
        if field.name.startswith("tokenizer.") and field.name != gguf.Keys.Tokenizer.CHAT_TEMPLATE:
            kind = field.types[0]
            writer.add_key_value(field.name, field.contents(), kind,
                                 field.types[-1] if kind == gguf.GGUFValueType.ARRAY else None)
    return len(source.fields["tokenizer.ggml.tokens"].data)


def _add_gemma_tokenizer(writer: gguf.GGUFWriter) -> int:
    """Gemma's layout: special tokens, byte tokens, then pieces, and no merges (transformers rebuilds them from the
    pieces' order and builds a GemmaTokenizer); returns the vocabulary's size."""
    special = ["<pad>", "<eos>", "<bos>", "<unk>", "<mask>", "<start_of_turn>", "<end_of_turn>"]
    byte_tokens = [f"<0x{b:02X}>" for b in range(256)]
    pieces = [SPACE, *(chr(c) for c in range(33, 127))]
    for word in GEMMA_WORDS:  # every prefix, so that each word merges from its letters
        pieces += [piece for end in range(1, len(word) + 1) if (piece := SPACE + word[:end]) not in pieces]
    tokens = special + byte_tokens + pieces
    types = [gguf.TokenType.CONTROL] * len(special) + [gguf.TokenType.BYTE] * len(byte_tokens)
    types += [gguf.TokenType.NORMAL] * len(pieces)
    types[special.index("<unk>")] = gguf.TokenType.UNKNOWN
    writer.add_tokenizer_model("llama")
    writer.add_token_list(tokens)
    writer.add_token_scores([-float(i) for i in range(len(tokens))])
    writer.add_token_types(types)
    for add, token in ((writer.add_pad_token_id, "<pad>"), (writer.add_eos_token_id, "<eos>"),
                       (writer.add_bos_token_id, "<bos>"), (writer.add_unk_token_id, "<unk>")):
        add(tokens.index(token))
    writer.add_add_bos_token(True)
    writer.add_add_eos_token(False)
    writer.add_add_space_prefix(False)
    return len(tokens)


def _attention_and_mlp(writer: gguf.GGUFWriter, rng: np.random.Generator, blk: str) -> None:
    _matrix(writer, rng, f"{blk}.attn_q.weight", HEADS * HEAD_DIM, HIDDEN)
    _matrix(writer, rng, f"{blk}.attn_k.weight", KV_HEADS * HEAD_DIM, HIDDEN)
    _matrix(writer, rng, f"{blk}.attn_v.weight", KV_HEADS * HEAD_DIM, HIDDEN)
    _matrix(writer, rng, f"{blk}.attn_output.weight", HIDDEN, HEADS * HEAD_DIM)
    _matrix(writer, rng, f"{blk}.ffn_gate.weight", INTERMEDIATE, HIDDEN)
    _matrix(writer, rng, f"{blk}.ffn_up.weight", INTERMEDIATE, HIDDEN)
    _matrix(writer, rng, f"{blk}.ffn_down.weight", HIDDEN, INTERMEDIATE)


def _matrix(writer: gguf.GGUFWriter, rng: np.random.Generator, name: str, rows: int, cols: int) -> None:
    raw = gguf.quants.quantize(rng.normal(0, 0.1, size=(rows, cols)).astype(np.float32), gguf.GGMLQuantizationType.Q8_0)
    writer.add_tensor(name, raw, raw_shape=raw.shape, raw_dtype=gguf.GGMLQuantizationType.Q8_0)


def _norm(rng: np.random.Generator, size: int) -> np.ndarray:
    return (1 + rng.normal(0, 0.1, size=size)).astype(np.float32)


def _finish(writer: gguf.GGUFWriter) -> None:
    writer.write_header_to_file()
    writer.write_kv_data_to_file()
    writer.write_tensors_to_file()
    writer.close()
