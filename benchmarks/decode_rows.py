"""A decode step of M rows, split: n = M replies of one ~300-token prompt (the peers harness's workload d: temperature
0.7, top-p 0.95, speculation off), and for each M the step and its parts, the median over the replies' steps:

- the fused decoder layers (one native call: fused_decoder.py), the logits head and the sampler, timed in the step;
- inside the layers, each matrix's product over all the layers at M rows (their weights read from memory as a step
  reads them; the two-pass q/k/v at 2 M rows), and paged attention over all the layers on the step's own cache and
  block tables; `rest` is what the layers took beyond both (norms, quantization, RoPE, the KV store, residuals).

    python benchmarks/decode_rows.py [--rows 1,2,4,8,16] [--threads 1] [--clock cpu|wall] [--model FILE.gguf]

`x one row` divides each column by its M = 1 figure. On a machine shared with other work, --threads 1 --clock cpu
(the default) times the calling thread's CPU time, which every kernel runs on, and leaves out the time other
processes held the core; wall-clock figures on two threads scatter there. Writes results/decode_rows.json.
"""

import argparse
import os
import statistics
import time

import torch

from common import cpu_description, report, synthetic_chats
from localchat.engine import LLM, SamplingParams
from localchat.engine.worker import native_kernels
from localchat.engine.worker.attention import AttentionMetadata

PROMPT, NEW = 305, 40
CLOCKS = {"wall": time.perf_counter, "cpu": time.thread_time}
clock = CLOCKS["cpu"]


class Timer:
    """Each call of the wrapped methods, timed by `clock`, kept per name."""

    def __init__(self):
        self.seconds: dict[str, list[float]] = {}

    def wrap(self, owner, method: str, name: str) -> None:
        function = getattr(owner, method)

        def timed(*args, **kwargs):
            start = clock()
            result = function(*args, **kwargs)
            self.seconds.setdefault(name, []).append(clock() - start)
            return result

        setattr(owner, method, timed)

    def median_ms(self, name: str) -> float:
        return statistics.median(self.seconds[name]) * 1e3


def linears(model) -> dict[str, list]:
    """Each decoder matrix's PackedLinear in every layer, by name."""
    layers = model.layers
    return {"qkv": [layer.self_attn.qkv_proj for layer in layers], "o": [layer.self_attn.o_proj for layer in layers],
            "gate_up": [layer.mlp.gate_up_proj for layer in layers], "down": [layer.mlp.down_proj for layer in layers]}


def matmul_ms(kernels, model, rows: int, repeats: int = 5) -> dict[str, float]:
    """Each matrix's products at `rows` rows over all the layers (activations quantized once, as a step does)."""
    out = {}
    for name, layer_linears in linears(model).items():
        first = layer_linears[0]
        quantized = kernels.quantize(torch.randn(rows, first.in_features), first.parts[0].code_passes)
        times = []
        for _ in range(repeats):
            start = clock()
            for linear in layer_linears:
                for part in linear.parts:
                    kernels.matmul(quantized, part.panels, part.code_bits, part.out_features, part.code_passes)
            times.append(clock() - start)
        out[name] = statistics.median(times) * 1e3
    return out


def attention_ms(kernels, model, meta: AttentionMetadata, repeats: int = 5) -> float:
    """Paged attention of the step's rows over every layer's cache, with the step's own block tables."""
    attn = model.layers[0].self_attn
    query = torch.randn(len(meta.positions), attn.num_heads, attn.head_dim)
    times = []
    for _ in range(repeats):
        start = clock()
        for layer in model.layers:
            a = layer.self_attn
            kernels.attend(query, a.k_cache, a.v_cache, meta.block_tables, meta.token_seqs, meta.positions,
                           a.window, a.scale)
        times.append(clock() - start)
    return statistics.median(times) * 1e3


def decode(llm: LLM, prompt: list[int], rows: int, timer: Timer, metas: list) -> list[float]:
    """The step times of n = rows replies of `prompt` once they all decode (the first steps left out)."""
    engine = llm.engine
    engine.reset_prefix_cache()
    engine.add_request(prompt, SamplingParams(n=rows, seed=0, temperature=0.7, top_p=0.95, max_tokens=NEW,
                                              ignore_eos=True))
    for _ in range(3):  # the prompt, then the forks' first steps
        engine.step()
    timer.seconds.clear()
    metas.clear()
    steps = []
    while engine.has_unfinished_requests():
        start = clock()
        engine.step()
        steps.append(clock() - start)
    return steps[:-1]


def measure(llm: LLM, kernels, prompt: list[int], rows: int, timer: Timer, metas: list) -> dict:
    model = llm.engine.runner.model
    steps = decode(llm, prompt, rows, timer, metas)
    row = {"M": rows, "step ms": statistics.median(steps) * 1e3, **{
        name: timer.median_ms(name) for name in ("layers ms", "head ms", "sampler ms")}}
    shapes = matmul_ms(kernels, model, rows)
    row["attention ms"] = attention_ms(kernels, model, metas[-1])
    row.update({f"{name} ms": ms for name, ms in shapes.items()})
    row["rest ms"] = row["layers ms"] - sum(shapes.values()) - row["attention ms"]
    return row


def main() -> None:
    global clock
    parser = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("--rows", default="1,2,4,8,16")
    parser.add_argument("--threads", type=int, default=1)
    parser.add_argument("--clock", choices=tuple(CLOCKS), default="cpu")
    parser.add_argument("--model", default=None, help="a GGUF file of a Llama-family model (default: the embedded)")
    parser.add_argument("--name", default="decode_rows")
    args = parser.parse_args()
    if args.clock == "cpu" and args.threads != 1:
        parser.error("--clock cpu times the calling thread: it needs --threads 1")
    clock = CLOCKS[args.clock]
    torch.set_num_threads(args.threads)
    llm = LLM(model=args.model, speculative=False, cpu_threads=args.threads)
    runner = llm.engine.runner
    if runner.fused is None:
        raise SystemExit("the fused decoder layers do not run this model here (the log says why)")
    timer, metas = Timer(), []
    timer.wrap(runner.fused, "forward", "layers ms")
    timer.wrap(runner.model, "compute_logits", "head ms")
    timer.wrap(llm.engine, "sampler", "sampler ms")
    build = AttentionMetadata.build

    def kept(*args, **kwargs) -> AttentionMetadata:  # each step's metadata, for attention_ms
        metas.append(build(*args, **kwargs))
        return metas[-1]

    AttentionMetadata.build = kept
    (prompt,) = synthetic_chats(llm.tokenizer, 1, PROMPT, PROMPT, seed=3)
    prompt = (prompt * 2)[:PROMPT]
    rows = [measure(llm, native_kernels.load(), prompt, int(m), timer, metas) for m in args.rows.split(",")]
    one = rows[0]
    for row in rows:
        row["step x one row"] = row["step ms"] / one["step ms"]
    report(args.name, rows, {"cpu": cpu_description(), "threads": args.threads, "clock": args.clock,
                             "load average": os.getloadavg()[0]})


if __name__ == "__main__":
    main()
