"""Text of a reply as its tokens arrive, and the stop strings that end it."""

from transformers import PreTrainedTokenizerBase

# Prompt tokens decoded with the reply so that a tokenizer that drops a leading space on its
# first token (SentencePiece) still gives the reply's first word its space.
CONTEXT_TOKENS = 4


class IncrementalDetokenizer:
    def __init__(self, tokenizer: PreTrainedTokenizerBase, prompt_token_ids: list[int], stop: list[str],
                 skip_special_tokens: bool = True):
        self.tokenizer = tokenizer
        self.skip_special_tokens = skip_special_tokens
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
        if not new or new.endswith("\ufffd"):
            return  # maybe an incomplete UTF-8 character: wait for the next token
        self.prefix_offset, self.read_offset = self.read_offset, len(self.tokens)
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
            return self.text if self.stopped else self.text + self._pending()
        if not self.holdback:
            return self.text
        return self.text[: max(0, len(self.text) - self.holdback)]

    def _pending(self) -> str:
        """Text of the tokens after read_offset."""
        def decode(ids):
            return self.tokenizer.decode(ids, skip_special_tokens=self.skip_special_tokens)
        before = decode(self.tokens[self.prefix_offset : self.read_offset])
        after = decode(self.tokens[self.prefix_offset :])
        return after[len(before) :] if len(after) > len(before) else ""
