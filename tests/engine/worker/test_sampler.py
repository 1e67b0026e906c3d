"""Tests for the batch sampler."""

from dataclasses import dataclass, field
from typing import Any

import numpy as np
import pytest
import torch

from localchat.engine.sampling_params import SamplingParams
from localchat.engine.worker.sampler import (
    CANDIDATES,
    Sampler,
    SamplerOutput,
    _sample_candidates,
    _sample_vocabulary,
    apply_penalties,
    uniform,
)

DEVICES = ["cpu"] + (["cuda"] if torch.cuda.is_available() else [])


@dataclass
class Row:
    params: SamplingParams
    seed: int = 0
    prompt_token_ids: list[int] = field(default_factory=list)
    output_token_ids: list[int] = field(default_factory=list)
    matcher: Any = None

    @property
    def num_output_tokens(self) -> int:
        return len(self.output_token_ids)


def seeded(seed: int, device: str = "cpu") -> torch.Generator:
    return torch.Generator(device=device).manual_seed(seed)


def draws(logits: list[float], params: SamplingParams, n: int = 4000) -> torch.Tensor:
    """Sample `n` rows of seeds 0 to n - 1 with the same logits at once; counts per token."""
    out = Sampler()(torch.tensor([logits]).repeat(n, 1), [Row(params, seed) for seed in range(n)])
    return torch.bincount(torch.tensor(out.token_ids), minlength=len(logits))


def test_greedy_picks_argmax() -> None:
    logits = torch.randn(5, 50, generator=seeded(1))
    out = Sampler()(logits, [Row(SamplingParams(temperature=0.0)) for _ in range(5)])
    assert isinstance(out, SamplerOutput)
    assert out.token_ids == logits.argmax(dim=-1).tolist()
    assert out.logprobs == [None] * 5


def test_top_k_one_equals_greedy() -> None:
    logits = torch.randn(8, 100, generator=seeded(2))
    out = Sampler()(logits, [Row(SamplingParams(temperature=1.0, top_k=1)) for _ in range(8)])
    assert out.token_ids == logits.argmax(dim=-1).tolist()


def test_tiny_top_p_keeps_only_best_token() -> None:
    logits = torch.randn(8, 100, generator=seeded(3))
    out = Sampler()(logits, [Row(SamplingParams(temperature=1.5, top_p=0.001)) for _ in range(8)])
    assert out.token_ids == logits.argmax(dim=-1).tolist()


PROBS = [0.5, 0.3, 0.15, 0.05]
LOGITS = torch.tensor(PROBS).log().tolist()


@pytest.mark.parametrize(
    ("params", "allowed"),
    [
        (SamplingParams(top_k=2), {0, 1}),
        (SamplingParams(top_p=0.7), {0, 1}),  # 0.5 < 0.7 before token 1, 0.8 before token 2
        (SamplingParams(top_p=0.85), {0, 1, 2}),
        (SamplingParams(min_p=0.2), {0, 1, 2}),  # drops probs < 0.1
        (SamplingParams(min_p=0.5), {0, 1}),  # drops probs < 0.25
        (SamplingParams(top_k=3, min_p=0.5), {0, 1}),
    ],
)
def test_filtered_tokens_are_never_sampled(params: SamplingParams, allowed: set[int]) -> None:
    counts = draws(LOGITS, params)
    assert {i for i, c in enumerate(counts.tolist()) if c > 0} == allowed


def test_frequencies_follow_softmax_with_temperature() -> None:
    logits = [1.0, 0.0, -1.0, 2.0, 0.5]
    expected = torch.softmax(torch.tensor(logits) / 0.7, dim=-1)
    counts = draws(logits, SamplingParams(temperature=0.7), n=20000)
    assert torch.allclose(counts / 20000, expected, atol=0.015)


@pytest.mark.parametrize(("spread", "fits"), [(3.0, True), (0.5, False)])
def test_drawing_from_the_best_candidates_keeps_the_distribution(spread: float, fits: bool) -> None:
    """A peaked row's nucleus lies among the CANDIDATES best tokens and is drawn from them alone; a flat row's does
    not (it takes the whole vocabulary). Where it fits, every token takes the same share of a grid of draws."""
    vocab, n = 2000, 4000
    assert vocab > CANDIDATES
    logits = (torch.randn(vocab, generator=seeded(4)) * spread).repeat(n, 1)
    params = [SamplingParams(temperature=1.0, top_p=0.9, min_p=0.001)] * n
    u = (torch.arange(n, dtype=torch.float32)[:, None] + 0.5) / n
    picked, fitted = _sample_candidates(logits, u, params)
    assert fitted.tolist() == [fits] * n
    whole = torch.bincount(_sample_vocabulary(logits, u, params), minlength=vocab)
    assert (whole > 0).sum() > (1 if fits else CANDIDATES)
    if fits:
        assert (torch.bincount(picked, minlength=vocab) - whole).abs().max() <= 2


