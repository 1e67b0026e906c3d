"""Text of a reply as its tokens arrive, its thinking apart (a thinking model's), and the stop strings that end its
answer."""

from transformers import PreTrainedTokenizerBase

from localchat.engine.frontend.reasoning import ReasoningParser

# Prompt tokens decoded with the reply so that a tokenizer that drops a leading space on its
# first token (SentencePiece) still gives the reply's first word its space.
CONTEXT_TOKENS = 4


class IncrementalDetokenizer:
    def __init__(self, tokenizer: PreTrainedTokenizerBase, prompt_token_ids: list[int], stop: list[str],
                 skip_special_tokens: bool = True, reasoning: ReasoningParser | None = None):
        """reasoning: the parser that takes the reply's thinking out of its text (reasoning_text), for a thinking
        model's reply; its marker tokens stay in the text it reads even where special tokens are skipped."""
        self.tokenizer = tokenizer
        self.skip_special_tokens = skip_special_tokens
        self.reasoning = reasoning
        self.literal = reasoning.markers.literal if reasoning is not None and skip_special_tokens else {}
        self.reasoning_text = ""
        self.final_text: str | None = None  # the whole answer, once asked for after the reply finished
        self.tokens = list(prompt_token_ids[-CONTEXT_TOKENS:])
        self.prefix_offset = 0  # tokens[prefix_offset:read_offset] were decoded into text already
        self.read_offset = len(self.tokens)
        self.stop = stop
        self.holdback = max((len(s) for s in stop), default=1) - 1  # may be the start of a stop string
        self.text = ""
        self.stopped = False

    def add(self, token_id: int) -> None:
        """Append one token's text; a completed stop string ends the text before it."""
        self.tokens.append(token_id)
        new = self._pending()
        marker = self.literal.get(token_id)
        if marker is not None:
            new += marker
        elif not new or new.endswith("\ufffd"):
            return  # maybe an incomplete UTF-8 character: wait for the next token
        self.prefix_offset, self.read_offset = self.read_offset, len(self.tokens)
        if self.reasoning is not None:
            thought, new = self.reasoning.feed(new)
            self.reasoning_text += thought
            if not new:
                return
        search_from = max(0, len(self.text) - self.holdback)
        self.text += new
        found = [at for at in (self.text.find(stop, search_from) for stop in self.stop) if at != -1]
        if found:
            self.text = self.text[: min(found)]
            self.stopped = True

    def visible_text(self, finished: bool) -> str:
        """What may be shown now: all of it once finished (with any text still waiting for more bytes), else
        without a tail that could start a stop string."""
        if finished:
            if self.reasoning is None:
                return self.text if self.stopped else self.text + self._pending()
            return self._final_text()
        if not self.holdback:
            return self.text
        return self.text[: max(0, len(self.text) - self.holdback)]

    def _final_text(self) -> str:
        """The whole answer of a finished thinking model's reply: with any text still waiting for more bytes or held
        back by the reasoning parser (its thinking's last words go to reasoning_text). Worked out once: it moves
        what the parser holds."""
        if self.final_text is None:
            rest = "" if self.stopped else self._pending()
            if self.reasoning is not None:
                thought, rest = self.reasoning.feed(rest)
                last_thought, held = self.reasoning.flush()
                self.reasoning_text += thought + last_thought
                rest += held
            self.final_text = self.text + rest
        return self.final_text

    def _pending(self) -> str:
        """Text of the tokens after read_offset."""
        def decode(ids):
            return self.tokenizer.decode(ids, skip_special_tokens=self.skip_special_tokens)
        before = decode(self.tokens[self.prefix_offset : self.read_offset])
        after = decode(self.tokens[self.prefix_offset :])
        return after[len(before) :] if len(after) > len(before) else ""
