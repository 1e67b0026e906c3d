"""A thinking model's reasoning apart from its answer: the parser on every split of its markers, the detokenizer with
markers as special tokens, and the engine's budget, end of thinking, grammar after thinking and forks, on the two
tiny thinking models (tests/support.py thinking_model_dir: tiny-qwen3-thinking, markers as special tokens, the block
opened by the reply; tiny-r1-thinking, markers as text, the block opened by the generation prompt)."""

import json

import pytest

from localchat.engine import LLM, SamplingParams
from localchat.engine.frontend.detokenizer import IncrementalDetokenizer
from localchat.engine.frontend.reasoning import Phase, ReasoningMarkers, ReasoningParser, find_markers
from localchat.engine.frontend.structured_output import StructuredOutput
from localchat.engine.loading.loader import resolve_model
from support import QWEN3_THINKING, R1_THINKING, SESSION_HOME, thinking_model_dir

MARKERS = ReasoningMarkers("<think>", "</think>", (), (), {})
CHAT = [{"role": "user", "content": "Hello"}]
SCHEMA = {"type": "object", "properties": {"a": {"type": "integer"}}, "required": ["a"]}


def split(text: str, cuts: list[int]) -> list[str]:
    bounds = [0, *sorted(cuts), len(text)]
    return [text[a:b] for a, b in zip(bounds, bounds[1:])]


def parse(pieces: list[str], phase: Phase) -> tuple[str, str]:
    parser, reasoning, answer = ReasoningParser(MARKERS, phase), "", ""
    for piece in pieces:
        thought, said = parser.feed(piece)
        reasoning, answer = reasoning + thought, answer + said
    thought, said = parser.flush()
    return reasoning + thought, answer + said


@pytest.mark.parametrize("text, phase, expected", [
    ("<think>\nLet me see: a < b.\n</think>\n\nIt is 4.", Phase.BEFORE, ("Let me see: a < b.", "It is 4.")),
    ("  <think>x</think>y", Phase.BEFORE, ("x", "y")),
    ("Hmm, so </th is not it.\n</think>\n\nDone", Phase.THINKING, ("Hmm, so </th is not it.", "Done")),
    ("An answer with <think> inside", Phase.BEFORE, ("", "An answer with <think> inside")),
    ("Cut off while thinking </thi", Phase.THINKING, ("Cut off while thinking </thi", "")),
    ("<thi", Phase.BEFORE, ("", "<thi")),
    ("Answer only", Phase.ANSWER, ("", "Answer only")),
])
def test_the_parser_gives_the_same_parts_for_every_split_of_the_text(text, phase, expected):
    assert parse([text], phase) == expected
    for i in range(len(text) + 1):
        for j in range(i, len(text) + 1):
            assert parse(split(text, [i, j]), phase) == expected, (i, j)
    assert parse(list(text), phase) == expected  # one character at a time


def test_a_prompt_says_where_the_reply_starts():
    assert MARKERS.phase_after("<|im_start|>assistant\n<think>\n") is Phase.THINKING
    assert MARKERS.phase_after("assistant\n<think>\n\n</think>\n\n") is Phase.ANSWER  # enable_thinking false
    assert MARKERS.phase_after("<|im_start|>assistant\n") is Phase.BEFORE
    # a block closed in an earlier turn (a tool-call loop keeps its thinking) is no matter
    assert MARKERS.phase_after("</think>\n\n<tool_call>{}</tool_call><|im_end|>\n<|im_start|>assistant\n") \
        is Phase.BEFORE


@pytest.fixture(scope="module")
def models():
    return thinking_model_dir(SESSION_HOME / "cache" / "test-references" / "thinking")


@pytest.fixture(scope="module")
def r1(models):
    return LLM(str(models / R1_THINKING), num_kv_blocks=128)


@pytest.fixture(scope="module")
def plain_r1(models):
    """tiny-r1-thinking without speculation."""
    return LLM(str(models / R1_THINKING), num_kv_blocks=128, speculative=False)


@pytest.fixture(scope="module")
def qwen3(models):
    return LLM(str(models / QWEN3_THINKING), num_kv_blocks=128)


def test_markers_are_found_from_the_template(r1, qwen3):
    special = find_markers(qwen3.tokenizer)
    assert set(special.literal.values()) == {"<think>", "</think>"}  # one special token each
    assert special.closing_ids == tuple(qwen3.tokenizer.encode("\n</think>\n\n", add_special_tokens=False))
    text = find_markers(r1.tokenizer)
    assert text.literal == {} and len(text.closing_ids) > 3  # plain text, several tokens
    assert find_markers(resolve_model(None).tokenizer) is None  # the embedded model does not think


def test_the_detokenizer_keeps_special_markers_out_of_both_parts(qwen3):
    tokenizer = qwen3.tokenizer
    think, end = (tokenizer.convert_tokens_to_ids(t) for t in ("<think>", "</think>"))
    words = tokenizer.encode(" so it is", add_special_tokens=False)
    answer = tokenizer.encode("Four.", add_special_tokens=False)
    output = [think, *tokenizer.encode("\n", add_special_tokens=False), *words, end,
              *tokenizer.encode("\n\n", add_special_tokens=False), *answer]
    detokenizer = IncrementalDetokenizer(tokenizer, [], [], skip_special_tokens=True,
                                         reasoning=ReasoningParser(find_markers(tokenizer), Phase.BEFORE))
    for token in output:
        detokenizer.add(token)
    assert detokenizer.visible_text(True) == "Four."
    assert detokenizer.reasoning_text == "so it is"


