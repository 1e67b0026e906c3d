"""Grammar-constrained decoding: what a reply must match (StructuredOutput: any JSON object, a JSON Schema, or tool
calls), that grammar compiled once per engine (Grammars), and each reply's own place in it (Matcher), whose bitmask
says which tokens may come next; the sampler masks the others (sampler.apply_grammars).

llguidance does the work (an Earley parser over a lexer of the grammar's terminals): its JSON strings are JSON's
(xgrammar's, given a maxLength, let raw control characters in and no escapes), its mask takes 10-15 us a token for a
typical schema on this model's vocabulary, ~70 us where strings have a maxLength (benchmarks/grammar_libraries.py),
and it needs no other package (xgrammar pulls in triton). The JSON is written compact, as json.dumps writes it
(", " and ": ", no other whitespace): a small model at temperature 1 spends no tokens on layout, and finishes as
often. A number has at most NUMBER_DIGITS digits before its point and NUMBER_DECIMALS after it, and no exponent, as
llama.cpp's grammars bound theirs: JSON itself bounds neither, and a small model at temperature 0 may write one digit
for ever (the grammar gets the bounds as the schema's numeric keywords, where the schema gives none: llguidance has no
option for them). It is imported with the first constrained request, so an engine that never gets one starts no
slower, and this module stays light (sampling_params imports it)."""

import json
import re
import threading
from collections import OrderedDict
from concurrent.futures import Future
from dataclasses import dataclass
from typing import TYPE_CHECKING, Any

if TYPE_CHECKING:
    import numpy as np

# llguidance's JSON options (its "x-guidance"): json.dumps' layout. "lenient": the keywords it does not enforce
# (uniqueItems, contains, not, if/then, formats it does not know such as pydantic's "binary") are ignored, not
# refused: a reply then matches the rest of the schema. A schema that is wrong is still refused.
JSON_OPTIONS = {"whitespace_flexible": False, "item_separator": ", ", "key_separator": ": ", "lenient": True}
NUMBER_DIGITS = 15  # before the point: every integer of 15 digits is exact in a double
NUMBER_DECIMALS = 9  # after it
JSON_TYPES = ("null", "boolean", "number", "integer", "string", "array", "object")
NUMBER_TYPES = {"integer": "localchat_integer", "number": "localchat_number"}  # their bounded $defs entries
ANY_VALUE = "localchat_json_value"  # the $defs entry of any JSON value, its numbers bounded
# keywords that do not constrain a value
ANNOTATIONS = frozenset({"title", "description", "default", "examples", "$comment", "deprecated", "readOnly",
                         "writeOnly"})
_BOUNDED_DEFS = {  # added to every schema's $defs (_prepared)
    NUMBER_TYPES["integer"]: {"type": "integer", "exclusiveMinimum": -(10**NUMBER_DIGITS),
                              "exclusiveMaximum": 10**NUMBER_DIGITS},
    NUMBER_TYPES["number"]: {"type": "number", "exclusiveMinimum": -(10**NUMBER_DIGITS),
                             "exclusiveMaximum": 10**NUMBER_DIGITS, "multipleOf": 10.0**-NUMBER_DECIMALS},
    ANY_VALUE: {"anyOf": [{"type": "null"}, {"type": "boolean"}, {"type": "string"},
                          {"$ref": f"#/$defs/{NUMBER_TYPES['number']}"},  # integers too
                          {"type": "array", "items": {"$ref": f"#/$defs/{ANY_VALUE}"}},
                          {"type": "object", "additionalProperties": {"$ref": f"#/$defs/{ANY_VALUE}"}}]},
}
GRAMMAR_CACHE_SIZE = 64  # compiled grammars kept, each as a matcher at its start: a request copies one (~5 us)
MAX_SCHEMA_DEPTH = 64  # levels of objects and arrays in one schema: real ones have fewer than 20
ERROR_CHARS = 300  # of llguidance's message in a GrammarFailed (it dumps the parser's state after it)


class GrammarFailed(RuntimeError):
    """A reply's grammar failed while it was written (a parser limit: a recursive or huge schema). It ends that
    request alone."""


@dataclass(frozen=True)
class ToolCallFormat:
    """One function's call as the reply writes it: `begin` (the template's prefix and the call object up to its
    arguments), the arguments (a JSON value of `arguments_schema`), then `end`."""

    begin: str
    arguments_schema: str  # JSON text
    end: str


