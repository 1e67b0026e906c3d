"""The Triton attention kernels on an NVIDIA GPU: correctness at real sizes, decode attention against the
memory-bandwidth floor, and end-to-end engine throughput with each attention backend.

1. store, decode and prefill attention and block copy against the PyTorch path (random non-contiguous
   block tables, contexts that are not multiples of the block size);
2. decode attention timed with CUDA events: the floor is the KV bytes it must read over the bandwidth of a
   large device-to-device copy;
3. the embedded model generating for --requests requests with the "torch" and the "triton" backend.

Prints a table and writes results/gpu_check.json; exit code 1 if a kernel disagrees, 2 without a CUDA device.

    python benchmarks/gpu_check.py [--dtype bfloat16] [--requests 64] [--max-tokens 256] [--skip-engine]
"""

import argparse
import functools
import json
import sys
import time
from pathlib import Path

import torch

from localchat.engine.worker.attention import AttentionMetadata, TorchPagedAttention

RESULTS = Path(__file__).parent / "results"
TOLERANCE = {torch.float32: 1e-4, torch.float16: 5e-3, torch.bfloat16: 3e-2}  # atol = rtol


def random_batch(seqs: list[tuple[int, int]], block_size: int, num_blocks: int, device: torch.device
                 ) -> AttentionMetadata:
    """Metadata of a step over seqs, (new tokens, context length) each, on blocks drawn at random."""
    free = torch.randperm(num_blocks).tolist()
    tables = []
    for _, context in seqs:
        n = -(-context // block_size)
        table, free = free[:n], free[n:]
        tables.append(table)
    return AttentionMetadata.build([n for n, _ in seqs], [c for _, c in seqs], tables, block_size, device)


def cuda_seconds(fn, warmup: int = 5, iters: int = 20) -> float:
    """Mean seconds of one fn() call, by CUDA events after a warmup."""
    for _ in range(warmup):
        fn()
    start, end = torch.cuda.Event(enable_timing=True), torch.cuda.Event(enable_timing=True)
    torch.cuda.synchronize()
    start.record()
    for _ in range(iters):
        fn()
    end.record()
    torch.cuda.synchronize()
    return start.elapsed_time(end) / 1e3 / iters


def max_error(actual: torch.Tensor, expected: torch.Tensor) -> float:
    """The largest |actual - expected| / (1 + |expected|); inf where actual is NaN and expected is not."""
    error = (actual.float() - expected.float()).abs() / (1 + expected.float().abs())
    return float(torch.nan_to_num(error, nan=float("inf")).max())


def check_kernels(args, dtype: torch.dtype, device: torch.device) -> list[dict]:
    from localchat.engine.worker.triton_attention import TritonPagedAttention as Triton

    bs, kv_heads, heads, head_dim = args.block_size, args.num_kv_heads, args.num_heads, args.head_dim
    rows = []

    def row(kernel: str, shape: str, error: float) -> None:
        rows.append({"check": kernel, "shape": shape, "max_error": error, "ok": error <= TOLERANCE[dtype]})

    # attention: decodes, whole prompts and chunks over a cached prefix, in one step
    context = args.context
    seqs = ([(1, context - i) for i in range(args.num_seqs)] + [(1, 1), (1, 17)]
            + [(context, context), (1000, 1000), (context // 4, context + 1), (33, 4097)])
    num_blocks = sum(-(-c // bs) for _, c in seqs) + 16
    meta = random_batch(seqs, bs, num_blocks, device)
    k_cache, v_cache = torch.randn(2, num_blocks, bs, kv_heads, head_dim, dtype=dtype, device=device)
    query = torch.randn(sum(n for n, _ in seqs), heads, head_dim, dtype=dtype, device=device)
    expected = TorchPagedAttention.attend(query, k_cache, v_cache, meta, head_dim**-0.5)
    actual = Triton.attend(query, k_cache, v_cache, meta, head_dim**-0.5)
    decode_rows = meta.decode_tokens
    prefill_rows = torch.ones(len(query), dtype=torch.bool, device=device).index_fill_(0, decode_rows, False)
    row("decode attention", f"{len(decode_rows)} seqs, context {context}",
        max_error(actual[decode_rows], expected[decode_rows]))
    row("prefill attention", f"{len(meta.prefill_seqs)} seqs, {int(prefill_rows.sum())} tokens",
        max_error(actual[prefill_rows], expected[prefill_rows]))

    # store: every new token of the step, a few skipped (slot -1)
    slots = meta.slot_mapping.clone()
    slots[::11] = -1
    key, value = torch.randn(2, len(slots), kv_heads, head_dim, dtype=dtype, device=device)
    caches = [torch.full((2, num_blocks, bs, kv_heads, head_dim), float("nan"), dtype=dtype, device=device)
              for _ in range(2)]
    kept = slots >= 0
    TorchPagedAttention.store(key[kept], value[kept], caches[0][0], caches[0][1], slots[kept])
    Triton.store(key, value, caches[1][0], caches[1][1], slots)
    same = torch.equal(caches[0].nan_to_num(7.0), caches[1].nan_to_num(7.0))
    row("store", f"{len(slots)} tokens", 0.0 if same else float("inf"))

    # block copy: all layers in one launch
    cache = torch.randn(args.layers, 2, 512, bs, kv_heads, head_dim, dtype=dtype, device=device)
    pairs = torch.randperm(512)[:128].view(-1, 2).tolist()
    expected_cache = cache.clone()
    TorchPagedAttention.copy_blocks(expected_cache, pairs)
    Triton.copy_blocks(cache, pairs)
    row("copy blocks", f"{len(pairs)} pairs x {args.layers} layers", 0.0 if torch.equal(cache, expected_cache)
        else float("inf"))
    return rows


def time_decode(args, dtype: torch.dtype, device: torch.device) -> tuple[list[dict], float]:
    """Decode attention per shape: measured time, achieved bandwidth and the share of the floor it reaches."""
    from localchat.engine.worker.triton_attention import TritonPagedAttention as Triton

    size = 2 * 1024**3
    source, target = (torch.empty(size, dtype=torch.uint8, device=device) for _ in range(2))
    bandwidth = 2 * size / cuda_seconds(functools.partial(target.copy_, source))  # read + write
    del source, target
    bs, kv_heads, heads, head_dim = args.block_size, args.num_kv_heads, args.num_heads, args.head_dim
    rows = []
    for num_seqs, context in [(args.num_seqs, args.context), (256, 512), (8, 8192), (1, 32768)]:
        meta = random_batch([(1, context)] * num_seqs, bs, num_seqs * -(-context // bs), device)
        k_cache, v_cache = torch.randn(2, num_seqs * -(-context // bs), bs, kv_heads, head_dim, dtype=dtype,
                                       device=device)
        query = torch.randn(num_seqs, heads, head_dim, dtype=dtype, device=device)
        kv_bytes = 2 * num_seqs * context * kv_heads * head_dim * k_cache.element_size()
        for name, backend in [("triton", Triton), ("torch", TorchPagedAttention)]:
            seconds = cuda_seconds(functools.partial(backend.attend, query, k_cache, v_cache, meta, head_dim**-0.5))
            rows.append({"decode": name, "seqs x context": f"{num_seqs} x {context}", "us": seconds * 1e6,
                         "GB/s": kv_bytes / seconds / 1e9, "floor_us": kv_bytes / bandwidth * 1e6,
                         "of_floor": kv_bytes / bandwidth / seconds})
        del k_cache, v_cache
    return rows, bandwidth


def time_engine(args) -> list[dict]:
    """Generated tokens per second of the embedded model, all requests submitted at once, per backend."""
    from localchat.engine import LLM, SamplingParams

    params = SamplingParams(temperature=0, max_tokens=args.max_tokens, ignore_eos=True)
    rows, outputs = [], {}
    for backend in ("torch", "triton"):
        llm = LLM(dtype=args.dtype, attention_backend=backend)
        vocab = llm.engine.runner.model.config.vocab_size
        generator = torch.Generator().manual_seed(0)
        prompts = [torch.randint(0, vocab, (int(n),), generator=generator).tolist()
                   for n in torch.randint(32, 512, (args.requests,), generator=generator)]
        llm.generate(prompts, params)  # compiles every kernel variant the run needs
        llm.engine.reset_prefix_cache()  # no prefix hits from the warmup
        torch.cuda.synchronize()
        start = time.perf_counter()
        results = llm.generate(prompts, params)
        seconds = time.perf_counter() - start
        outputs[backend] = [r.outputs[0].token_ids for r in results]
        generated = sum(len(t) for t in outputs[backend])
        rows.append({"engine": backend, "requests": args.requests, "seconds": seconds,
                     "output_tok_s": generated / seconds,
                     "total_tok_s": (generated + sum(map(len, prompts))) / seconds})
        del llm
        torch.cuda.empty_cache()
    same = sum(a == b for a, b in zip(outputs["torch"], outputs["triton"]))
    rows[-1]["same_greedy_replies"] = f"{same}/{args.requests}"  # bf16 rounding may flip a late token
    return rows


def print_table(rows: list[dict]) -> None:
    columns = list(dict.fromkeys(k for r in rows for k in r))
    cells = [[f"{r[c]:.4g}" if isinstance(r.get(c), float) else str(r.get(c, "")) for c in columns] for r in rows]
    widths = [max(len(c), *(len(line[i]) for line in cells)) for i, c in enumerate(columns)]
    print("  ".join(c.ljust(w) for c, w in zip(columns, widths)))
    for line in cells:
        print("  ".join(v.ljust(w) for v, w in zip(line, widths)))
    print()


def main() -> int:
    parser = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("--dtype", default="bfloat16", choices=["bfloat16", "float16", "float32"])
    parser.add_argument("--num-seqs", type=int, default=64, help="decodes in the check and the main timing")
    parser.add_argument("--context", type=int, default=2048, help="their context length")
    parser.add_argument("--num-heads", type=int, default=32)
    parser.add_argument("--num-kv-heads", type=int, default=8)
    parser.add_argument("--head-dim", type=int, default=128)
    parser.add_argument("--block-size", type=int, default=16)
    parser.add_argument("--layers", type=int, default=24, help="layers of the cache in the block-copy check")
    parser.add_argument("--requests", type=int, default=64, help="requests in the engine run")
    parser.add_argument("--max-tokens", type=int, default=256, help="tokens generated per request")
    parser.add_argument("--skip-engine", action="store_true", help="kernels only")
    args = parser.parse_args()
    if not torch.cuda.is_available():
        print("gpu_check needs a CUDA device: none is visible to torch", file=sys.stderr)
        return 2
    device, dtype = torch.device("cuda"), getattr(torch, args.dtype)
    torch.manual_seed(0)
    checks = check_kernels(args, dtype, device)
    print_table(checks)
    decode, bandwidth = time_decode(args, dtype, device)
    print(f"device-to-device copy bandwidth: {bandwidth / 1e9:.0f} GB/s\n")
    print_table(decode)
    engine = [] if args.skip_engine else time_engine(args)
    if engine:
        print_table(engine)
    RESULTS.mkdir(exist_ok=True)
    result = {"device": torch.cuda.get_device_name(), "torch": torch.__version__, "args": vars(args),
              "copy_bandwidth_gb_s": bandwidth / 1e9, "checks": checks, "decode": decode, "engine": engine}
    (RESULTS / "gpu_check.json").write_text(json.dumps(result, indent=2))
    failed = [c["check"] for c in checks if not c["ok"]]
    if failed:
        print(f"FAILED: {', '.join(failed)}", file=sys.stderr)
    return 1 if failed else 0


if __name__ == "__main__":
    sys.exit(main())