def test_stop_strings_end_the_answer_not_the_thinking(r1):
    params = SamplingParams(temperature=0.8, seed=5, max_tokens=40, thinking_token_budget=8)
    free = r1.chat(CHAT, params)[0].outputs[0]
    word = free.reasoning.split()[1]  # a string the thinking has: it does not stop the reply
    stopped = r1.chat(CHAT, SamplingParams(temperature=0.8, seed=5, max_tokens=40, thinking_token_budget=8,
                                           stop=[word]))[0].outputs[0]
    assert stopped.reasoning == free.reasoning
    assert word not in free.text or stopped.text == free.text[:free.text.index(word)]


@pytest.mark.parametrize("budget", [0, 1, 7])
def test_the_budget_closes_the_thinking_and_the_answer_follows(r1, budget):
    out = r1.chat(CHAT, SamplingParams(temperature=0.8, seed=2, max_tokens=30, thinking_token_budget=budget))[0]
    reply = out.outputs[0]
    closing = find_markers(r1.tokenizer).closing_ids
    assert reply.num_reasoning_tokens == budget
    assert reply.token_ids[budget:budget + len(closing)] == list(closing)  # the engine wrote the closing marker
    assert reply.text and reply.finish_reason == "length"
    assert reply.reasoning == r1.tokenizer.decode(reply.token_ids[:budget]).strip()


def test_without_a_budget_the_reply_thinks_until_max_tokens(r1):
    reply = r1.chat(CHAT, SamplingParams(temperature=0.8, seed=2, max_tokens=20))[0].outputs[0]
    assert reply.num_reasoning_tokens == 20 and reply.reasoning and reply.text == ""


def test_enable_thinking_false_renders_an_empty_block_and_the_reply_answers(qwen3):
    prompt = qwen3.engine.apply_chat_template(CHAT, variables={"enable_thinking": False})
    assert qwen3.tokenizer.decode(prompt).endswith("<think>\n\n</think>\n\n")
    reply = qwen3.generate(prompt, SamplingParams(temperature=0.8, seed=1, max_tokens=12))[0].outputs[0]
    assert reply.reasoning == "" and reply.num_reasoning_tokens == 0
    assert reply.text == qwen3.tokenizer.decode(reply.token_ids, skip_special_tokens=True).lstrip()


@pytest.mark.parametrize("model", ["r1", "qwen3"])
def test_a_json_schema_constrains_the_answer_after_free_thinking(model, request):
    llm = request.getfixturevalue(model)
    params = SamplingParams(temperature=0.8, seed=3, max_tokens=80, thinking_token_budget=10,
                            structured=StructuredOutput.json_schema(SCHEMA))
    reply = llm.chat(CHAT, params)[0].outputs[0]
    assert reply.finish_reason == "stop" and reply.num_reasoning_tokens == 10 and reply.reasoning
    assert isinstance(json.loads(reply.text)["a"], int)
    markers = find_markers(llm.tokenizer)
    if model == "qwen3":  # the reply would open its block itself: the engine opens it, so the thinking comes first
        assert reply.token_ids[:len(markers.opening_ids)] == list(markers.opening_ids)


def test_end_thinking_closes_a_running_replys_thinking_now(r1):
    engine = r1.engine
    request_id = engine.add_request(engine.apply_chat_template(CHAT),
                                    SamplingParams(temperature=0.8, seed=4, max_tokens=60))
    deltas = []
    while sum(len(o.token_ids) for d in deltas for o in d.outputs) < 6:
        deltas += engine.step()
    assert engine.end_thinking(request_id)
    while not (deltas and deltas[-1].finished):
        deltas += engine.step()
    reply = deltas[0]
    for delta in deltas[1:]:
        reply.merge(delta)
    reply = reply.outputs[0]
    thought = reply.num_reasoning_tokens
    assert 6 <= thought <= 7  # the token sampled in the step after the request, then the closing marker
    closing = list(find_markers(r1.tokenizer).closing_ids)
    assert reply.token_ids[thought:thought + len(closing)] == closing
    assert reply.text and len(reply.token_ids) == 60
    assert not engine.end_thinking("no-such-request")


def test_forked_replies_think_independently_each_as_its_own_request(r1):
    params = SamplingParams(n=3, temperature=0.8, seed=11, max_tokens=24, thinking_token_budget=6)
    forked = r1.chat(CHAT, params)[0].outputs
    assert len({reply.reasoning for reply in forked}) == 3
    for k, reply in enumerate(forked):
        alone = r1.chat(CHAT, SamplingParams(temperature=0.8, seed=11 + k, max_tokens=24,
                                             thinking_token_budget=6))[0].outputs[0]
        assert (reply.reasoning, reply.text, reply.token_ids) == (alone.reasoning, alone.text, alone.token_ids)
        assert reply.num_reasoning_tokens == 6


@pytest.mark.parametrize("budget", [1, 3, 6, 9])
def test_speculation_changes_no_thinking_token_and_keeps_the_budget(r1, plain_r1, budget):
    """Greedy, the tiny model repeats one token: drafts are kept several at a time, and the budget still ends the
    thinking at its token, not at the end of a kept draft."""
    for temperature in (0.0, 0.8):
        params = SamplingParams(temperature=temperature, seed=9, max_tokens=30, thinking_token_budget=budget)
        drafted, alone = r1.chat(CHAT, params)[0].outputs[0], plain_r1.chat(CHAT, params)[0].outputs[0]
        assert drafted.token_ids == alone.token_ids
        assert drafted.num_reasoning_tokens == alone.num_reasoning_tokens == budget
        if temperature == 0.0:
            assert drafted.num_accepted_tokens > 0  # drafts were kept: the case this checks