def test_seeded_frequencies_follow_softmax() -> None:
    logits = torch.tensor([0.0, 1.0, -0.5, 0.3])
    n = 4000
    for position in (0, 1, 1000):  # over seeds, at any position of the reply
        rows = [Row(SamplingParams(temperature=1.0), seed, output_token_ids=[0] * position) for seed in range(n)]
        out = Sampler()(logits.repeat(n, 1), rows)
        counts = torch.bincount(torch.tensor(out.token_ids), minlength=4)
        assert torch.allclose(counts / n, logits.softmax(dim=-1), atol=0.03)
    rows = [Row(SamplingParams(temperature=1.0), 5, output_token_ids=[0] * position) for position in range(n)]
    out = Sampler()(logits.repeat(n, 1), rows)  # over the positions of one seed's reply
    counts = torch.bincount(torch.tensor(out.token_ids), minlength=4)
    assert torch.allclose(counts / n, logits.softmax(dim=-1), atol=0.03)


def test_the_draws_are_uniform_and_unrelated_across_seeds_and_positions() -> None:
    draws = torch.tensor([[uniform(seed, position) for position in range(64)] for seed in range(256)])
    assert 0.0 <= draws.min() and draws.max() < 1.0
    assert torch.histc(draws, bins=8, min=0, max=1).div(draws.numel()).sub(1 / 8).abs().max() < 0.01
    for a, b in ((draws[:, :-1], draws[:, 1:]), (draws[:-1], draws[1:])):  # neighbouring positions, seeds
        assert abs(torch.corrcoef(torch.stack([a.flatten(), b.flatten()]))[0, 1]) < 0.03


def test_repetition_penalty_follows_hf_semantics() -> None:
    logits = torch.tensor([[2.0, -2.0, 1.0, 0.5]])
    row = Row(SamplingParams(repetition_penalty=2.0), prompt_token_ids=[0], output_token_ids=[1, 1])
    assert apply_penalties(logits, [row]).tolist() == [[1.0, -4.0, 1.0, 0.5]]


@pytest.mark.parametrize(
    ("logits", "row", "before", "after"),
    [
        # positive logit of a prompt token is divided: 2.0 -> 1.0 < 1.5
        ([2.0, 1.5, -1.0], Row(SamplingParams(temperature=0.0, repetition_penalty=2.0), prompt_token_ids=[0]), 0, 1),
        # negative logit of an output token is multiplied: -1.0 -> -2.0 < -1.5
        ([-1.0, -1.5, -3.0], Row(SamplingParams(temperature=0.0, repetition_penalty=2.0), output_token_ids=[0]), 0, 1),
        # a penalty below 1 rewards: -1.5 -> -0.75 > -1.0
        ([-1.0, -1.5, -3.0], Row(SamplingParams(temperature=0.0, repetition_penalty=0.5), output_token_ids=[1]), 0, 1),
    ],
)
def test_repetition_penalty_changes_argmax(logits: list[float], row: Row, before: int, after: int) -> None:
    assert torch.tensor(logits).argmax().item() == before
    assert Sampler()(torch.tensor([logits]), [row]).token_ids == [after]


def test_presence_and_frequency_penalties() -> None:
    logits = torch.zeros(3, 5)
    rows = [
        Row(SamplingParams(presence_penalty=0.5, frequency_penalty=0.25), prompt_token_ids=[3, 4],
            output_token_ids=[1, 1, 2]),
        Row(SamplingParams(), prompt_token_ids=[0], output_token_ids=[0, 0]),  # no penalties
        Row(SamplingParams(frequency_penalty=-1.0, repetition_penalty=2.0), output_token_ids=[4, 4, 4]),
    ]
    expected = [
        [0.0, -1.0, -0.75, 0.0, 0.0],  # token 1: 0.5 + 2 * 0.25, token 2: 0.5 + 0.25; prompt ignored
        [0.0, 0.0, 0.0, 0.0, 0.0],
        [0.0, 0.0, 0.0, 0.0, 3.0],  # 0 * 2 = 0, then + 3 * 1.0
    ]
    assert apply_penalties(logits, rows).tolist() == expected
    assert logits.eq(0).all()  # the input is left alone


def test_no_penalties_returns_logits_unchanged() -> None:
    logits = torch.randn(2, 10)
    rows = [Row(SamplingParams(), prompt_token_ids=[1, 2], output_token_ids=[3])] * 2
    assert apply_penalties(logits, rows) is logits


