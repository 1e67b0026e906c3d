"""Tests for drafts from the conversation itself (speculator.py): the n-gram index, the draft lengths, and replies
that are token for token the same with speculation on and off, greedy or seeded, forked, constrained, stopped and
preempted."""

import pytest

from localchat.engine.core.sequence import Sequence
from localchat.engine.core.speculator import LONGEST_DRAFT, NgramIndex, Speculator
from localchat.engine.frontend.llm import LLM
from localchat.engine.frontend.structured_output import StructuredOutput
from localchat.engine.sampling_params import SamplingParams

CODE = """def total_price(items, tax_rate):
    subtotal = 0
    for item in items:
        subtotal += item.price * item.quantity
    tax = subtotal * tax_rate
    return subtotal + tax
"""
PARAGRAPH = ("The lighthouse keeper climbed the stairs every evening at dusk. He wound the clockwork, trimmed the "
             "wick and polished the great lens until it shone, then sat by the window and watched the ships.")
TOPICS = ["a cat", "the sea", "a robot", "winter", "a library", "bread", "a train", "the moon", "a garden", "rain"]
# copying prompts (where drafts are kept) and free ones (where they miss), 22 in all
CHATS = ([f"Rename the function to compute_total and return the whole function.\n\n{CODE}",
          f"Repeat this paragraph word for word:\n\n{PARAGRAPH}",
          f"Rewrite this paragraph in the past tense, changing nothing else:\n\n{PARAGRAPH}",
          "Count from 1 to 30, separated by commas."]
         + [f"Repeat after me: I like {t}, I like {t}, I like {t}." for t in TOPICS[:8]]
         + [f"Write two sentences about {t}." for t in TOPICS])


def test_an_index_finds_what_followed_the_last_occurrence_and_never_a_lists_own_end() -> None:
    index = NgramIndex([5, 1, 2, 7, 8, 1, 2, 9])
    assert index.continuation((1, 2), 3) == [9]  # the last occurrence of (1, 2) that has a token after it
    assert index.continuation((5, 1, 2), 2) == [7, 8]
    assert index.continuation((2, 9), 4) == []  # the list's ending: nothing followed it yet
    tokens = [5, 1, 2, 7, 8, 1, 2, 9, 4]  # the list grew: the index catches up with its new tokens
    index.update(tokens)
    tokens.append(6)  # and keeps its own copy: a token not yet indexed is not seen
    assert index.continuation((2, 9), 4) == [4]
    assert index.continuation((3, 3), 1) == []
    refrain = NgramIndex([7, 1, 2, 3, 1, 2, 3])
    assert refrain.continuation((2, 3), 5) == [1, 2, 3]  # the rest of the list
    assert refrain.continuation((2, 3), 5, periodic=True) == [1, 2, 3, 1, 2]  # the list's own ending repeats


def test_a_draft_grows_while_kept_whole_shrinks_when_cut_and_a_missing_reply_waits() -> None:
    speculator = Speculator()
    seq = Sequence("r", 0, [1, 2, 3, 4] * 8, 4, SamplingParams())
    assert speculator.propose(seq, room=16, max_model_len=1000) == [1, 2]  # the first draft is short
    speculator.settle(seq, 2, 2)
    assert len(speculator.propose(seq, 16, 1000)) == 4
    speculator.settle(seq, 4, 4)
    assert len(speculator.propose(seq, 16, 1000)) == 8
    speculator.settle(seq, 8, 8)
    assert len(speculator.propose(seq, 16, 1000)) == LONGEST_DRAFT
    assert len(speculator.propose(seq, 3, 1000)) == 3  # the step's room
    assert len(speculator.propose(seq, 16, len(seq) + 2)) == 1  # the model's length
    speculator.settle(seq, 8, 2)
    assert len(speculator.propose(seq, 16, 1000)) == 3
    waits = []
    for _ in range(4):  # drafts that miss: the reply waits 1, 2, 4, then 8 steps
        speculator.settle(seq, 1, 0)
        waits.append(next(i for i in range(100) if speculator.propose(seq, 16, 1000)))
    assert waits == [1, 2, 4, 8]
    assert (speculator.stats.drafted, speculator.stats.accepted) == (26, 16)


@pytest.fixture(scope="module")
def engines():
    return {on: LLM(speculative=on) for on in (False, True)}


def replies(llm: LLM, chats: list[str], params: SamplingParams | list[SamplingParams]) -> list[list[list[int]]]:
    outs = llm.chat([[{"role": "user", "content": c}] for c in chats], params)
    return [[o.token_ids for o in out.outputs] for out in outs]


def drafted(llm: LLM) -> tuple[int, int]:
    stats = llm.stats().speculation
    return stats.drafted, stats.accepted


