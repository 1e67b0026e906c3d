"""Grammar-constrained decoding on the embedded model: replies that match their JSON Schema, any JSON object or tool
calls, sampled at temperature 1; forks, batches shared with free requests, preemption, limits and bad schemas."""

import json
import re
from typing import Annotated, Literal

import jsonschema_rs
import pytest
from pydantic import BaseModel, Field

from localchat.engine import LLM, SamplingParams, StructuredOutput
from localchat.engine.frontend.structured_output import GrammarFailed

pytestmark = pytest.mark.slow  # the embedded model: left out of `./dev test --fast`

Word = Annotated[str, Field(max_length=16)]


class Address(BaseModel):
    city: Word
    country: Literal["FR", "DE", "IT"]


class Person(BaseModel):
    name: Word
    age: int = Field(ge=0, le=120)
    height_m: float = Field(ge=0.5, le=2.5)
    nickname: Word | None = None
    home: Address
    pets: list[Word] = Field(min_length=1, max_length=3)


SCHEMAS = {
    "nested pydantic model ($ref, enum, optional field, bounded array and numbers)": Person.model_json_schema(),
    "enum items, bounded array, number limits": {
        "type": "object",
        "properties": {"colors": {"type": "array", "items": {"enum": ["red", "green", "blue"]}, "minItems": 2,
                                  "maxItems": 3},
                       "score": {"type": "number", "minimum": 0, "maximum": 1},
                       "count": {"type": "integer", "minimum": 10, "maximum": 20}},
        "required": ["colors", "score", "count"]},
    "array of objects": {"type": "array", "maxItems": 2, "items": {
        "type": "object", "properties": {"id": {"type": "integer"}, "ok": {"type": "boolean"}},
        "required": ["id", "ok"]}},
}
WEATHER = {"type": "object", "properties": {"city": {"type": "string", "maxLength": 20},
                                            "unit": {"enum": ["celsius", "fahrenheit"]}}, "required": ["city", "unit"]}
# "code" bounded: at T=1 the 135M model can write an unbounded integer's digits until max_tokens
STATUS = {"type": "object", "properties": {"ok": {"type": "boolean"},
                                     "code": {"type": "integer", "minimum": 0, "maximum": 999},
                                     "detail": {"type": "string", "maxLength": 20}},
          "required": ["ok", "code", "detail"]}
ADD = {"type": "object", "properties": {"a": {"type": "integer"}, "b": {"type": "integer"}}, "required": ["a", "b"]}
SAMPLED = dict(temperature=1.0, max_tokens=160)
NUM_TIGHT_BLOCKS = 14  # 224 token slots for six replies of 38 prompt and ~20 reply tokens: some are preempted


@pytest.fixture(scope="module")
def llm():
    return LLM(dtype="float32")


def chat(llm, question: str) -> list[int]:
    return llm.engine.apply_chat_template([{"role": "user", "content": question}])


@pytest.fixture(scope="module")
def prompt(llm):
    return chat(llm, "Describe a person as JSON.")


@pytest.mark.parametrize("schema", SCHEMAS.values(), ids=SCHEMAS.keys())
def test_sampled_replies_match_their_schema(llm, prompt, schema):
    (out,) = llm.generate(prompt, SamplingParams(n=3, seed=1, structured=StructuredOutput.json_schema(schema),
                                                 **SAMPLED))
    for reply in out.outputs:
        assert reply.finish_reason == "stop"
        jsonschema_rs.validate(schema, json.loads(reply.text))


def test_greedy_reply_matches_its_schema(llm, prompt):
    schema = SCHEMAS["enum items, bounded array, number limits"]
    (out,) = llm.generate(prompt, SamplingParams(temperature=0, max_tokens=160,
                                                 structured=StructuredOutput.json_schema(schema)))
    jsonschema_rs.validate(schema, json.loads(out.outputs[0].text))


def test_json_object_replies_parse_as_objects(llm, prompt):
    # any object: keys as long as the model likes (one reply at this seed writes 205 tokens)
    (out,) = llm.generate(prompt, SamplingParams(n=2, seed=2, structured=StructuredOutput.json_object(),
                                                 **{**SAMPLED, "max_tokens": 400}))
    for reply in out.outputs:
        assert reply.finish_reason == "stop"
        assert isinstance(json.loads(reply.text), dict)