@pytest.mark.parametrize("device", DEVICES)
def test_seeded_row_is_independent_of_batch(device: str) -> None:
    vocab, steps = 64, 6
    params = SamplingParams(temperature=0.9, top_k=40, top_p=0.95, min_p=0.01, seed=7)
    step_logits = [torch.randn(vocab, generator=seeded(100 + s)).to(device) for s in range(steps)]

    alone = Row(params, 7)
    for x in step_logits:
        alone.output_token_ids.append(Sampler()(x.unsqueeze(0), [alone]).token_ids[0])

    for position in range(4):
        others = [
            Row(SamplingParams(temperature=1.3), 3),
            Row(SamplingParams(temperature=0.0)),
            Row(SamplingParams(temperature=1.0, top_p=0.5, repetition_penalty=1.2), 99, [1, 2, 3]),
        ]
        row = Row(params, 7)
        for x in step_logits:
            rows = others[:position] + [row] + others[position:]
            logits = torch.stack([torch.randn(vocab, device=device) for _ in others[:position]] + [x]
                                 + [torch.randn(vocab, device=device) for _ in others[position:]])
            row.output_token_ids.append(Sampler()(logits, rows).token_ids[position])
        assert row.output_token_ids == alone.output_token_ids, position


def test_a_token_depends_on_its_seed_and_position_not_on_the_steps_before() -> None:
    """A row's draw at position p is the same in its p-th step and in a first step that finds p tokens written (a
    preemption's recompute, a checked draft)."""
    logits = torch.randn(1, 200, generator=seeded(6))
    params = SamplingParams(temperature=1.0)
    row = Row(params, 11)
    for _ in range(12):
        row.output_token_ids.append(Sampler()(logits, [row]).token_ids[0])
    fresh = [Sampler()(logits, [Row(params, 11, output_token_ids=row.output_token_ids[:p])]).token_ids[0]
             for p in range(12)]
    assert fresh == row.output_token_ids
    assert len(set(fresh)) > 3


def test_different_seeds_give_different_tokens() -> None:
    logits = torch.zeros(1, 1000)
    first = [Sampler()(logits, [Row(SamplingParams(), s)]).token_ids[0] for s in range(5)]
    assert len(set(first)) > 1


def test_logprobs_use_raw_logits() -> None:
    logits = torch.randn(3, 30, generator=seeded(4))
    rows = [
        Row(SamplingParams(temperature=0.5, logprobs=5, repetition_penalty=1.5), output_token_ids=[0, 1]),
        Row(SamplingParams(temperature=0.0)),
        Row(SamplingParams(temperature=0.0, logprobs=0, presence_penalty=1.0), output_token_ids=[2]),
    ]
    out = Sampler()(logits, rows)
    reference = torch.log_softmax(logits, dim=-1)

    first = out.logprobs[0]
    assert first is not None
    assert first.token_id == out.token_ids[0]
    assert first.logprob == pytest.approx(reference[0, out.token_ids[0]].item(), abs=1e-6)
    assert len(first.top) == 5
    assert [t for t, _ in first.top] == reference[0].topk(5).indices.tolist()
    values = [v for _, v in first.top]
    assert values == sorted(values, reverse=True)
    assert values == pytest.approx(reference[0].topk(5).values.tolist(), abs=1e-6)

    assert out.logprobs[1] is None
    last = out.logprobs[2]
    assert last is not None and last.top == []
    assert last.logprob == pytest.approx(reference[2, out.token_ids[2]].item(), abs=1e-6)


@dataclass
class AllowedTokens:
    """A matcher's face to the sampler: the bitmask of the tokens its grammar allows next."""

    next_token_bitmask: np.ndarray

    @classmethod
    def of(cls, tokens: list[int], vocab: int) -> "AllowedTokens":
        allowed = np.zeros(-(-vocab // 32) * 32, dtype=np.bool_)
        allowed[tokens] = True
        return cls(np.packbits(allowed, bitorder="little").view(np.int32))


@pytest.mark.parametrize("temperature", [0.0, 1.0])
def test_grammar_masks_only_its_rows(temperature: float) -> None:
    logits = torch.randn(6, 100, generator=seeded(7))
    allowed = [3, 64, 99]
    rows = [Row(SamplingParams(temperature=temperature), i, matcher=AllowedTokens.of(allowed, 100) if i % 2 else None)
            for i in range(6)]
    free = [Row(SamplingParams(temperature=temperature), i) for i in range(0, 6, 2)]
    out = Sampler()(logits.clone(), rows)
    assert all(out.token_ids[i] in allowed for i in (1, 3, 5))
    if temperature == 0.0:  # greedy: the best allowed token
        assert all(out.token_ids[i] == max(allowed, key=lambda t: logits[i, t]) for i in (1, 3, 5))
    assert [out.token_ids[i] for i in (0, 2, 4)] == Sampler()(logits[0::2].clone(), free).token_ids


def test_grammar_leaves_logprobs_raw() -> None:
    logits = torch.randn(2, 40, generator=seeded(8))
    rows = [Row(SamplingParams(temperature=0.0, logprobs=3), matcher=AllowedTokens.of([5], 40)) for _ in range(2)]
    out = Sampler()(logits, rows)
    reference = torch.log_softmax(logits, dim=-1)
    assert out.token_ids == [5, 5]
    assert [lp.logprob for lp in out.logprobs] == pytest.approx(reference[:, 5].tolist(), abs=1e-6)
    assert [t for t, _ in out.logprobs[0].top] == reference[0].topk(3).indices.tolist()
