"""Which grammar library the engine constrains decoding with: llguidance, xgrammar and outlines-core, each on the
embedded model's tokenizer (49,152 tokens), timed for what the engine pays. Once per engine: building the library's
tokenizer. Once per schema: compiling it. Per token of every constrained reply: computing the next token mask into a
bitmask row, and advancing the matcher with the token.

Each matcher is driven through the same tokens (a JSON document that fits the schema, as the model would write it),
twice: a first matcher on a freshly compiled grammar (whatever a library builds lazily, it builds here), then a second
one on the same grammar (what every later request with that schema pays).

    pip install xgrammar outlines-core   # the two the engine does not use (llguidance is a dependency)
    python benchmarks/grammar_libraries.py [--schemas "small,nested"] [--repeats 5]

The engine uses llguidance although xgrammar's masks are cheaper: xgrammar 0.2.9 writes a string with maxLength as
`"[^"\\\r\n]{0,n}"`, which lets raw control characters in (invalid JSON: a reply at temperature 1 put a TAB in one)
and no escapes, and it pulls in triton (~1 GB) on Linux. llguidance's 5-70 us a token is still under 6% of a
decode step (benchmarks/structured_decode.py).

The schemas: any object ({"type": "object"}), small (two properties), nested (a pydantic model: $ref, enum, bounded
numbers and arrays, an optional field), array of objects. outlines-core compiles a schema to a regular expression
(any object: nested to a fixed depth), the others to a grammar.
"""

import argparse
import json
import time
from collections.abc import Callable
from dataclasses import dataclass

import torch
from pydantic import BaseModel, Field

from common import report, set_threads
from localchat.engine.loading.loader import resolve_model


class Address(BaseModel):
    street: str
    city: str
    country: str = Field(json_schema_extra={"enum": ["FR", "DE", "IT", "ES"]})


class Person(BaseModel):
    name: str
    age: int = Field(ge=0, le=130)
    height_m: float = Field(ge=0.3, le=2.5)
    email: str | None = None
    address: Address
    tags: list[str] = Field(min_length=1, max_length=4)
    friends: list[Address] = Field(max_length=3)


SCHEMAS = {
    "any object": ({"type": "object"}, {"city": "Paris", "population": 2102650, "rivers": ["Seine", "Bièvre"],
                                        "capital": True}),
    "small": ({"type": "object", "properties": {"answer": {"type": "string"}, "score": {"type": "integer"}},
               "required": ["answer", "score"]},
              {"answer": "Paris is the capital of France.", "score": 10}),
    "nested": (Person.model_json_schema(),
               Person(name="Ada Lovelace", age=36, height_m=1.65, email="ada@example.org",
                      address=Address(street="12 St James's Square", city="London", country="FR"),
                      tags=["math", "poetry"], friends=[Address(street="Via Roma 1", city="Turin", country="IT")],
                      ).model_dump()),
    "array of objects": ({"type": "array", "items": {"type": "object", "properties": {
        "name": {"type": "string", "maxLength": 12}, "score": {"type": "integer"}}, "required": ["name", "score"]}},
                         [{"name": f"player {k}", "score": 37 * k} for k in range(20)]),
}


@dataclass
class Library:
    """One library's three calls: tokenizer(hf) once; compile(tokenizer, schema) -> a grammar; matcher(grammar) ->
    (fill(bitmask row index), consume(token))."""

    tokenizer: Callable
    compile: Callable
    matcher: Callable


def llguidance_library() -> Library:
    import llguidance
    import llguidance.hf
    import llguidance.torch

    def compile(tokenizer, schema):
        grammar = llguidance.LLMatcher.grammar_from_json_schema(schema)
        llguidance.LLMatcher(tokenizer, grammar)  # the lexer and parser tables: built on a matcher's creation
        return tokenizer, grammar

    def matcher(compiled, bitmask):
        m = llguidance.LLMatcher(*compiled)
        return (lambda: llguidance.torch.fill_next_token_bitmask(m, bitmask, 0)), m.consume_token

    return Library(lambda hf: llguidance.hf.from_tokenizer(hf, n_vocab=len(hf)), compile, matcher)


def xgrammar_library() -> Library:
    import xgrammar

    def tokenizer(hf):
        return xgrammar.GrammarCompiler(xgrammar.TokenizerInfo.from_huggingface(hf, vocab_size=len(hf)),
                                        cache_enabled=False)

    def matcher(compiled, bitmask):
        m = xgrammar.GrammarMatcher(compiled)
        return (lambda: m.fill_next_token_bitmask(bitmask, 0)), m.accept_token

    return Library(tokenizer, lambda compiler, schema: compiler.compile_json_schema(json.dumps(schema)), matcher)


