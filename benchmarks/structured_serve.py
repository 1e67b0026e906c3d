"""What grammar-constrained decoding costs through `localchat serve` with its defaults (the path users take): the
output tokens/s of 1 and of 32 concurrent streamed /v1/chat/completions requests with a JSON Schema
(response_format) against the same requests without one, at temperature 1.

Every request decodes exactly --max-tokens tokens: the free ones ignore EOS, and the schema (an array of at least
200 small objects) cannot be done sooner. The rate is the tokens of all requests over the time from the first token
of any to the end of all, so prefills that come first are left out. The runs alternate, --repeats times each, and
the medians are compared. Every request's prompt is new, so no run reuses another's cache.

    python benchmarks/structured_serve.py [--max-tokens 128] [--repeats 3]
"""

import argparse
import asyncio
import itertools
import statistics
import tempfile
import time
from pathlib import Path

import httpx
from peers import free_port, make_home

from common import STREAM_TIMEOUT_S, Server, report

STREAMS = (1, 32)
SCHEMA = {"type": "array", "minItems": 200, "items": {
    "type": "object", "properties": {"name": {"type": "string", "maxLength": 12}, "score": {"type": "integer"}},
    "required": ["name", "score"]}}
RESPONSE_FORMAT = {"type": "json_schema", "json_schema": {"name": "scores", "schema": SCHEMA}}
_prompt_numbers = itertools.count()


async def request(client: httpx.AsyncClient, mode: str, max_tokens: int) -> tuple[float, float, int]:
    """(first token's time, end time, completion tokens) of one streamed request."""
    body = {"messages": [{"role": "user", "content": f"List {next(_prompt_numbers)} players and their scores."}],
            "temperature": 1.0, "max_tokens": max_tokens, "stream": True, "stream_options": {"include_usage": True},
            **({"response_format": RESPONSE_FORMAT} if mode == "schema" else {"ignore_eos": True})}
    first, tokens = None, 0
    async with client.stream("POST", "/v1/chat/completions", json=body) as response:
        response.raise_for_status()
        async for line in response.aiter_lines():
            if first is None and '"content":"' in line and '"content":""' not in line:
                first = time.perf_counter()
            if '"usage":{' in line:
                tokens = int(line.split('"completion_tokens":')[1].split(",")[0])
    return first, time.perf_counter(), tokens


async def run(server: Server, mode: str, streams: int, max_tokens: int) -> dict:
    async with httpx.AsyncClient(base_url=server.url, headers={"Authorization": f"Bearer {server.token}"},
                                 timeout=httpx.Timeout(30.0, read=STREAM_TIMEOUT_S)) as client:
        results = await asyncio.gather(*(request(client, mode, max_tokens) for _ in range(streams)))
    tokens = sum(r[2] for r in results)
    assert tokens == streams * max_tokens, f"{mode}: {tokens} tokens, expected {streams * max_tokens}"
    seconds = max(r[1] for r in results) - min(r[0] for r in results)
    return {"tok/s": tokens / seconds, "tokens": tokens}


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("--max-tokens", type=int, default=128)
    parser.add_argument("--repeats", type=int, default=3)
    args = parser.parse_args()
    # the user's converted model, if there is one (a fresh one converts the GGUF file)
    home = make_home(Path(tempfile.mkdtemp(prefix="localchat-structured-")), "~/.cache/localchat")
    server = Server(home, free_port(), ["--kv-disk-gb", "0"])
    rows, summary = [], {}
    try:
        asyncio.run(run(server, "schema", 1, 8))  # the grammar compiler's set-up, paid by an engine's first one
        for streams in STREAMS:
            rates = {"free": [], "schema": []}
            for _ in range(args.repeats):
                for mode in rates:
                    rates[mode].append(asyncio.run(run(server, mode, streams, args.max_tokens))["tok/s"])
            for mode, values in rates.items():
                rows.append({"streams": streams, "mode": mode, "tok/s": statistics.median(values),
                             "runs": [round(v, 1) for v in values]})
            summary[f"schema/free at {streams}"] = statistics.median(rates["schema"]) / statistics.median(
                rates["free"])
    finally:
        server.process.terminate()
        server.process.wait(60)
    report("structured_serve", rows, summary)


if __name__ == "__main__":
    main()
