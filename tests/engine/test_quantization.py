"""The GGUF's own 4-bit weights: read without loss, and the engine that runs them stays close to float32."""

import gguf
import numpy as np
import pytest
import torch

from localchat.engine import LLM, SamplingParams
from localchat.engine.loader import embedded_gguf_path
from localchat.engine.quantization import Int4Linear, Int8Head, unpack_q4_1

pytestmark = pytest.mark.slow  # the embedded model and transformers' reference: left out of `./dev test --fast`


@pytest.fixture(scope="module")
def q4_tensor():
    reader = gguf.GGUFReader(embedded_gguf_path())
    return next(t for t in reader.tensors if t.name == "blk.3.ffn_down.weight")


def test_q4_1_blocks_unpack_to_exactly_the_dequantized_weights(q4_tensor):
    assert q4_tensor.tensor_type == gguf.GGMLQuantizationType.Q4_1
    q, d, m = unpack_q4_1(np.asarray(q4_tensor.data))
    rows, cols = q.shape
    weights = q.reshape(rows, -1, 32) * d.astype(np.float32)[..., None] + m.astype(np.float32)[..., None]
    assert np.array_equal(weights.reshape(rows, cols), gguf.quants.dequantize(q4_tensor.data, q4_tensor.tensor_type))


@pytest.mark.parametrize("rows", [1, 5, 40])
def test_int4_linear_computes_the_same_product(q4_tensor, rows):
    q, d, m = (torch.from_numpy(np.ascontiguousarray(a)) for a in unpack_q4_1(np.asarray(q4_tensor.data)))
    layer = Int4Linear(q, d, m, max_int4_rows=8, dtype=torch.bfloat16)  # 1 and 5 rows: the int4 kernel; 40: dense
    weight = torch.from_numpy(gguf.quants.dequantize(q4_tensor.data, q4_tensor.tensor_type))
    x = torch.randn(rows, weight.shape[1], generator=torch.Generator().manual_seed(rows))
    expected = x @ weight.T
    got = layer(x.bfloat16()).float()
    assert got.shape == expected.shape
    assert (got - expected).norm() / expected.norm() < 1e-2  # bfloat16 activations and scales


@pytest.mark.parametrize("rows", [1, 40])
def test_int8_head_computes_the_same_logits(rows):
    generator = torch.Generator().manual_seed(rows)
    weight = torch.randn(3000, 64, generator=generator) * 0.05
    head = Int8Head(weight, max_int8_rows=8)  # 1 row: the int8 kernel; 40: dense
    x = torch.randn(rows, 64, generator=generator)
    expected = x @ weight.T
    got = head(x)
    assert got.dtype == torch.float32 and got.shape == expected.shape
    assert (got - expected).norm() / expected.norm() < 2e-2  # int8 weights, bfloat16 activations
    assert (got.argmax(-1) == expected.argmax(-1)).float().mean() > 0.9


@pytest.mark.parametrize("dtype", ["float32", "bfloat16"])
def test_q4_1_engine_runs_int4_layers_and_agrees_with_float32(hf_smollm2, dtype):
    llm = LLM(dtype=dtype, quantization="auto")  # a Q4_1 GGUF on the CPU: the same as "q4_1"
    layer = llm.engine.runner.model.layers[0]
    assert isinstance(layer.mlp.gate_up_proj, Int4Linear) and isinstance(layer.self_attn.qkv_proj, Int4Linear)
    assert isinstance(llm.engine.runner.model.int8_head, Int8Head)
    seen, sample = [], llm.engine.sampler

    def recording_sampler(logits, rows):
        seen.extend((list(row.token_ids), logits[i].clone()) for i, row in enumerate(rows))
        return sample(logits, rows)

    llm.engine.sampler = recording_sampler
    questions = ["Explain why the sky is blue.", "Write a poem about the sea.", "How do I sort a list in Python?"]
    llm.chat([[{"role": "user", "content": q}] for q in questions], SamplingParams(temperature=0, max_tokens=48))
    model, _ = hf_smollm2
    agree = 0
    with torch.no_grad():
        for tokens, ours in seen:  # the float32 reference, fed the bfloat16 engine's own tokens
            theirs = model(torch.tensor([tokens])).logits[0, -1]
            agree += int(ours.argmax() == theirs.argmax())
    print(f"q4_1 engine ({dtype}): top-1 agreement with float32 transformers {agree}/{len(seen)}")
    assert agree / len(seen) >= 0.9, f"top-1 agreement with float32: {agree}/{len(seen)}"