def outlines_core_library() -> Library:
    from outlines_core import Guide, Index, Vocabulary
    from outlines_core.json_schema import build_regex_from_schema

    def tokenizer(hf):
        """Tokens as bytes (byte-level BPE: each character stands for a byte), special tokens left out."""
        byte_of = {c: b for b, c in _byte_level_alphabet().items()}
        special = set(hf.all_special_ids) | set(hf.added_tokens_decoder)
        tokens: dict[bytes, list[int]] = {}
        for text, token in hf.get_vocab().items():
            if token not in special:
                tokens.setdefault(bytes(byte_of[c] for c in text), []).append(token)
        return Vocabulary(hf.eos_token_id, tokens)

    def matcher(index, bitmask):
        guide = Guide(index)
        row = bitmask[0]
        return (lambda: guide.write_mask_into(row.data_ptr(), row.numel(), 4)), (
            lambda token: guide.advance(token, return_tokens=False))

    return Library(tokenizer, lambda vocabulary, schema: Index(build_regex_from_schema(json.dumps(schema)),
                                                               vocabulary), matcher)


def _byte_level_alphabet() -> dict[int, str]:
    """GPT-2's byte-level BPE: the character that stands for each byte."""
    printable = [*range(ord("!"), ord("~") + 1), *range(ord("¡"), ord("¬") + 1), *range(ord("®"), ord("ÿ") + 1)]
    extra = iter(range(256, 512))
    return {b: chr(b if b in printable else next(extra)) for b in range(256)}


LIBRARIES = {"llguidance": llguidance_library, "xgrammar": xgrammar_library, "outlines-core": outlines_core_library}


def drive(library: Library, compiled, tokens: list[int], bitmask: torch.Tensor) -> tuple[float, float]:
    """Mask then consume, token by token, through the document: mean microseconds of each per token."""
    fill, consume = library.matcher(compiled, bitmask)
    fill_s = consume_s = 0.0
    for token in tokens:
        start = time.perf_counter()
        fill()
        middle = time.perf_counter()
        if consume(token) is False:
            raise RuntimeError(f"the matcher refused token {token}")
        fill_s += middle - start
        consume_s += time.perf_counter() - middle
    return fill_s / len(tokens) * 1e6, consume_s / len(tokens) * 1e6


def measure(name: str, hf, schemas: list[str], repeats: int) -> list[dict]:
    library = LIBRARIES[name]()
    start = time.perf_counter()
    tokenizer = library.tokenizer(hf)
    tokenizer_ms = (time.perf_counter() - start) * 1e3
    bitmask = torch.full((1, (len(hf) + 31) // 32), -1, dtype=torch.int32)
    rows = []
    for schema_name in schemas:
        schema, document = SCHEMAS[schema_name]
        tokens = hf.encode(json.dumps(document, ensure_ascii=False), add_special_tokens=False)
        compile_ms, first, warm = [], [], []
        for _ in range(repeats):
            start = time.perf_counter()
            compiled = library.compile(tokenizer, schema)
            compile_ms.append((time.perf_counter() - start) * 1e3)
            first.append(drive(library, compiled, tokens, bitmask))
            warm.append(drive(library, compiled, tokens, bitmask))
        rows.append({"library": name, "schema": schema_name, "tokens": len(tokens),
                     "tokenizer ms (once per engine)": round(tokenizer_ms), "compile ms": _median(compile_ms),
                     "mask us/token, first": _median(f for f, _ in first),
                     "consume us/token, first": _median(c for _, c in first),
                     "mask us/token": _median(f for f, _ in warm), "consume us/token": _median(c for _, c in warm)})
    return rows


def _median(values) -> float:
    values = sorted(values)
    return round(values[len(values) // 2], 1)


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("--schemas", default=",".join(SCHEMAS))
    parser.add_argument("--repeats", type=int, default=5)
    args = parser.parse_args()
    threads = set_threads()
    hf = resolve_model(None).tokenizer
    rows = [row for name in LIBRARIES for row in measure(name, hf, args.schemas.split(","), args.repeats)]
    per_token = {f"{r['library']} / {r['schema']}: mask + consume us/token":
                 round(r["mask us/token"] + r["consume us/token"], 1) for r in rows}
    report("grammar_libraries", rows, {"threads": threads, "vocabulary": len(hf), **per_token})


if __name__ == "__main__":
    main()