@pytest.mark.slow  # the embedded model, twice
# 32 tokens a reply: already well over 50 drafted tokens kept, and dozens cut, in each run
@pytest.mark.parametrize("params", [SamplingParams(temperature=0.0, max_tokens=32),
                                    SamplingParams(temperature=0.8, seed=11, max_tokens=32)], ids=["greedy", "seeded"])
def test_speculation_changes_no_token(engines, params) -> None:
    """22 prompts, four at a time: drafts beside other replies' decodes and prefills."""
    before = drafted(engines[True])
    groups = [CHATS[i : i + 4] for i in range(0, len(CHATS), 4)]
    assert [replies(engines[True], g, params) for g in groups] == [replies(engines[False], g, params) for g in groups]
    after = drafted(engines[True])
    assert after[1] - before[1] > 50, "the replies kept too few drafts to show anything"
    assert after[0] - after[1] > before[0] - before[1], "no draft was cut: the rejecting path went unchecked"
    assert drafted(engines[False]) == (0, 0)


@pytest.mark.slow
def test_each_replys_draft_counts_add_up_to_the_engines(engines) -> None:
    """A reply's drafted and kept tokens are counted with its output (the request table records each step's
    outcomes), forks included: they sum to the engine's own counts."""
    llm = engines[True]
    before = drafted(llm)
    outs = llm.chat([[{"role": "user", "content": c}] for c in CHATS[:4]],
                    SamplingParams(n=2, temperature=0.8, seed=1, max_tokens=32))
    after = drafted(llm)
    per_reply = [(o.num_draft_tokens, o.num_accepted_tokens) for out in outs for o in out.outputs]
    assert len(per_reply) == 8
    assert sum(d for d, _ in per_reply) == after[0] - before[0] > 0
    assert sum(k for _, k in per_reply) == after[1] - before[1]


@pytest.mark.slow
def test_speculation_changes_no_token_of_forks_stops_limits_and_penalties(engines) -> None:
    params = [SamplingParams(n=4, temperature=0.8, seed=5, max_tokens=60),
              SamplingParams(temperature=0.8, seed=2, max_tokens=60, stop=["fox", "I like"]),
              SamplingParams(temperature=0.0, max_tokens=7),
              SamplingParams(temperature=0.7, seed=9, max_tokens=60, repetition_penalty=1.3, frequency_penalty=0.4,
                             logprobs=2)]
    chats = CHATS[1:5]
    # one run on each engine: its token ids, and the logprobs of the last reply (asked for by its params)
    runs = {spec: engines[spec].chat([[{"role": "user", "content": c}] for c in chats], params)
            for spec in (True, False)}
    on, off = ([[o.token_ids for o in out.outputs] for out in runs[spec]] for spec in (True, False))
    assert on == off
    assert [len(r) for r in on] == [4, 1, 1, 1] and len(on[2][0]) == 7
    with_logprobs = [runs[spec][3].outputs[0].logprobs for spec in (True, False)]
    assert len(with_logprobs[0]) == len(on[3][0])
    assert [(p.token_id, p.logprob) for p in with_logprobs[0]] == [(p.token_id, p.logprob) for p in with_logprobs[1]]


@pytest.mark.slow
def test_a_constrained_reply_checks_its_drafts_through_its_grammar(engines) -> None:
    schema = {"type": "object", "properties": {"items": {"type": "array", "items": {"type": "string"}}},
              "required": ["items"]}
    chat = ('Return {"items": ["apple", "pear", "plum", "apple", "pear", "plum", "apple", "pear", "plum"]} as JSON, '
            "exactly.")
    for temperature, seed in ((0.0, None), (0.8, 4)):
        params = SamplingParams(temperature=temperature, seed=seed, max_tokens=80,
                                structured=StructuredOutput.json_schema(schema))
        before = drafted(engines[True])
        on, off = replies(engines[True], [chat], params), replies(engines[False], [chat], params)
        assert on == off
        assert drafted(engines[True])[1] > before[1]
        assert engines[True].engine.tokenizer.decode(on[0][0]).replace(" ", "").startswith('{"items":["')


@pytest.mark.slow
def test_a_preempted_speculating_reply_is_the_same_as_one_alone(engines) -> None:
    """A KV cache too small for every reply at once (16 blocks, 256 tokens: less than the six prompts alone):
    replies are preempted and recomputed, drafts and all. Each reply alone comes from the engine without drafts."""
    params = SamplingParams(temperature=0.8, seed=3, max_tokens=48)
    small = LLM(speculative=True, num_kv_blocks=16)
    chats = CHATS[:6]
    alone = [replies(engines[False], [c], params)[0] for c in chats]
    assert replies(small, chats, params) == alone
    assert small.stats().num_preemptions > 0
    assert drafted(small)[1] > 0
