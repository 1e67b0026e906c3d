"""A thinking model's reasoning apart from its answer: the markers its chat template uses (ReasoningMarkers, found
from the template: <think>...</think>, as special tokens or as text), where a reply starts (inside the block when the
generation prompt opens it, as DeepSeek-R1's does; before it otherwise, as Qwen3's), and a reply's text split as it
streams (ReasoningParser). The engine closes a reply's thinking itself, writing the closing marker, when its budget
is spent or it is asked to (llm_engine.py); a grammar constrains the answer only, from the closing marker on."""

import enum
from dataclasses import dataclass

START, END = "<think>", "</think>"
PROMPT_TAIL_TOKENS = 16  # of a prompt, decoded to see whether it ends inside an open block
CLOSING = "\n" + END + "\n\n"  # what the engine writes to close a reply's thinking: the layout templates render


class Phase(enum.Enum):
    BEFORE = enum.auto()  # nothing written yet but space: the reply may open a block
    THINKING = enum.auto()
    ANSWER = enum.auto()


@dataclass(frozen=True)
class ReasoningMarkers:
    start: str
    end: str
    opening_ids: tuple[int, ...]  # the tokens the engine writes to open a block ("<think>\n")
    closing_ids: tuple[int, ...]  # and to close one (CLOSING)
    # marker tokens that decoding drops as special (Qwen3's are not, others' are): id -> their text, kept in the text
    literal: dict[int, str]

    def phase_after(self, prompt_text: str) -> Phase:
        """Where a reply starts after a prompt that ends with `prompt_text`: inside the block if the prompt opened
        one and did not close it, in the answer if the prompt ends with a closed one (Qwen3 with enable_thinking
        false renders an empty block), else before any (a block closed in an earlier turn is no matter)."""
        opened, closed = prompt_text.rfind(self.start), prompt_text.rfind(self.end)
        if opened > closed:
            return Phase.THINKING
        if closed != -1 and not prompt_text[closed + len(self.end):].strip():
            return Phase.ANSWER
        return Phase.BEFORE


def find_markers(tokenizer) -> ReasoningMarkers | None:
    """The reasoning markers of a model whose chat template writes <think> and </think>; None for any other."""
    template = getattr(tokenizer, "chat_template", None)
    if not isinstance(template, str) or START not in template or END not in template:
        return None
    special = {token: added.content for token, added in tokenizer.added_tokens_decoder.items() if added.special}
    literal = {}
    for marker in (START, END):
        ids = tokenizer.encode(marker, add_special_tokens=False)
        if len(ids) == 1 and ids[0] in special:
            literal[ids[0]] = marker
    encode = lambda text: tuple(tokenizer.encode(text, add_special_tokens=False))  # noqa: E731
    return ReasoningMarkers(START, END, encode(START + "\n"), encode(CLOSING), literal)


class ReasoningParser:
    """One reply's text, split into reasoning and answer as it streams in pieces (a marker may be cut anywhere
    between them): feed() gives what each piece adds to each part, holding back a tail that may be the start of a
    marker. Space that opens a part is left out of it."""

    def __init__(self, markers: ReasoningMarkers, phase: Phase):
        self.markers, self.phase = markers, phase
        self.held = ""  # text not given out yet: the start of a marker, or space before a part's first text
        self.started = False  # the current part has text

    @property
    def thinking(self) -> bool:
        return self.phase is Phase.THINKING

    def feed(self, text: str) -> tuple[str, str]:
        """(reasoning, answer) that `text` adds."""
        text, self.held = self.held + text, ""
        reasoning = answer = ""
        while text:
            if self.phase is Phase.BEFORE:
                stripped = text.lstrip()
                if stripped.startswith(self.markers.start):
                    self._enter(Phase.THINKING)
                    text = stripped[len(self.markers.start):]
                    continue
                if not stripped or self.markers.start.startswith(stripped):
                    self.held = text
                    break
                self.phase = Phase.ANSWER
                self.started = True  # the answer starts here: with its space, as the model wrote it
            if self.phase is Phase.ANSWER:
                answer += self._part(text)
                break
            at = text.find(self.markers.end)
            if at != -1:
                reasoning += self._part(text[:at])
                self.held = ""  # space before the closing marker
                self._enter(Phase.ANSWER)
                text = text[at + len(self.markers.end):]
                continue
            keep = _marker_start(text, self.markers.end)
            reasoning += self._part(text[: len(text) - keep])
            self.held += text[len(text) - keep:]
            break
        return reasoning, answer

    def flush(self) -> tuple[str, str]:
        """What is held back, once the reply has ended: text of the part it was in."""
        held, self.held = self.held, ""
        if self.phase is Phase.THINKING:
            return (held.rstrip() if self.started else held.strip()), ""
        return "", held.lstrip() if self.phase is Phase.BEFORE else held

    def _enter(self, phase: Phase) -> None:
        self.phase, self.started = phase, False

    def _part(self, text: str) -> str:
        """Text of the current part, without the space that opens it; space that may end it is held back until more
        text follows (the space before a closing marker belongs to neither part)."""
        if not self.started:
            text = text.lstrip()
            if not text:
                return ""
            self.started = True
        if self.phase is Phase.THINKING:
            body = text.rstrip()
            self.held = text[len(body):] + self.held
            return body
        return text


def _marker_start(text: str, marker: str) -> int:
    """The length of the longest end of `text` that is the start of `marker` (it may be completed by what follows)."""
    for n in range(min(len(marker) - 1, len(text)), 0, -1):
        if marker.startswith(text[-n:]):
            return n
    return 0