@dataclass(frozen=True)
class StructuredOutput:
    """What a reply must be; build it with json_object(), json_schema() or tool_calls(). Frozen and made of text: the
    same request compiles to the same grammar, found in the compiler's cache."""

    schema: str | None = None  # JSON text of the JSON Schema that the whole reply matches
    strict: bool = True  # no property or item that the schema does not name, where it says nothing of others
    calls: tuple[ToolCallFormat, ...] = ()  # or: the reply is tool calls, each in one of these formats
    separator: str | None = None  # between calls; None: exactly one call

    @classmethod
    def json_object(cls) -> "StructuredOutput":
        """Any JSON object (OpenAI's response_format {"type": "json_object"})."""
        return cls(schema=json.dumps({"type": "object"}), strict=False)

    @classmethod
    def json_schema(cls, schema: dict, strict: bool = True) -> "StructuredOutput":
        """A JSON value that matches `schema`; its properties are written in the schema's order. Whether the schema
        itself can be used is known when the engine compiles it (LLMEngine.check_request)."""
        return cls(schema=_json_text(schema, "the JSON Schema"), strict=strict)

    @classmethod
    def tool_calls(cls, functions: dict[str, dict], prefix: str, suffix: str, *, arguments_key: str = "arguments",
                   separator: str | None = None) -> "StructuredOutput":
        """One call (or, with a separator, one or more) of the functions: `prefix`, then the object
        {"name": <its name>, <arguments_key>: <arguments matching its parameters schema>}, then `suffix`. Qwen's
        template: prefix "<tool_call>\\n", suffix "\\n</tool_call>", separator "\\n"; Llama 3's: arguments_key
        "parameters" and empty prefix and suffix. A function without parameters has {"type": "object",
        "properties": {}}."""
        if not isinstance(functions, dict) or not functions:
            raise ValueError("tool calls need at least one function")
        if not all(isinstance(name, str) and name for name in functions):
            raise ValueError("a function's name must be a non-empty string")
        key = json.dumps(arguments_key)
        calls = tuple(ToolCallFormat(f'{prefix}{{"name": {json.dumps(name)}, {key}: ',
                                     _json_text(parameters, f"the parameters of {name!r}"), f"}}{suffix}")
                      for name, parameters in functions.items())
        return cls(calls=calls, separator=separator)


