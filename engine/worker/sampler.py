"""Pick one token per sequence from a step's logits, vectorized over the batch."""

from collections.abc import Sequence

import numpy as np
import torch

from localchat.engine.core.step_outputs import SamplerOutput, SampleRow
from localchat.engine.frontend.outputs import TokenLogprob
from localchat.engine.sampling_params import SamplingParams


class Sampler:
    """Penalties and grammars, then greedy or temperature / top-k / top-p / min-p sampling, for a batch.

    Each row is a SampleRow: `params`, `seed` (an int), `matcher` (a structured_output.Matcher or None),
    `prompt_token_ids`, `output_token_ids` and `num_output_tokens`. A sampled row's randomness is one number keyed by
    its seed and the position of the token it draws in its reply (uniform): not by the batch, nor by how many steps
    ran before, so a token is the same whether it is drawn alone, batched, after a preemption or while checking a
    draft.
    """

    @torch.inference_mode()  # as the model runner's: its logits are masked in place
    def __call__(self, logits: torch.Tensor, rows: Sequence[SampleRow]) -> SamplerOutput:
        params = [row.params for row in rows]
        penalized = apply_penalties(logits.float(), rows)
        constrained = [i for i, row in enumerate(rows) if row.matcher is not None]
        if constrained:
            if penalized is logits and any(params[i].logprobs is not None for i in constrained):
                penalized = logits.clone()  # masked in place below; logprobs are of the raw logits
            apply_grammars(penalized, rows, constrained)
        sampled = [i for i, p in enumerate(params) if not p.greedy]
        if len(sampled) < len(rows):
            tokens = penalized.argmax(dim=-1)
        else:  # every row is sampled: no greedy row needs an argmax over its vocabulary
            tokens = torch.empty(len(rows), dtype=torch.long, device=logits.device)
        if sampled:
            index = torch.tensor(sampled, device=logits.device)
            tokens[index] = _sample(_rows(penalized, sampled), [rows[i] for i in sampled])
        token_ids = tokens.tolist()
        return SamplerOutput(token_ids, _logprobs(logits, token_ids, params))


def apply_penalties(logits: torch.Tensor, rows: Sequence[SampleRow]) -> torch.Tensor:
    """Repetition penalty over prompt and output tokens (HF), then presence and
    frequency penalties over output tokens (OpenAI). Returns a new tensor, or `logits`
    itself when no row has a penalty."""
    params: list[SamplingParams] = [row.params for row in rows]
    use_repetition = any(p.repetition_penalty != 1.0 for p in params)
    use_openai = any(p.presence_penalty or p.frequency_penalty for p in params)
    if not (use_repetition or use_openai):
        return logits
    vocab, device = logits.shape[-1], logits.device
    output_counts = _counts([row.output_token_ids for row in rows], vocab, device)
    if use_repetition:
        prompts = [r.prompt_token_ids if r.params.repetition_penalty != 1.0 else [] for r in rows]
        seen = (output_counts + _counts(prompts, vocab, device)) > 0
        penalty = _column([p.repetition_penalty for p in params], device)
        logits = torch.where(seen, torch.where(logits > 0, logits / penalty, logits * penalty), logits)
    if use_openai:
        presence = _column([p.presence_penalty for p in params], device)
        frequency = _column([p.frequency_penalty for p in params], device)
        logits = logits - presence * (output_counts > 0) - frequency * output_counts
    return logits


def apply_grammars(logits: torch.Tensor, rows: Sequence[SampleRow], constrained: list[int]) -> None:
    """-inf, in place, for each token that a constrained row's grammar does not allow next. The rows' bitmasks (one
    bit per token, from their matchers) are unpacked together; the other rows are not touched."""
    bitmasks = np.stack([rows[i].matcher.next_token_bitmask for i in constrained])
    allowed = np.unpackbits(bitmasks.view(np.uint8), axis=-1, count=logits.shape[-1], bitorder="little")
    banned = torch.from_numpy(allowed.view(np.bool_)).logical_not_().to(logits.device)
    if len(constrained) == len(rows):
        logits.masked_fill_(banned, float("-inf"))
    else:
        for mask, i in zip(banned, constrained):
            logits[i].masked_fill_(mask, float("-inf"))


