"""The engine's sampled logits against a transformers model's, row by row (shared by the engine tests)."""

import torch


def record_logits(llm) -> list[tuple[list[int], torch.Tensor]]:
    """Every (tokens so far, logits) the engine samples from from now on, forks included."""
    seen = []
    sample = llm.engine.sampler

    def recording_sampler(logits, rows):
        seen.extend((list(row.token_ids), logits[i].clone()) for i, row in enumerate(rows))
        return sample(logits, rows)

    llm.engine.sampler = recording_sampler
    return seen


@torch.no_grad()
def reference_rows(reference: torch.nn.Module, seen: list[tuple[list[int], torch.Tensor]],
                   outputs) -> list[tuple[torch.Tensor, torch.Tensor]]:
    """(ours, transformers') for each recorded row on a reply's way, transformers' at the last of its tokens: one
    forward per finished reply (a causal model's logits at every position of it) covers the rows on its way. The rows
    of draft tokens that were not kept lie on no reply's way: they are left out."""
    finished = [o.prompt_token_ids + list(c.token_ids) for o in outputs for c in o.outputs]
    logits = [reference(torch.tensor([tokens])).logits[0] for tokens in finished]
    pairs = []
    for tokens, ours in seen:
        row = next((row for final, row in zip(finished, logits) if final[: len(tokens)] == tokens), None)
        if row is not None:
            pairs.append((ours, row[len(tokens) - 1]))
    return pairs
