"""What grammar-constrained decoding costs: decode tokens/s with a JSON Schema against the same decode without one, at 1
and at 32 concurrent sequences (~150-token chats), sampled at temperature 1.

Both runs time the same number of steps with every sequence decoding throughout: the free one ignores EOS, and the
schema (an array of at least 200 small objects) leaves no sequence done within the steps timed. The runs alternate,
--repeats times each, and each keeps its median step. The step's parts that a grammar adds to are also timed alone,
free of the forward's noise: the sampler (masks) and the output processor's append (matchers). And once: the grammar
compiler's set-up (the first constrained request of an engine pays it) and one schema's compile.

    python benchmarks/structured_decode.py [--dtype D] [--quantization auto|none] [--steps 64] [--repeats 3]
"""

import argparse
import statistics
import time

from common import Timer, report, result_name, set_threads, synthetic_chats
from localchat.engine import LLM, SamplingParams
from localchat.engine.frontend.structured_output import StructuredOutput

STREAMS = (1, 32)
PROMPT_TOKENS = 150
SCHEMA = {"type": "array", "minItems": 200, "items": {
    "type": "object", "properties": {"name": {"type": "string", "maxLength": 12}, "score": {"type": "integer"}},
    "required": ["name", "score"]}}


def step_ms(llm: LLM, prompts: list[list[int]], structured: StructuredOutput | None, steps: int
            ) -> tuple[float, float]:
    """The mean time of `steps` decode steps of these prompts' replies, after their prefills and 4 steps more, and of
    their sampling and updating (the grammar's step) within."""
    engine = llm.engine
    engine.reset_prefix_cache()
    for k, prompt in enumerate(prompts):
        engine.add_request(prompt, SamplingParams(temperature=1.0, seed=k, max_tokens=steps + 64, ignore_eos=True,
                                                  structured=structured))
    while any(seq.num_output_tokens == 0 for seq in engine.scheduler.running + list(engine.scheduler.waiting)):
        engine.step()
    for _ in range(4):
        engine.step()
    scheduler, sampler, update, spent = engine.scheduler, engine.sampler, engine.scheduler.update, [0.0]
    engine.sampler, scheduler.update = timed(sampler, spent), timed(update, spent)
    with Timer() as timer:
        for _ in range(steps):
            engine.step()
    engine.sampler, scheduler.update = sampler, update
    if len(engine.scheduler.running) != len(prompts):
        raise RuntimeError("a sequence finished within the steps timed: the runs would not compare")
    for request_id in list(engine.requests):
        engine.abort(request_id)
    return timer.seconds / steps * 1e3, spent[0] / steps * 1e3


def timed(call, spent: list[float]):
    """`call`, adding the seconds it takes to spent[0]."""
    def wrapper(*args):
        start = time.perf_counter()
        result = call(*args)
        spent[0] += time.perf_counter() - start
        return result
    return wrapper


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("--dtype", default="float32")
    parser.add_argument("--quantization", default="auto", choices=("auto", "none"))
    parser.add_argument("--steps", type=int, default=64)
    parser.add_argument("--repeats", type=int, default=3)
    args = parser.parse_args()
    threads = set_threads()
    llm = LLM(dtype=args.dtype, quantization=args.quantization, cpu_threads=threads)
    structured = StructuredOutput.json_schema(SCHEMA)
    start = time.perf_counter()
    llm.engine.grammars.check(StructuredOutput.json_object())  # builds the compiler: the tokenizer's vocabulary
    setup_ms = (time.perf_counter() - start) * 1e3
    start = time.perf_counter()
    llm.engine.grammars.check(structured)
    compile_ms = (time.perf_counter() - start) * 1e3
    rows, summary = [], {"threads": threads, "dtype": args.dtype, "quantization": args.quantization,
                         "grammar compiler set-up ms (once per engine)": round(setup_ms, 1),
                         "schema compile ms (once per schema)": round(compile_ms, 1)}
    for streams in STREAMS:
        prompts = synthetic_chats(llm.tokenizer, streams, PROMPT_TOKENS, PROMPT_TOKENS, seed=streams)
        times: dict[str, list[tuple[float, float]]] = {"free": [], "schema": []}
        for _ in range(args.repeats):
            times["free"].append(step_ms(llm, prompts, None, args.steps))
            times["schema"].append(step_ms(llm, prompts, structured, args.steps))
        step = {mode: statistics.median(t for t, _ in runs) for mode, runs in times.items()}
        parts = {mode: statistics.median(p for _, p in runs) for mode, runs in times.items()}
        for mode in times:
            rows.append({"streams": streams, "mode": mode, "step ms": round(step[mode], 2),
                         "tok/s": round(streams * 1e3 / step[mode], 1), "sample + append ms": round(parts[mode], 3),
                         "runs' step ms": [round(t, 2) for t, _ in times[mode]]})
        summary[f"{streams} streams: schema / free tok/s"] = round(step["free"] / step["schema"], 3)
        summary[f"{streams} streams: sample + append ms added per step"] = round(parts["schema"] - parts["free"], 3)
        summary[f"{streams} streams: that, as a share of the free step"] = round(
            (parts["schema"] - parts["free"]) / step["free"], 4)
    report(result_name("structured_decode", args.dtype, args.quantization), rows, summary)


if __name__ == "__main__":
    main()