def test_each_of_n_replies_keeps_its_own_grammar_state(llm, prompt):
    params = dict(structured=StructuredOutput.json_schema(Address.model_json_schema()), **SAMPLED)
    (forked,) = llm.generate(prompt, SamplingParams(n=4, seed=5, **params))
    assert len({reply.text for reply in forked.outputs}) == 4
    for k, reply in enumerate(forked.outputs):
        Address.model_validate_json(reply.text)
        (alone,) = llm.generate(prompt, SamplingParams(seed=5 + k, **params))
        assert reply.token_ids == alone.outputs[0].token_ids


def test_a_free_request_beside_a_constrained_one_is_unchanged(llm, prompt):
    free = SamplingParams(seed=3, max_tokens=40)
    (alone,) = llm.generate(prompt, free)
    constrained = SamplingParams(n=2, seed=4, structured=StructuredOutput.json_schema(Address.model_json_schema()),
                                 **SAMPLED)
    together = llm.generate([prompt, prompt], [constrained, free])
    assert together[1].outputs[0].token_ids == alone.outputs[0].token_ids
    for reply in together[0].outputs:
        Address.model_validate_json(reply.text)


def test_a_reply_cut_by_max_tokens_ends_with_length(llm, prompt):
    structured = StructuredOutput.json_schema(Person.model_json_schema())  # more than 5 tokens in any case
    (out,) = llm.generate(prompt, SamplingParams(seed=1, max_tokens=5, structured=structured))
    assert out.outputs[0].finish_reason == "length" and len(out.outputs[0].token_ids) == 5


def test_preemption_does_not_advance_the_grammar_again(llm):
    """A preempted reply recomputes its tokens' KV without taking them again: the same replies as with room."""
    prompts = [chat(llm, f"Describe person number {k} as JSON.") for k in range(6)]
    params = SamplingParams(seed=6, structured=StructuredOutput.json_schema(Address.model_json_schema()), **SAMPLED)
    roomy = llm.generate(prompts, params)
    tight = LLM(dtype="float32", num_kv_blocks=NUM_TIGHT_BLOCKS)
    outs = tight.generate(prompts, params)
    assert tight.stats().num_preemptions > 0
    assert [o.outputs[0].token_ids for o in outs] == [o.outputs[0].token_ids for o in roomy]
    assert all(o.outputs[0].finish_reason == "stop" for o in outs)


