"""Tests for IncrementalDetokenizer with the embedded model's byte-level BPE tokenizer.

Replies are tokenized in ways a model may produce them: ordinary tokens, and single-byte tokens that split
multi-byte UTF-8 characters (accents, CJK, emoji), so that incomplete characters arrive mid-stream.
"""

import pytest
from hypothesis import HealthCheck, example, given, settings
from hypothesis import strategies as st

from localchat.engine.frontend.detokenizer import IncrementalDetokenizer
from localchat.engine.loading.loader import resolve_model

CHARS = (list("abcdefghijklmnopqrstuvwxyzAB XYZ0123456789.,!?'\"-_\n\t")
         + list("éüñßçØ€Ω→•…日本語のテアキスト한국😀🎉👍🏽🤖"))
TEXT = st.text(alphabet=st.sampled_from(CHARS), max_size=40)
SETTINGS = settings(max_examples=150, deadline=None, suppress_health_check=[HealthCheck.function_scoped_fixture])


def gpt2_byte_chars() -> dict[int, str]:
    """The character that stands for each byte in a byte-level BPE vocabulary: printable Latin-1 bytes stand
    for themselves, the others for the characters from U+0100 on, in byte order."""
    printable = {*range(ord("!"), ord("~") + 1), *range(ord("¡"), ord("¬") + 1), *range(ord("®"), ord("ÿ") + 1)}
    table, shift = {}, 0
    for b in range(256):
        if b in printable:
            table[b] = chr(b)
        else:
            table[b] = chr(256 + shift)
            shift += 1
    return table


class Tok:
    """The tokenizer, and helpers to turn text into the tokens a model could emit."""

    def __init__(self, tokenizer):
        self.tokenizer = tokenizer
        vocab = tokenizer.get_vocab()
        self.byte_token = {b: vocab[c] for b, c in gpt2_byte_chars().items() if c in vocab}
        self.special = list(tokenizer.all_special_ids)

    def encode(self, text: str) -> list[int]:
        return self.tokenizer.encode(text, add_special_tokens=False)

    def bytewise(self, text: str) -> list[int]:
        """One token per UTF-8 byte (a character whose bytes are not all in the vocabulary: its usual tokens)."""
        ids = []
        for ch in text:
            data = ch.encode()
            ids += [self.byte_token[b] for b in data] if all(b in self.byte_token for b in data) else self.encode(ch)
        return ids

    def mixed(self, text: str, plan: list[tuple[int, bool]]) -> list[int]:
        """Segments of text in turn: (length, bytewise?) from plan, then the rest encoded as usual."""
        ids, at = [], 0
        for length, bytewise in plan:
            segment = text[at : at + length]
            ids += self.bytewise(segment) if bytewise else self.encode(segment)
            at += length
        return ids + self.encode(text[at:])

    def decode(self, ids: list[int], skip_special_tokens: bool = True) -> str:
        return self.tokenizer.decode(ids, skip_special_tokens=skip_special_tokens)


@pytest.fixture(scope="module")
def tok() -> Tok:
    return Tok(resolve_model(None).tokenizer)


PLAN = st.lists(st.tuples(st.integers(1, 6), st.booleans()), max_size=10)
PROMPTS = st.sampled_from(["", "Hi", "<|im_start|>user\nhello<|im_end|>\n<|im_start|>assistant\n", "日本"])


def prompt_ids(tok: Tok, prompt: str) -> list[int]:
    return tok.encode(prompt)


def test_byte_tokens_cover_the_test_characters(tok: Tok) -> None:
    text = "".join(CHARS)
    assert all(b in tok.byte_token for b in text.encode())
    assert tok.decode(tok.bytewise(text)) == text
    assert len(tok.bytewise("日")) == 3 and len(tok.bytewise("😀")) == 4


@SETTINGS
@given(text=TEXT, plan=PLAN, prompt=PROMPTS)
def test_incremental_text_equals_decoding_the_whole_output(tok: Tok, text: str, plan, prompt: str) -> None:
    output = tok.mixed(text, plan)
    expected = tok.decode(output)
    assert expected == text
    detok = IncrementalDetokenizer(tok.tokenizer, prompt_ids(tok, prompt), stop=[])
    for token in output:
        before = detok.text
        detok.add(token)
        assert detok.text.startswith(before), "text already produced changed"
        assert expected.startswith(detok.text)
        assert "\ufffd" not in detok.text, "an incomplete character was shown"
        assert detok.visible_text(False) == detok.text, "held back text without any stop string"
        assert not detok.stopped
    assert detok.text == expected
    assert detok.visible_text(True) == expected