CANDIDATES = 256  # a top-k or top-p row is drawn from its best tokens alone when its nucleus lies within these


def _sample(logits: torch.Tensor, rows: Sequence[SampleRow]) -> torch.Tensor:
    """Temperature, top-k, top-p and min-p, then one uniform draw per row, inverted through the row's CDF.

    A row with top-k or top-p whose kept tokens all lie among its CANDIDATES best (the usual case: a nucleus of
    0.95 rarely holds more) is drawn from those alone: a partial sort instead of sorting the vocabulary, the same
    distribution. The others take the whole vocabulary. Which way a row goes depends on its own logits only."""
    params: list[SamplingParams] = [row.params for row in rows]
    device = logits.device
    logits = logits / _column([p.temperature for p in params], device)
    u = torch.tensor([[uniform(row.seed, row.num_output_tokens)] for row in rows], device=device)
    tokens = torch.empty(len(rows), dtype=torch.long, device=device)
    whole = list(range(len(rows)))
    narrowed = [i for i, p in enumerate(params) if p.top_k or p.top_p < 1.0]
    if narrowed:
        index = torch.tensor(narrowed, device=device)
        picked, fits = _sample_candidates(_rows(logits, narrowed), _rows(u, narrowed), [params[i] for i in narrowed])
        tokens[index[fits]] = picked[fits]
        fitted = {narrowed[j] for j in fits.nonzero().flatten().tolist()}
        whole = [i for i in whole if i not in fitted]
    if whole:
        index = torch.tensor(whole, device=device)
        tokens[index] = _sample_vocabulary(_rows(logits, whole), _rows(u, whole), [params[i] for i in whole])
    return tokens


def _rows(x: torch.Tensor, index: list[int]) -> torch.Tensor:
    """Rows `index` of x; x itself where they are all of its rows in order (a fork's: no copy of its logits)."""
    return x if index == list(range(len(x))) else x[torch.tensor(index, device=x.device)]


_MASK = 2**64 - 1


def _mix(x: int) -> int:
    """SplitMix64's finalizer: 64 bits to 64 well-mixed bits."""
    x = (x ^ (x >> 30)) * 0xBF58476D1CE4E5B9 & _MASK
    x = (x ^ (x >> 27)) * 0x94D049BB133111EB & _MASK
    return x ^ (x >> 31)


def uniform(seed: int, position: int) -> float:
    """The draw in [0, 1) of the token at `position` of a reply sampled with `seed`: the position-th number of a
    SplitMix64 stream started from the mixed seed, rounded down to 24 bits (exact in float32, below 1)."""
    return (_mix((_mix(seed) + 0x9E3779B97F4A7C15 * (position + 1)) & _MASK) >> 40) / 2**24


def _sample_candidates(logits: torch.Tensor, u: torch.Tensor, params: Sequence[SamplingParams]
                       ) -> tuple[torch.Tensor, torch.Tensor]:
    """(a token per row, whether the row's kept tokens lie among its best candidates, so that its token counts):
    top-k, then the top-p nucleus (the tokens whose better tokens hold less than top_p of the mass, under the
    top-k's softmax), then min-p, within the candidates."""
    vocab, device = logits.shape[-1], logits.device
    top_k = torch.tensor([p.top_k or vocab for p in params], device=device)[:, None]
    count = min(vocab, max(CANDIDATES, *(p.top_k for p in params)))
    values, order = logits.topk(count, dim=-1)  # descending
    values = values.masked_fill(torch.arange(count, device=device) >= top_k, float("-inf"))
    # the softmax's denominator: over the row's top k where that lies among the candidates, else its vocabulary
    within = top_k <= count
    norm = torch.where(within, values.logsumexp(dim=-1, keepdim=True), logits.logsumexp(dim=-1, keepdim=True))
    probs = (values - norm).exp()
    mass = probs.cumsum(dim=-1)
    top_p = _column([p.top_p for p in params], device)
    probs = probs.masked_fill((mass - probs >= top_p) & (top_p < 1.0), 0.0)
    fits = (within | (mass[:, -1:] >= top_p)).squeeze(1)
    min_p = _column([p.min_p for p in params], device)
    probs = probs.masked_fill(probs < min_p * probs[:, :1], 0.0)
    cdf = probs.cumsum(dim=-1)
    picks = torch.searchsorted(cdf, u * cdf[:, -1:], right=True).clamp_max_(count - 1)
    return order.gather(1, picks).squeeze(1), fits