class Grammars:
    """The engine's grammar compiler, built with the first constrained request (it reads the tokenizer's vocabulary:
    ~0.25 s). Requests are compiled on their caller's thread, never the engine's (AsyncLLM.add_request), and
    several at once: the lock guards only the cache, in which a grammar being compiled is a Future that a second
    request for it waits on."""

    def __init__(self, tokenizer, vocab_size: int, stop_token_ids: set[int]):
        self.tokenizer, self.vocab_size, self.stop_token_ids = tokenizer, vocab_size, sorted(stop_token_ids)
        self._lock = threading.Lock()
        self._tokenizer_lock = threading.Lock()
        self._llg_tokenizer = None
        self._special_tokens: dict[str, int] = {}  # the text of each token that llguidance sees as special
        self._not_stop: "np.ndarray | None" = None  # a bit for every token but the stop tokens
        self._cache: OrderedDict[StructuredOutput, Future] = OrderedDict()  # of (matcher at its start, bitmask)

    def check(self, structured: StructuredOutput) -> None:
        """A clear ValueError if the grammar cannot be compiled (a bad schema)."""
        self._compiled(structured)

    def matcher(self, structured: StructuredOutput) -> "Matcher":
        """A reply's own matcher at the grammar's start (compiled first, if it is not in the cache)."""
        start, bitmask = self._compiled(structured)
        with self._lock:  # copies of one start, which is never advanced
            return Matcher(start.deep_copy(), self._not_stop, bitmask.copy())

    def _compiled(self, structured: StructuredOutput) -> tuple[Any, "np.ndarray"]:
        """The grammar's matcher at its start and its first bitmask, from the cache or compiled now (a failed
        compilation is not kept)."""
        with self._lock:
            compiling = self._cache.get(structured)
            if compiling is None:
                compiling = self._cache[structured] = Future()
                mine = True
                if len(self._cache) > GRAMMAR_CACHE_SIZE:
                    self._cache.popitem(last=False)
            else:
                mine = False
                self._cache.move_to_end(structured)
        if mine:
            try:
                compiling.set_result(self._compile(structured))
            except BaseException as error:
                with self._lock:
                    if self._cache.get(structured) is compiling:
                        del self._cache[structured]
                compiling.set_exception(error)
        return compiling.result()

    def _compile(self, structured: StructuredOutput) -> tuple[Any, "np.ndarray"]:
        """The grammar's matcher at its start (never advanced: requests copy it) and its first bitmask."""
        import llguidance
        import numpy as np

        tokenizer = self._tokenizer()
        try:
            if structured.schema is not None:
                grammar = llguidance.LLMatcher.grammar_from_json_schema(
                    _prepared(structured.schema, structured.strict), overrides=JSON_OPTIONS)
            else:
                for call in structured.calls:  # each schema alone first: an error that names no grammar line
                    parameters = llguidance.LLMatcher.grammar_from_json_schema(
                        _prepared(call.arguments_schema, structured.strict), overrides=JSON_OPTIONS)
                    _raise_if_invalid(llguidance.LLMatcher.validate_grammar(parameters, tokenizer))
                grammar = llguidance.LLMatcher.grammar_from_lark(self._tool_calls_lark(structured))
        except ValueError as error:  # not a JSON object, or llguidance's message
            _raise_if_invalid(str(error).removeprefix("the schema cannot be used: "))
        start = llguidance.LLMatcher(tokenizer, grammar, log_level=0)  # it compiles: errors go in get_error()
        _raise_if_invalid(start.get_error())
        bitmask = np.empty_like(self._not_stop)
        start.unsafe_compute_mask_ptr(bitmask.ctypes.data, bitmask.nbytes)
        _raise_if_invalid(start.get_error())
        return start, bitmask

    def _tokenizer(self):
        """llguidance's view of the vocabulary (built once): each token's bytes, and a trie."""
        with self._tokenizer_lock:
            if self._llg_tokenizer is None:
                self._llg_tokenizer = self._build_tokenizer()
            return self._llg_tokenizer

    def _build_tokenizer(self):
        import llguidance.hf
        import numpy as np

        num_tokens = max(self.vocab_size, len(self.tokenizer))  # the model's rows may outnumber the tokenizer's
        tokenizer = llguidance.hf.from_tokenizer(self.tokenizer, n_vocab=num_tokens,
                                                 eos_token=self.stop_token_ids or None)
        self._special_tokens = {added.content: token for token, added in self.tokenizer.added_tokens_decoder.items()
                                if token < num_tokens and tokenizer.is_special_token(token)}
        not_stop = np.ones(-(-num_tokens // 32) * 32, dtype=np.bool_)
        not_stop[self.stop_token_ids] = False
        self._not_stop = np.packbits(not_stop, bitorder="little").view(np.int32)
        return tokenizer

    def _tool_calls_lark(self, structured: StructuredOutput) -> str:
        """A lark grammar (llguidance's dialect, with %json): one call, or calls between separators."""
        rules = []
        for k, call in enumerate(structured.calls):
            parameters = _prepared(call.arguments_schema, structured.strict)
            parameters["x-guidance"] = JSON_OPTIONS  # %json reads its options from the schema
            rules.append(f"call_{k}: {self._lark_text(call.begin)} %json {json.dumps(parameters)} "
                         f"{self._lark_text(call.end)}")
        calls = " | ".join(f"call_{k}" for k in range(len(structured.calls)))
        if structured.separator is None:
            start = "start: call"
        else:
            start = f"start: call ({self._lark_text(structured.separator)} call)*"
        return "\n".join([start, f"call: {calls}", *rules])

    def _lark_text(self, text: str) -> str:
        """`text` as lark, where a special token's text (Qwen's <tool_call>: llguidance sees special any added token
        written <...>) may also be that token, as the model was taught to write it."""
        if not text:
            return ""
        specials = [t for t in sorted(self._special_tokens, key=len, reverse=True) if t and t in text]
        if not specials:
            return _lark_string(text)
        parts = re.split("(" + "|".join(map(re.escape, specials)) + ")", text)
        return " ".join(f"(<[{self._special_tokens[part]}]> | {_lark_string(part)})" if k % 2 else _lark_string(part)
                        for k, part in enumerate(parts) if part)


class Matcher:
    """One reply's place in its grammar, advanced by each sampled token (only those: a preempted reply's recompute
    leaves it alone). The bitmask of the tokens allowed next is computed right after a token is taken: it also tells
    when the grammar is done."""

    def __init__(self, matcher, not_stop: "np.ndarray", next_token_bitmask: "np.ndarray"):
        self._matcher, self._not_stop = matcher, not_stop
        self.next_token_bitmask = next_token_bitmask  # bit t % 32 of word t // 32: token t may come next

    def copy(self) -> "Matcher":
        """A copy for another reply, that goes its own way from here."""
        return Matcher(self._matcher.deep_copy(), self._not_stop, self.next_token_bitmask.copy())

    def advance(self, token: int) -> bool:
        """Take the sampled token; whether the grammar is done: it took a stop token, or allows nothing but one.
        GrammarFailed when the parser gives up (a limit of its work per token, passed)."""
        matcher = self._matcher
        if not matcher.consume_token(token):
            raise GrammarFailed(_parser_error(matcher.get_error()))
        if matcher.is_stopped():
            return True
        matcher.unsafe_compute_mask_ptr(self.next_token_bitmask.ctypes.data, self.next_token_bitmask.nbytes)
        if matcher.is_error():
            raise GrammarFailed(_parser_error(matcher.get_error()))
        return matcher.is_accepting() and not (self.next_token_bitmask & self._not_stop).any()



class ReplyGrammar:
    """A reply's one grammar state: its matcher, which a thinking reply's grammar keeps waiting while the reply thinks
    (the thinking is free) and applies from the answer on (begin_answer)."""

    def __init__(self, matcher: Matcher, waits_for_answer: bool = False):
        self._matcher, self.waits_for_answer = matcher, waits_for_answer

    @property
    def matcher(self) -> Matcher | None:
        """The matcher that constrains the reply's next token; None while the grammar waits for the answer."""
        return None if self.waits_for_answer else self._matcher

    def advance(self, token: int) -> bool:
        """Take the reply's token (Matcher.advance); while the grammar waits, nothing changes (False)."""
        return not self.waits_for_answer and self._matcher.advance(token)

    def begin_answer(self) -> None:
        self.waits_for_answer = False

    def copy(self) -> "ReplyGrammar":
        """A copy for another reply, that goes its own way from here."""
        return ReplyGrammar(self._matcher.copy(), self.waits_for_answer)

def _parser_error(error: str) -> str:
    """llguidance's message in one short line (it goes on with the parser's state, the grammar's text in it)."""
    first = (error.strip().splitlines() or ["no reason given"])[0]
    if len(first) > ERROR_CHARS:
        first = first[:ERROR_CHARS] + "…"
    return f"the reply's grammar failed: {first} (the schema is too complex or recursive for the parser)"


def _prepared(schema_text: str, strict: bool) -> dict:
    """The schema as the grammar is compiled from it: strict if asked (_make_strict), and with its numbers bounded
    (_bound_numbers). A JSON object: StructuredOutput's schemas are made by _json_text."""
    schema = json.loads(schema_text)
    if strict:
        _make_strict(schema)
    _bound_numbers(schema)
    schema.setdefault("$defs", {}).update(_BOUNDED_DEFS)
    return schema


def _make_strict(schema: Any, in_all_of: bool = False) -> None:
    """Change the schema in place so that an object that says nothing of other properties has none
    (additionalProperties false) and an array of prefixItems that says nothing of more items has none: as OpenAI's
    strict mode. allOf's members keep theirs: each would refuse the others' properties."""
    if not isinstance(schema, dict):
        return
    if not in_all_of:
        _close(schema)
    for child, child_in_all_of in _subschemas(schema):
        _make_strict(child, child_in_all_of)


def _bound_numbers(schema: dict) -> None:
    """Bound, in place, every number the schema lets a reply write (_bounded), at any depth."""
    _bounded(schema)
    for container, key, _ in _slots(schema):
        if container[key] is True:
            container[key] = {"$ref": _ref(ANY_VALUE)}
        elif isinstance(container[key], dict):
            _bound_numbers(container[key])


def _bounded(schema: dict) -> None:
    """Change one schema (not those within it) so that a number it allows has the bounds it does not give itself:
    within 10**NUMBER_DIGITS either side of zero (no exponent: llguidance writes none in a bounded number), and a
    multiple of 10**-NUMBER_DECIMALS unless it names its own multipleOf; and so that an object's other properties or an
    array's items that it leaves open are ANY_VALUE. A plain number, integer or any value becomes a $ref to the
    bounded one (_BOUNDED_DEFS: llguidance compiles a range once for all its uses, where each copy written out took
    ~1 ms and lexer states of its own). A schema of one value (const, enum) or made of others ($ref, anyOf, oneOf,
    allOf) is left to those others."""
    if {"const", "enum", "$ref", "anyOf", "oneOf", "allOf"} & schema.keys():
        return
    constraints = schema.keys() - ANNOTATIONS
    if not constraints:
        schema["$ref"] = _ref(ANY_VALUE)
        return
    if constraints - {"format"} == {"type"} and schema["type"] in NUMBER_TYPES:
        schema.pop("format", None)  # int32, double: for a number a note, and to llguidance an intersection
        schema["$ref"] = _ref(NUMBER_TYPES[schema.pop("type")])
        return
    types = schema.get("type")
    types = [types] if isinstance(types, str) else types if isinstance(types, list) else list(JSON_TYPES)
    if "number" in types or "integer" in types:
        if not {"minimum", "exclusiveMinimum"} & schema.keys():
            schema["exclusiveMinimum"] = -(10**NUMBER_DIGITS)
        if not {"maximum", "exclusiveMaximum"} & schema.keys():
            schema["exclusiveMaximum"] = 10**NUMBER_DIGITS
        if "number" in types and "multipleOf" not in schema:
            schema["multipleOf"] = 10.0**-NUMBER_DECIMALS
    if "object" in types and not {"additionalProperties", "unevaluatedProperties"} & schema.keys():
        schema["additionalProperties"] = {"$ref": _ref(ANY_VALUE)}
    if "array" in types and not {"items", "unevaluatedItems"} & schema.keys():
        schema["items"] = {"$ref": _ref(ANY_VALUE)}


def _ref(name: str) -> str:
    return f"#/$defs/{name}"


def _close(schema: dict) -> None:
    """No property or item beyond those the schema names, where it says nothing of others."""
    types = schema.get("type")
    is_object = "properties" in schema or types == "object" or (isinstance(types, list) and "object" in types)
    if is_object and not {"additionalProperties", "unevaluatedProperties"} & schema.keys():
        schema["additionalProperties"] = False
    if "prefixItems" in schema and not {"items", "unevaluatedItems"} & schema.keys():
        schema["items"] = False


def _subschemas(schema: dict) -> list[tuple[Any, bool]]:
    """The schemas within a schema, each with whether it is a member of allOf."""
    return [(container[key], in_all_of) for container, key, in_all_of in _slots(schema)]


def _slots(schema: dict) -> list[tuple[dict | list, Any, bool]]:
    """Where the schemas within a schema are: (container, key) with container[key] a subschema, and whether it is a
    member of allOf."""
    found = []
    for key in ("properties", "patternProperties", "$defs", "definitions", "dependentSchemas"):
        if isinstance(schema.get(key), dict):
            found += [(schema[key], name, False) for name in schema[key]]
    found += [(schema, key, False) for key in ("additionalProperties", "items", "additionalItems", "contains", "then",
                                               "else") if isinstance(schema.get(key), dict | bool)]
    for key in ("prefixItems", "anyOf", "oneOf", "allOf", "items"):
        if isinstance(schema.get(key), list):
            found += [(schema[key], k, key == "allOf") for k in range(len(schema[key]))]
    return found


def _raise_if_invalid(error: str) -> None:
    """llguidance's message (its regular expression errors take several lines) as a ValueError; warnings pass."""
    if error and not error.startswith("WARNING"):
        raise ValueError(f"the schema cannot be used: {' '.join(error.split())}")


def _lark_string(text: str) -> str:
    return json.dumps(text, ensure_ascii=False)  # lark's string literals take JSON's escapes


def _json_text(schema: dict, what: str) -> str:
    if not isinstance(schema, dict):
        raise ValueError(f"{what} must be a JSON object, got {type(schema).__name__}")
    if _depth(schema) > MAX_SCHEMA_DEPTH:
        raise ValueError(f"{what} is nested more than {MAX_SCHEMA_DEPTH} levels deep (objects and arrays)")
    try:
        return json.dumps(schema)
    except (TypeError, ValueError) as error:
        raise ValueError(f"{what} is not JSON: {error}") from None


def _depth(value: Any) -> int:
    """How deep objects and arrays nest in a JSON value, measured without recursion (it stops past the limit)."""
    deepest, level = 0, [(value, 1)]
    while level:
        item, depth = level.pop()
        if isinstance(item, dict | list):
            deepest = max(deepest, depth)
            if depth <= MAX_SCHEMA_DEPTH:
                level.extend((child, depth + 1) for child in (item.values() if isinstance(item, dict) else item))
    return deepest
