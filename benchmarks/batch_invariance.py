"""Why the CPU attention runs in block tiles of a fixed shape (engine/worker/attention.py), and what that costs.

1. Probes of torch's float32 kernels on this CPU: does a row's result keep its bits when the other rows, the key
   count or the padding change? (False: the shapes change the rounding.) And from how many rows on a batched
   matrix product keeps each row's bits, which the engine measures once and pads its tiles to.
2. The cost, 1,000 rows of one layer: one SDPA call per row over exactly its keys (the previous scheme), the
   engine's block tiles, and one causal SDPA call (fast, but not batch-invariant).
3. The engine in process (embedded model, default packed weights): seeded replies cold, cached and batched, and
   the speed of a 1,000-token prefill, one decode at that context and 32 sequences.

    .venv/bin/python benchmarks/batch_invariance.py      (writes results/batch_invariance.json)
"""

import time

import torch
import torch.nn.functional as F

from common import report, set_threads

HEADS, KV_HEADS, DIM, ROWS = 9, 3, 64, 300  # SmolLM2-135M's attention shape


def kernel_probes() -> dict:
    from localchat.engine.worker.attention import _fewest_invariant_rows

    gen = torch.Generator().manual_seed(0)
    q, k, v = (torch.randn(HEADS, ROWS, DIM, generator=gen) for _ in range(3))
    scores = q @ k.transpose(1, 2)
    probs = torch.softmax(torch.randn(HEADS, ROWS, ROWS, generator=gen), -1)
    zeroed = probs.clone()
    zeroed[:, :, 200:] = 0
    row = torch.randn(ROWS, ROWS, generator=gen)
    causal = torch.softmax(row.masked_fill(torch.ones(ROWS, ROWS, dtype=torch.bool).triu(1), float("-inf")), -1)
    return {
        "qk_rows_keep_their_bits_in_fewer_rows (M=1..8 of 300)": [
            torch.equal(scores[:, :m], q[:, :m] @ k.transpose(1, 2)) for m in range(1, 9)],
        "qk_fewer_keys_same_bits (N=1,16,100,299)": [torch.equal(scores[:, :, :n], q @ k[:, :n].transpose(1, 2))
                                                      for n in (1, 16, 100, 299)],
        "pv_zero_padded_keys_same_bits (K=200,201,256,299)": [torch.equal(zeroed @ v, zeroed[:, :, :n] @ v[:, :n])
                                                               for n in (200, 201, 256, 299)],
        "softmax_in_a_longer_masked_row_same_bits (len=1,6,32,78,201)": [
            torch.equal(causal[r, : r + 1], torch.softmax(row[r, : r + 1], -1)) for r in (0, 5, 31, 77, 200)],
        "fewest_invariant_rows (the engine's tile padding)": _fewest_invariant_rows(DIM, torch.float32,
                                                                                    torch.device("cpu")),
    }


def attention_cost(rows: int = 1000) -> dict:
    from localchat.engine.worker.attention import AttentionMetadata, TorchPagedAttention

    gen = torch.Generator().manual_seed(1)
    q = torch.randn(rows, HEADS, DIM, generator=gen)
    k, v = (torch.randn(KV_HEADS, rows, DIM, generator=gen) for _ in range(2))
    group, block = HEADS // KV_HEADS, 16
    num_blocks = -(-rows // block)
    k_cache, v_cache = (torch.zeros(num_blocks, block, KV_HEADS, DIM) for _ in range(2))
    meta = AttentionMetadata.build([rows], [rows], [list(range(num_blocks))], block, torch.device("cpu"))
    TorchPagedAttention.store(k.transpose(0, 1), v.transpose(0, 1), k_cache, v_cache, meta.slot_mapping)

    def per_row():
        for r in range(rows):
            F.scaled_dot_product_attention(q[r].view(1, KV_HEADS, group, DIM), k[None, :, : r + 1],
                                           v[None, :, : r + 1], scale=DIM**-0.5)

    def block_tiles():
        TorchPagedAttention.attend(q, k_cache, v_cache, meta, DIM**-0.5)

    def one_call():
        F.scaled_dot_product_attention(q.transpose(0, 1)[None], k.repeat_interleave(group, 0)[None],
                                       v.repeat_interleave(group, 0)[None], is_causal=True, scale=DIM**-0.5)

    return {"per_row_sdpa_s": _best(per_row), "block_tiles_s": _best(block_tiles),
            "one_causal_sdpa_s": _best(one_call)}


def engine_runs() -> dict:
    from localchat.engine import LLM, SamplingParams

    llm = LLM()
    questions = ["Explain why the sky is blue.", "Write a poem about the sea.", "How do I sort a list in Python?",
                 "What is the capital of Japan?", "Give me three tips for sleeping better.",
                 "Translate 'good morning' to German."]
    prompts = [llm.engine.apply_chat_template([{"role": "user", "content": f"{q} (take {i})"}])
               for i, q in enumerate(questions)]
    params = [SamplingParams(temperature=0.9, top_p=0.95, seed=100 + i, max_tokens=24) for i in range(len(prompts))]
    llm.engine.reset_prefix_cache()
    cold = [llm.generate(p, s)[0].outputs[0].token_ids for p, s in zip(prompts, params)]
    cached = [llm.generate(p, s)[0].outputs[0].token_ids for p, s in zip(prompts, params)]
    llm.engine.reset_prefix_cache()
    batched = [o.outputs[0].token_ids for o in llm.generate(prompts, params)]

    long_prompt = list(range(1000, 2000))
    one = SamplingParams(temperature=0, max_tokens=1)
    llm.generate([long_prompt[:100]], one)  # warm-up
    llm.engine.reset_prefix_cache()
    started = time.perf_counter()
    llm.generate([long_prompt], one)
    prefill = time.perf_counter() - started
    started = time.perf_counter()  # the prompt is cached now: this times the decode
    decoded = llm.generate([long_prompt], SamplingParams(temperature=0, max_tokens=129, ignore_eos=True))[0]
    decode = time.perf_counter() - started
    many = [list(range(3000 + 50 * i, 3200 + 50 * i)) for i in range(32)]
    llm.generate(many, one)
    started = time.perf_counter()
    outs = llm.generate(many, SamplingParams(temperature=0, max_tokens=64, ignore_eos=True))
    batch = time.perf_counter() - started
    return {
        "seeded_prompts": len(prompts),
        "cold_equals_cached": sum(a == b for a, b in zip(cold, cached)),
        "cold_equals_batched": sum(a == b for a, b in zip(cold, batched)),
        "prefill_1000_tok_s": round(1000 / prefill, 1),
        "decode_at_1000_tok_s": round(len(decoded.outputs[0].token_ids) / decode, 1),
        "32_sequences_tok_s": round(sum(len(o.outputs[0].token_ids) for o in outs) / batch, 1),
    }


def _best(run, repeats: int = 3) -> float:
    times = []
    for _ in range(repeats):
        started = time.perf_counter()
        run()
        times.append(time.perf_counter() - started)
    return round(min(times), 4)


def main() -> None:
    set_threads()
    probes = kernel_probes()
    rows = [{"probe": name, "result": str(result)} for name, result in probes.items()]
    report("batch_invariance", rows, {**attention_cost(), **engine_runs()})


if __name__ == "__main__":
    main()