def test_bounded_strings_are_json_strings(llm):
    """A string with maxLength (pydantic's max_length) is a JSON string: escapes allowed, raw control characters
    not. xgrammar's grammar for one allowed any character but the quote, the backslash, CR and LF: a raw TAB got
    through (json.loads refuses it) and no escape did. Sampled at temperature 1, and the mask inside such a string."""
    structured = StructuredOutput.json_schema(STATUS)
    (out,) = llm.generate(chat(llm, "Reply with a JSON status; put tabs and quotes in its detail."),
                          SamplingParams(n=8, seed=11, structured=structured, **SAMPLED))
    for reply in out.outputs:
        jsonschema_rs.validate(STATUS, json.loads(reply.text))
    matcher = llm.engine.grammars.matcher(structured)
    for token in llm.engine.tokenize('{"ok": true, "code": 200, "detail": "'):
        assert not matcher.advance(token)
    allowed = {token for token in range(llm.engine.runner.model.config.vocab_size)
               if matcher.next_token_bitmask[token // 32] >> (token % 32) & 1}
    vocabulary = llm.engine.tokenizer.convert_ids_to_tokens(sorted(allowed))
    texts = [llm.engine.tokenizer.convert_tokens_to_string([t]) for t in vocabulary]
    assert not [text for text in texts if any(ord(c) < 0x20 for c in text)]
    assert any(text.startswith("\\") for text in texts) and '"' in texts


def test_json_is_written_compact(llm, prompt):
    """As json.dumps writes it: ", " and ": " between items, no other whitespace outside strings, no newline; a
    reply cut at max_tokens (T=1 may write a long string) is checked up to where it was cut."""
    for structured in (StructuredOutput.json_object(), StructuredOutput.json_schema(Person.model_json_schema())):
        (out,) = llm.generate(prompt, SamplingParams(n=4, seed=13, structured=structured,
                                                     **{**SAMPLED, "max_tokens": 400}))
        closed = [reply for reply in out.outputs if reply.finish_reason == "stop"]
        assert closed, [reply.text for reply in out.outputs]
        for reply in out.outputs:
            if reply in closed:
                json.loads(reply.text)
            skeleton = re.sub(r'"(?:\\.|[^"\\])*("|$)', '""', reply.text)
            assert "\n" not in reply.text and not re.search(r"\s", re.sub(r"[,:] ", "", skeleton)), reply.text


def writes(llm, structured: StructuredOutput, text: str) -> bool:
    """Whether the grammar lets a reply begin with `text` (token by token, as the model's tokenizer splits it)."""
    matcher = llm.engine.grammars.matcher(structured)
    try:
        for token in llm.engine.tokenize(text):
            matcher.advance(token)
    except GrammarFailed:
        return False
    return True


BOUNDED = {  # text: whether a grammar lets a number (or the layout) be so
    "123456789012345,": True, "-123456789012345.123456789,": True, "0.5,": True, "2,": True,
    "1234567890123456": False,  # 16 digits before the point
    "1.1234567891": False,  # 10 after it
    "1e5": False, "1.5E-3": False,  # no exponent
    "1,  ": False, "1 ,": False,  # no whitespace but the separators'
}


@pytest.mark.parametrize("text, allowed", BOUNDED.items(), ids=BOUNDED.keys())
def test_numbers_and_layout_are_bounded_wherever_a_number_may_be(llm, text, allowed):
    """A number's digits (NUMBER_DIGITS before the point, NUMBER_DECIMALS after, no exponent) and the whitespace
    between tokens are bounded: in a schema's number, in any JSON object's values at any depth, in an untyped value
    and in a tool call's arguments. A schema's own bounds stand (a multipleOf of its own, a range of its own)."""
    number = {"type": "object", "properties": {"n": {"type": "number"}, "m": {"type": "number"}},
              "required": ["n", "m"]}
    places = [
        (StructuredOutput.json_schema(number), '{"n": ' + text),
        (StructuredOutput.json_object(), '{"a": [{"b": ' + text),
        (StructuredOutput.json_schema({"type": "object", "properties": {"n": {}}}), '{"n": [' + text),
        (StructuredOutput.json_schema({"type": "object", "properties": {"n": True, "m": True}}), '{"n": ' + text),
        (StructuredOutput.tool_calls({"f": number}, "", ""), '{"name": "f", "arguments": {"n": ' + text),
    ]
    for structured, written in places:
        assert writes(llm, structured, written) == allowed, written
    own = {"type": "object", "properties": {"n": {"type": "number", "multipleOf": 0.25, "maximum": 1e17}}}
    assert writes(llm, StructuredOutput.json_schema(own), '{"n": 12345678901234567.25}')
    assert not writes(llm, StructuredOutput.json_schema(own), '{"n": 0.3')


def test_tool_calls_are_prefix_call_suffix(llm):
    tools = {"get_weather": WEATHER, "add": ADD}
    structured = StructuredOutput.tool_calls(tools, "<tool_call>\n", "\n</tool_call>")
    (out,) = llm.generate(chat(llm, "What is the weather in Paris?"),
                          SamplingParams(n=3, seed=7, structured=structured, **SAMPLED))
    for reply in out.outputs:
        assert reply.finish_reason == "stop"
        assert reply.text.startswith("<tool_call>\n") and reply.text.endswith("\n</tool_call>")
        call = json.loads(reply.text.removeprefix("<tool_call>\n").removesuffix("\n</tool_call>"))
        assert list(call) == ["name", "arguments"]
        jsonschema_rs.validate(tools[call["name"]], call["arguments"])


def test_several_tool_calls_with_a_separator(llm):
    structured = StructuredOutput.tool_calls({"add": ADD}, "<tool_call>\n", "\n</tool_call>", separator="\n")
    (out,) = llm.generate(chat(llm, "Add 2 and 3, then 4 and 5."),  # a seed whose reply makes both calls
                          SamplingParams(seed=1, structured=structured, **SAMPLED))
    reply = out.outputs[0]
    assert reply.finish_reason == "stop"
    *calls, end = reply.text.split("\n</tool_call>")
    assert len(calls) == 2 and end == ""
    for k, call in enumerate(calls):
        arguments = json.loads(call.removeprefix("\n" if k else "").removeprefix("<tool_call>\n"))["arguments"]
        jsonschema_rs.validate(ADD, arguments)


def test_a_llama_style_call_names_its_arguments_parameters(llm):
    structured = StructuredOutput.tool_calls({"get_weather": WEATHER}, "", "", arguments_key="parameters")
    (out,) = llm.generate(chat(llm, "What is the weather in Rome?"),
                          SamplingParams(seed=9, structured=structured, **SAMPLED))
    call = json.loads(out.outputs[0].text)
    assert call["name"] == "get_weather"
    jsonschema_rs.validate(WEATHER, call["parameters"])


@pytest.mark.parametrize("schema, message", [
    ({"type": "frobnicate"}, "cannot be used: Invalid type: frobnicate"),
    ({"$ref": "#/$defs/Missing"}, "Missing"),
    ({"type": "integer", "minimum": 5, "maximum": 1}, r"minimum \(5\) is greater than maximum \(1\)"),
    ({"type": "string", "pattern": "(("}, "unclosed group"),
])
def test_a_bad_schema_is_refused_before_anything_runs(llm, prompt, schema, message):
    for structured in (StructuredOutput.json_schema(schema), StructuredOutput.tool_calls({"f": schema}, "", "")):
        with pytest.raises(ValueError, match=message):
            llm.generate(prompt, SamplingParams(structured=structured))
        with pytest.raises(ValueError, match=message):
            llm.engine.add_request(prompt, SamplingParams(structured=structured))
    assert not llm.engine.has_unfinished_requests()


@pytest.mark.parametrize("build, message", [
    (lambda: StructuredOutput.json_schema([{"type": "object"}]), "must be a JSON object"),
    (lambda: StructuredOutput.json_schema({"enum": [{1, 2}]}), "not JSON"),
    (lambda: StructuredOutput.tool_calls({}, "", ""), "at least one function"),
    (lambda: StructuredOutput.tool_calls({"": ADD}, "", ""), "non-empty string"),
    (lambda: SamplingParams(structured={"type": "object"}), "must be a StructuredOutput"),
])
def test_malformed_structured_outputs_are_clear_errors(build, message):
    with pytest.raises(ValueError, match=message):
        build()


def test_finished_and_aborted_replies_drop_their_grammar_state(llm, prompt):
    engine = llm.engine
    structured = StructuredOutput.json_schema(Person.model_json_schema())
    request_id = engine.add_request(prompt, SamplingParams(n=2, seed=1, structured=structured, **SAMPLED))
    engine.step()  # the prompt, and each reply's first token: no Person is complete yet
    seqs = list(engine.requests[request_id].seqs)
    assert all(seq.matcher is not None for seq in seqs)
    engine.abort(request_id)
    assert all(seq.matcher is None for seq in seqs)
    assert not engine.has_unfinished_requests()


# schemas llguidance compiles but gives up on while a reply is written (a limit of its parser's work per token)
HOSTILE_SCHEMAS = {
    "required recursive $ref": {"type": "object", "properties": {"x": {"$ref": "#"}}, "required": ["x"]},
    "a million-fold repetition": {"type": "string", "pattern": "^a{1000000}$"},
    "anyOf of 3,000 objects": {"anyOf": [{"type": "object", "properties": {f"k{i}": {"type": "integer"}},
                                          "required": [f"k{i}"]} for i in range(3000)]},
}


@pytest.mark.parametrize("schema", HOSTILE_SCHEMAS.values(), ids=HOSTILE_SCHEMAS.keys())
def test_a_grammar_that_gives_up_fails_its_request_alone(llm, prompt, schema):
    """The other requests of the same steps, free and constrained, are the replies they are without it."""
    hostile = SamplingParams(n=2, seed=1, structured=StructuredOutput.json_schema(schema), **SAMPLED)
    others = [SamplingParams(temperature=0, max_tokens=24),
              SamplingParams(seed=2, structured=StructuredOutput.json_schema(STATUS), **SAMPLED)]
    failed, *outs = llm.generate([prompt] * 3, [hostile, *others])
    assert "the reply's grammar failed" in failed.error and len(failed.error) < 500
    assert [o.finish_reason for o in failed.outputs] == ["abort", "abort"]
    alone = llm.generate([prompt] * 2, others)
    assert [o.outputs[0].token_ids for o in outs] == [o.outputs[0].token_ids for o in alone]
    assert all(o.error is None for o in outs) and llm.stats().kv.used == 0


def test_a_schema_nested_too_deep_is_refused_before_any_recursion():
    deep = {"type": "string"}
    for _ in range(250):
        deep = {"type": "object", "properties": {"a": deep}}
    for build in (lambda: StructuredOutput.json_schema(deep), lambda: StructuredOutput.tool_calls({"f": deep}, "", "")):
        with pytest.raises(ValueError, match="nested more than 64 levels"):
            build()
    shallow = {"type": "string"}
    for _ in range(15):
        shallow = {"type": "object", "properties": {"a": shallow}}
    StructuredOutput.json_schema(shallow)  # 31 levels: real schemas nest less

