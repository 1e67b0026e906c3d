"""The decoder's layers in one native call a step (fused_decoder.py, native/decoder_layers.c) give the torch path's
bits: the same logits for every row of prefills, decodes and forks, on tiny packed GGUFs of the families it covers
(Llama with grouped heads, Qwen2 with its biases) and on the embedded model; the families it does not cover run as torch
operators, and the log says why."""

import logging

import pytest
import torch
from logit_rows import record_logits
from test_models import packed_llm, random_prompts

from localchat.engine import LLM, SamplingParams
from localchat.engine.worker import fused_decoder, native_kernels

pytestmark = pytest.mark.skipif(native_kernels.load() is None, reason="the native kernels cannot run here")


def rows_of(llm: LLM, prompts: list[list[int]], params: SamplingParams, fused: bool) -> tuple[list, list]:
    """Every logit row the engine samples from for these requests (cold), with the fused layers on or off."""
    runner, sampler = llm.engine.runner, llm.engine.sampler
    kept, runner.fused = runner.fused, runner.fused if fused else None
    try:
        llm.engine.reset_prefix_cache()
        seen = record_logits(llm)
        outputs = llm.generate(prompts, params)
    finally:
        runner.fused, llm.engine.sampler = kept, sampler
    return seen, [[o.token_ids for o in out.outputs] for out in outputs]


@pytest.mark.parametrize("arch", ["llama", "qwen2"])
def test_the_fused_layers_give_the_torch_paths_bits(arch, tokenizer, tmp_path, monkeypatch):
    llm, _, _ = packed_llm(arch, tokenizer, tmp_path, monkeypatch)
    assert llm.engine.runner.fused is not None, fused_decoder.FusedDecoder.uncovered(llm.engine.runner.model)
    prompts = random_prompts((3, 17, 30))
    params = SamplingParams(n=2, temperature=0.9, seed=4, max_tokens=12, ignore_eos=True)  # prefills, forks, decodes
    fused_rows, fused_replies = rows_of(llm, prompts, params, fused=True)
    torch_rows, torch_replies = rows_of(llm, prompts, params, fused=False)
    assert fused_replies == torch_replies
    assert len(fused_rows) == len(torch_rows) > 30
    for (tokens, a), (same_tokens, b) in zip(fused_rows, torch_rows):
        assert tokens == same_tokens and torch.equal(a, b)


@pytest.mark.parametrize("arch", ["gemma3", "phi3-window-partial-rope"])
def test_families_it_does_not_cover_run_as_torch_operators_and_the_log_says_why(arch, tokenizer, tmp_path,
                                                                                   monkeypatch, caplog):
    with caplog.at_level(logging.INFO, logger=fused_decoder.__name__):
        llm, _, _ = packed_llm(arch, tokenizer, tmp_path, monkeypatch)
    assert llm.engine.runner.fused is None
    [line] = [r.getMessage() for r in caplog.records if r.name == fused_decoder.__name__]
    assert line.startswith("decoder layers run as torch operators: ")
    assert llm.generate(random_prompts((5,)), SamplingParams(temperature=0, max_tokens=3, ignore_eos=True))


@pytest.mark.slow  # the embedded model, twice
def test_the_embedded_models_greedy_replies_are_the_same_fused_or_not():
    llm = LLM(speculative=False)
    assert llm.engine.runner.fused is not None
    questions = ["What is the capital of France?", "Write a haiku about tea.", "Count from 1 to 10.",
                 "How do I sort a list in Python?", "Name three colors.", "What is 17 times 23?",
                 "Give me a tip for sleeping better.", "Translate 'good morning' to German.",
                 "Why is the sky blue?", "Tell me a joke about cats."]
    prompts = [llm.engine.apply_chat_template([{"role": "user", "content": q}]) for q in questions]
    params = SamplingParams(temperature=0, max_tokens=48)
    _, fused = rows_of(llm, prompts, params, fused=True)
    _, plain = rows_of(llm, prompts, params, fused=False)
    assert fused == plain
