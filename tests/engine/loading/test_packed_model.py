"""The default path on a quantized GGUF: the file's own weights, packed (packed_linear.py), with no float copy.
It stays close to transformers' float32 on the same (dequantized) weights, and a seeded request gives the same
tokens cold or cached, alone or batched."""

from collections.abc import Iterator

import gguf
import numpy as np
import pytest
from logit_rows import record_logits, reference_rows

from localchat.engine import LLM, SamplingParams
from localchat.engine.loading.dirs import user_dir
from localchat.engine.loading.loader import DENSE_FILE, resolve_model
from localchat.engine.loading.model_catalog import embedded_gguf_path
from localchat.engine.worker.cpu_threads import CPUThreads
from localchat.engine.worker.packed_linear import HeadRowsEmbedding, PackedLinear

pytestmark = pytest.mark.slow  # the embedded model and transformers' reference: left out of `./dev test --fast`

QUESTIONS = [
    "Explain why the sky is blue.", "Write a poem about the sea.", "How do I sort a list in Python?",
    "What is the capital of Japan?", "Give me three tips for sleeping better.", "Translate 'good morning' to German.",
    "What does a paged KV cache do?", "Tell me a joke about cats.",
]
# the top-1 agreement's sample: about 1,000 positions, where 200 left a 97% bar at the mercy of two or three tokens
FIDELITY_QUESTIONS = QUESTIONS + [
    "Describe a sunset over the mountains.", "What is 17 times 23?", "Summarize the plot of Romeo and Juliet.",
    "How does a bicycle stay upright?", "Write a haiku about autumn.", "List the planets of the solar system.",
    "Why do cats purr?", "Give me a recipe for pancakes.", "What is photosynthesis?", "Explain recursion to a child.",
    "Name three famous painters.", "How do vaccines work?", "What is the speed of light?",
    "Write a limerick about a dog.", "What causes the seasons?", "How do I boil an egg?",
]


@pytest.fixture(scope="module")
def llm(tmp_path_factory) -> Iterator[LLM]:
    """The defaults (packed weights on the CPU) in a home of their own: a cache folder that no dense run of
    another test has written into."""
    with pytest.MonkeyPatch.context() as patch:
        patch.setenv("LOCALCHAT_HOME", str(tmp_path_factory.mktemp("packed-home")))
        yield LLM()


def test_the_default_runs_the_files_own_weights_without_a_float_copy(llm):
    model = llm.engine.runner.model
    assert llm.engine.packed
    assert isinstance(model.layers[0].self_attn.qkv_proj, PackedLinear)
    assert isinstance(model.layers[0].mlp.down_proj, PackedLinear) and isinstance(model.lm_head, PackedLinear)
    assert isinstance(model.embed_tokens, HeadRowsEmbedding)  # its Q8_0 embedding is tied to an int8 head: held once
    assert not [p for p in model.parameters() if p.dim() > 1], "a dense matrix is held beside the packed ones"
    source = resolve_model(None)
    assert not (source.folder / DENSE_FILE).exists()
    assert source.packed_file().stat().st_size <= 1.3 * embedded_gguf_path().stat().st_size


def test_top1_agreement_with_float32_transformers(llm, hf_smollm2):
    sample = llm.engine.sampler
    seen = record_logits(llm)
    try:
        outputs = llm.chat([[{"role": "user", "content": q}] for q in FIDELITY_QUESTIONS],
                           SamplingParams(temperature=0, max_tokens=48))
    finally:
        llm.engine.sampler = sample
    # the float32 reference on the dequantized weights, fed each reply's tokens once
    rows = reference_rows(hf_smollm2[0], seen, outputs)  # a row for each token (drafts not kept left out)
    agree = sum(int(ours.argmax() == expected.argmax()) for ours, expected in rows)
    print(f"packed default: top-1 agreement with float32 transformers {agree}/{len(rows)}")
    assert len(rows) >= 900 and agree / len(rows) >= 0.97, f"{agree}/{len(rows)}"


def test_a_seeded_request_gives_the_same_tokens_cold_cached_alone_and_batched(llm):
    prompts = [llm.engine.apply_chat_template([{"role": "user", "content": f"{q} (take {i})"}])
               for i, q in enumerate(QUESTIONS * 3)][:20]
    # 12 tokens a reply, each with its logprob: a logit whose bits differ shows in the logprob at once, where a seeded
    # draw changes its token only near a boundary of the distribution
    params = [SamplingParams(temperature=0.9, top_p=0.95, seed=100 + i, max_tokens=12, logprobs=0)
              for i in range(len(prompts))]
    llm.engine.reset_prefix_cache()
    alone_cold = [llm.generate(p, s)[0] for p, s in zip(prompts, params)]
    batched_cached = llm.generate(prompts, params)
    assert all(o.num_cached_tokens > 0 for o in batched_cached)
    llm.engine.reset_prefix_cache()
    batched_cold = llm.generate(prompts, params)
    replies = [[(o.outputs[0].token_ids, o.outputs[0].logprobs) for o in run]
               for run in (alone_cold, batched_cold, batched_cached)]
    assert replies[0] == replies[1] == replies[2]  # alone = batched (cold), cold = cached (batched)


def test_the_thread_count_changes_no_token_and_no_logprob(llm):
    """The engine picks its thread count by the machine's load (cpu_threads.py): replies must not depend on it."""
    prompts = [llm.engine.apply_chat_template([{"role": "user", "content": q}]) for q in QUESTIONS[:4]]
    params = [SamplingParams(temperature=0.9, seed=7 + i, max_tokens=24, logprobs=0) for i in range(len(prompts))]
    runs = []
    for threads in (1, 2):
        llm.engine.cpu_threads = CPUThreads(threads)
        llm.engine.reset_prefix_cache()
        try:
            outputs = llm.generate(prompts, params)  # batched: prefill of many rows, then decodes
        finally:
            llm.engine.cpu_threads = CPUThreads()
        runs.append([(o.outputs[0].token_ids, o.outputs[0].logprobs) for o in outputs])
    assert runs[0] == runs[1]


def test_an_unsupported_architecture_or_tensor_type_is_refused_at_once(tmp_path):
    for name, architecture, tensor_type in [("arch", "gpt2", gguf.GGMLQuantizationType.Q4_0),
                                            ("type", "llama", gguf.GGMLQuantizationType.Q2_K)]:
        path = tmp_path / f"{name}.gguf"
        writer = gguf.GGUFWriter(path, architecture)
        rows, cols = 32, 256
        size = gguf.quants.quant_shape_to_byte_shape((rows, cols), tensor_type)
        writer.add_tensor("blk.0.attn_q.weight", np.zeros(size, dtype=np.uint8), raw_shape=size,
                          raw_dtype=tensor_type)
        for write in (writer.write_header_to_file, writer.write_kv_data_to_file, writer.write_tensors_to_file):
            write()
        writer.close()
        with pytest.raises(ValueError, match="gpt2" if name == "arch" else "Q2_K"):
            resolve_model(str(path))
        assert not [p for p in (user_dir("cache") / "models").glob(f"{name}-*")]
