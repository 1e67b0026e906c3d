"""The prompt rows' kernel, chosen by measuring the machine (kernel_choice.py): the panels dequantized for oneDNN's
dense matmul are the file's weights; the dense path's product is within bfloat16's error of the exact one; the
choice is measured once and kept; and where the dense path is chosen (forced here, since this CPU may lack fast
bfloat16), a step's prompt rows run it and its decode rows the native kernels, the fused layers only the latter."""

import gguf
import pytest
import torch
from test_packed_linear import dequantized, packed_layer, random_rows

from localchat.engine import LLM, SamplingParams
from localchat.engine.worker import kernel_choice, native_kernels
from localchat.engine.worker.packed_linear import PackedLinear

Q = gguf.GGMLQuantizationType
pytestmark = pytest.mark.skipif(native_kernels.load() is None, reason="the native kernels cannot run here")


@pytest.fixture(scope="module")
def weight() -> torch.Tensor:
    return torch.randn(64, 512, generator=torch.Generator().manual_seed(3)).numpy() * 0.05


@pytest.mark.parametrize("qtype", [Q.Q4_0, Q.Q4_1, Q.Q4_K, Q.Q6_K, Q.Q8_0], ids=lambda q: q.name)
def test_dequantized_panels_are_the_files_weights(qtype, weight):
    layer, data = packed_layer(qtype, weight)
    (part,) = layer.parts
    dense = torch.empty(part.out_features, part.in_features, dtype=torch.bfloat16)
    native_kernels.load().dequantize(part.panels, part.code_bits, part.out_features, part.in_features, dense)
    expected = dequantized(data, qtype)
    # the file's weight rounded to bfloat16; s q + z in float32 where gguf computes d sc q - dmin m: a weight near 0
    # (their difference) may differ in its last bits beside the matrix's largest
    torch.testing.assert_close(dense.float(), expected, rtol=2**-7, atol=2**-10 * expected.abs().max().item())


@pytest.mark.parametrize("qtype", [Q.Q4_K, Q.Q6_K, Q.Q8_0], ids=lambda q: q.name)
def test_the_dense_path_is_within_bfloat16_of_the_exact_product(qtype, weight):
    layer, data = packed_layer(qtype, weight)
    x = random_rows(96)
    exact = x.double() @ dequantized(data, qtype).double().T
    layer.dense_from = 64
    dense = layer(x)  # 96 rows: the dense path
    native = layer(x[:8])  # 8 rows: the native kernels
    assert (dense.double() - exact).norm() / exact.norm() < 0.01
    assert (native.double() - exact[:8]).norm() / exact[:8].norm() < 0.02
    layer.dense_from = None
    assert not torch.equal(layer(x)[:8], dense[:8])  # the paths differ in their arithmetic: they really ran


def test_the_choice_is_measured_once_and_kept(tmp_path, monkeypatch, weight):
    monkeypatch.setenv("LOCALCHAT_HOME", str(tmp_path))
    monkeypatch.delenv("LOCALCHAT_PROMPT_KERNEL", raising=False)
    layer, _ = packed_layer(Q.Q4_K, weight)
    measured = []
    real = kernel_choice._measure
    monkeypatch.setattr(kernel_choice, "_measure", lambda *args: measured.append(1) or real(*args))
    first = kernel_choice.choose([layer], 2)
    again = kernel_choice.choose([layer], 2)
    assert measured == [1] and first == again
    assert set(first.seconds) == {"native", "dense"} and first.peaks.read_gbs > 0
    assert first.dense_prompts == (first.seconds["dense"] <= kernel_choice.DENSE_MARGIN * first.seconds["native"])
    assert first.decode == f"native int8 ({native_kernels.load().isa})"
    monkeypatch.setenv("LOCALCHAT_PROMPT_KERNEL", "dense")
    forced = kernel_choice.choose([layer], 2)
    assert forced.dense_prompts and forced.prompt == kernel_choice.DENSE_NAME and measured == [1]


@pytest.mark.slow  # the embedded model
def test_with_the_dense_path_prompt_rows_run_it_and_decode_rows_the_native_kernels(monkeypatch):
    monkeypatch.setenv("LOCALCHAT_PROMPT_KERNEL", "dense")
    llm = LLM(speculative=False)
    runner = llm.engine.runner
    assert runner.kernels.dense_prompts and llm.stats().kernels.prompt == kernel_choice.DENSE_NAME
    calls = {"dense": 0, "fused": 0}
    dense, fused = PackedLinear.forward, runner.fused.forward

    def counting_linear(self, x):
        calls["dense"] += self.dense_from is not None and x.shape[0] >= self.dense_from
        return dense(self, x)

    def counting_fused(*args):
        calls["fused"] += 1
        return fused(*args)

    monkeypatch.setattr(PackedLinear, "forward", counting_linear)
    monkeypatch.setattr(runner.fused, "forward", counting_fused)
    story = "Write a long story about a lighthouse keeper, her cat, a storm and a ship lost at sea. " * 3
    prompt = llm.engine.apply_chat_template([{"role": "user", "content": story}])
    out = llm.generate(prompt, SamplingParams(temperature=0, max_tokens=6))
    assert len(prompt) >= 64 and calls["dense"] > 0  # the prompt's chunk: dense products
    assert calls["fused"] == 5  # each decode step after the first token: the fused layers, the native kernels
    assert len(out[0].outputs[0].token_ids) == 6