def test_characters_split_into_bytes_appear_once_complete(tok: Tok) -> None:
    detok = IncrementalDetokenizer(tok.tokenizer, [], stop=[])
    seen = []
    for token in tok.bytewise("a😀é日"):
        detok.add(token)
        seen.append(detok.text)
    assert seen == ["a", "a", "a", "a", "a😀", "a😀", "a😀é", "a😀é", "a😀é", "a😀é日"]


def test_first_word_keeps_its_leading_space(tok: Tok) -> None:
    prompt = tok.encode("<|im_start|>assistant\nSure")
    output = tok.encode(" thing, here it is")
    detok = IncrementalDetokenizer(tok.tokenizer, prompt, stop=[])
    for token in output:
        detok.add(token)
    assert detok.text == " thing, here it is"


@st.composite
def stop_case(draw):
    """A text and stop strings: most taken from the text (so they occur, often across several tokens),
    some made up."""
    text = draw(st.text(alphabet=st.sampled_from(CHARS), min_size=1, max_size=30))
    stops = []
    for _ in range(draw(st.integers(1, 3))):
        if draw(st.integers(0, 3)) and text:
            start = draw(st.integers(0, len(text) - 1))
            stops.append(text[start : start + draw(st.integers(1, 6))])
        else:
            stops.append(draw(st.text(alphabet=st.sampled_from(CHARS), min_size=1, max_size=4)))
    return text, stops


def run_with_stops(tok: Tok, prompt: list[int], output: list[int], stops: list[str], skip_special_tokens=True):
    """Feed tokens until a stop string ends the text, as the engine does; check visible_text at every step.
    Returns the detokenizer, the number of tokens fed and the visible texts seen while streaming."""
    detok = IncrementalDetokenizer(tok.tokenizer, prompt, stops, skip_special_tokens)
    shown = []
    fed = 0
    for token in output:
        detok.add(token)
        fed += 1
        if detok.stopped:
            break
        visible = detok.visible_text(False)
        assert detok.text.startswith(visible)
        for stop in stops:  # a tail that may still grow into a stop string is never shown
            for k in range(1, len(stop)):
                if detok.text.endswith(stop[:k]):
                    assert len(visible) <= len(detok.text) - k, f"shown {visible!r} may still become {stop!r}"
        # ending here shows everything, including bytes of a character still incomplete
        assert detok.visible_text(True) == tok.decode(output[:fed]) if not stops else \
            detok.visible_text(True).startswith(detok.text)
        shown.append(visible)
    return detok, fed, shown


def expected_stop(received: str, stops: list[str]) -> int | None:
    """Where the reply ends: before the earliest stop string of the text received so far."""
    found = [received.find(stop) for stop in stops if stop in received]
    return min(found) if found else None


@SETTINGS
@given(case=stop_case(), plan=PLAN, prompt=PROMPTS)
def test_text_ends_before_the_earliest_stop_string(tok: Tok, case, plan, prompt: str) -> None:
    text, stops = case
    output = tok.mixed(text, plan)
    detok, fed, shown = run_with_stops(tok, prompt_ids(tok, prompt), output, stops)
    final = detok.visible_text(True)
    assert final.startswith(detok.text)
    for visible in shown:  # what was streamed stays a prefix of the final reply: no stop string leaked
        assert final.startswith(visible)
    # the reference: the text received after each token, where it ends in a whole character, is searched
    # for stop strings; the first search that finds one ends the reply before the earliest one found
    for i in range(1, len(output) + 1):
        received = tok.decode(output[:i])
        if received.endswith("\ufffd"):
            continue  # an incomplete character: the next token completes it
        cut = expected_stop(received, stops)
        if cut is not None:
            assert detok.stopped and fed == i and final == received[:cut]
            break
    else:
        assert not detok.stopped and fed == len(output) and final == text
    if detok.stopped:
        assert not any(stop in final for stop in stops)