def _sample_vocabulary(logits: torch.Tensor, u: torch.Tensor, params: Sequence[SamplingParams]) -> torch.Tensor:
    """The same as _sample_candidates over the whole vocabulary."""
    device = logits.device
    if any(p.top_k or p.top_p < 1.0 for p in params):
        logits = _top_k_top_p(logits, params)
    probs = logits.softmax(dim=-1)
    if any(p.min_p > 0.0 for p in params):
        min_p = _column([p.min_p for p in params], device)
        probs = probs.masked_fill(probs < min_p * probs.amax(dim=-1, keepdim=True), 0.0)
    cdf = probs.cumsum(dim=-1)
    # right=True: the first token whose cumulative mass exceeds the draw, never one of zero probability
    tokens = torch.searchsorted(cdf, u * cdf[:, -1:], right=True).squeeze(1)
    return tokens.clamp_max_(probs.shape[-1] - 1)


def _top_k_top_p(logits: torch.Tensor, params: Sequence[SamplingParams]) -> torch.Tensor:
    """Set to -inf the tokens outside each row's top k, then outside its top-p nucleus."""
    vocab, device = logits.shape[-1], logits.device
    ordered, order = logits.sort(dim=-1, descending=True)
    if any(p.top_k for p in params):
        top_k = _column([p.top_k or vocab for p in params], device)
        ordered = ordered.masked_fill(torch.arange(vocab, device=device) >= top_k, float("-inf"))
    if any(p.top_p < 1.0 for p in params):
        top_p = _column([p.top_p for p in params], device)
        probs = ordered.softmax(dim=-1)
        mass_before = probs.cumsum(dim=-1) - probs  # the top token always has 0 before it
        ordered = ordered.masked_fill((mass_before >= top_p) & (top_p < 1.0), float("-inf"))
    return logits.scatter(-1, order, ordered)


def _logprobs(
    logits: torch.Tensor, token_ids: list[int], params: Sequence[SamplingParams]
) -> list[TokenLogprob | None]:
    """Log-probabilities under the raw logits, for the rows that ask for them."""
    result: list[TokenLogprob | None] = [None] * len(params)
    wanted = [i for i, p in enumerate(params) if p.logprobs is not None]
    if not wanted:
        return result
    device = logits.device
    logprobs = logits[torch.tensor(wanted, device=device)].float().log_softmax(dim=-1)
    chosen_ids = torch.tensor([token_ids[i] for i in wanted], device=device)
    chosen = logprobs.gather(1, chosen_ids.unsqueeze(1)).squeeze(1).tolist()
    k = min(max(params[i].logprobs or 0 for i in wanted), logprobs.shape[-1])
    top_values, top_ids = (t.tolist() for t in logprobs.topk(k, dim=-1))
    for j, i in enumerate(wanted):
        n = params[i].logprobs or 0
        result[i] = TokenLogprob(token_ids[i], chosen[j], list(zip(top_ids[j][:n], top_values[j][:n])))
    return result


def _counts(token_lists: Sequence[Sequence[int]], vocab: int, device: torch.device) -> torch.Tensor:
    """A float [rows, vocab] tensor counting how often each row holds each token."""
    counts = torch.zeros(len(token_lists), vocab, device=device)
    flat = [row * vocab + token for row, tokens in enumerate(token_lists) for token in tokens]
    index = torch.tensor(flat, dtype=torch.long, device=device)
    counts.view(-1).scatter_add_(0, index, torch.ones(len(flat), device=device))
    return counts


def _column(values: Sequence[float], device: torch.device) -> torch.Tensor:
    """Per-row values as a float [rows, 1] tensor, to broadcast over the vocabulary."""
    return torch.tensor(values, dtype=torch.float32, device=device).unsqueeze(1)