@SETTINGS
@given(case=stop_case())
def test_stop_strings_with_one_character_at_a_time(tok: Tok, case) -> None:
    """With single-byte tokens characters arrive one at a time: the reply stops at the first character that
    completes a stop string, right before the earliest stop string ending there."""
    text, stops = case
    detok, fed, shown = run_with_stops(tok, [], tok.bytewise(text), stops)
    for k in range(1, len(text) + 1):
        cut = expected_stop(text[:k], stops)
        if cut is not None:
            assert detok.stopped and detok.text == text[:cut]
            break
    else:
        assert not detok.stopped and detok.text == text
    assert all(detok.text.startswith(visible) for visible in shown)


def test_stop_string_spanning_several_tokens(tok: Tok) -> None:
    output = tok.encode("Hello there, world") + tok.bytewise(" 😀 END") + tok.encode(" trailing")
    detok, fed, shown = run_with_stops(tok, [], output, ["😀 END", "nothing"])
    assert detok.stopped and detok.text == "Hello there, world "
    assert fed == len(output) - len(tok.encode(" trailing"))
    assert all("😀" not in visible for visible in shown)


def test_holdback_hides_a_possible_stop_string_until_finished(tok: Tok) -> None:
    detok = IncrementalDetokenizer(tok.tokenizer, [], ["STOP"])
    for token in tok.encode("abc ST"):
        detok.add(token)
    assert not detok.stopped
    assert not detok.visible_text(False).endswith("S")
    assert detok.visible_text(True) == "abc ST"  # finished another way (length, EOS): all of it is shown


def test_no_stop_string_no_holdback(tok: Tok) -> None:
    detok = IncrementalDetokenizer(tok.tokenizer, [], [])
    for token in tok.encode("a b c"):
        detok.add(token)
        assert detok.visible_text(False) == detok.text
    assert detok.text == "a b c"


@SETTINGS
@given(text=TEXT, plan=PLAN, specials=st.lists(st.tuples(st.integers(0, 200), st.integers(0, 2)), max_size=4),
       skip=st.booleans())
@example(text="ア", plan=[], specials=[(1, 0)], skip=False)  # a special token between the bytes of one character
def test_special_tokens(tok: Tok, text: str, plan, specials, skip: bool) -> None:
    output = tok.mixed(text, plan)
    for at, which in specials:
        output.insert(min(at, len(output)), tok.special[which])
    detok = IncrementalDetokenizer(tok.tokenizer, tok.encode("<|im_start|>assistant\n"), [], skip)
    for token in output:
        detok.add(token)
    # an unfinished character at the end is waiting for more bytes in .text; the finished reply shows it as decoded
    assert detok.visible_text(True) == tok.decode(output, skip_special_tokens=skip)
    assert detok.visible_text(True).startswith(detok.text)
    if skip:
        assert detok.text == text
    else:
        assert all(tok.tokenizer.convert_ids_to_tokens(tok.special[w]) in detok.text for _, w in specials)


def test_skip_special_tokens_drops_them(tok: Tok) -> None:
    output = tok.encode("Hi") + [tok.tokenizer.convert_tokens_to_ids("<|im_end|>")] + tok.encode(" there")
    skipped = IncrementalDetokenizer(tok.tokenizer, [], [], skip_special_tokens=True)
    kept = IncrementalDetokenizer(tok.tokenizer, [], [], skip_special_tokens=False)
    for token in output:
        skipped.add(token)
        kept.add(token)
    assert skipped.text == "Hi there"
    assert kept.text == "Hi<|im_end|> there"


def test_stop_string_on_a_kept_special_token(tok: Tok) -> None:
    output = tok.encode("Done.") + [tok.tokenizer.convert_tokens_to_ids("<|im_end|>")] + tok.encode("more")
    detok, fed, _ = run_with_stops(tok, [], output, ["<|im_end|>"], skip_special_tokens=False)
    assert detok.stopped and detok.text == "Done." and fed == len(output) - len(tok.encode("more"))


def test_finished_text_keeps_a_trailing_replacement_character(tok: Tok) -> None:
    """U+FFFD is a character like any other: a reply whose last token is one must keep it.

    The detokenizer takes a decoded text that ends in U+FFFD for an incomplete UTF-8 character and waits for
    the next token; when none comes, that token's text is never added."""
    output = tok.encode("Unknown symbol: \ufffd")
    assert tok.decode(output) == "Unknown symbol: \ufffd"
    detok = IncrementalDetokenizer(tok.tokenizer, [], [])
    for token in output:
        detok.add(token)
    assert detok.visible_text(True) == tok.decode(output)
