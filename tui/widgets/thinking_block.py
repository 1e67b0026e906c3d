"""A reply's thinking (a thinking model's reasoning, apart from its answer), collapsed above the answer: one line,
"Thinking… 214 tokens" while it streams, "Thought for 12 s" once the answer began or the reply ended; expanded (a
click on that line, or the message's key), the text."""

import time

from textual.app import ComposeResult
from textual.containers import Vertical
from textual.reactive import reactive
from textual.widgets import Static

from localchat.app.protocol.conversations import Message

END_THINKING_KEY = "ctrl+r"  # the default key that ends the thinking of the replies being written (id end_thinking)


def thinking_title(streaming: bool, tokens: int, seconds: float | None) -> str:
    if streaming:
        return f"Thinking… {tokens} tokens" if tokens else "Thinking…"
    if seconds is None:
        return "Thought"
    return f"Thought for {seconds:.1f} s" if seconds < 10 else f"Thought for {seconds:.0f} s"


class ThinkingBlock(Vertical):
    """Hidden where the message has no thinking; a reply's grows here while it is written (add, end, finish)."""

    expanded = reactive(False)

    def __init__(self, message: Message, **kwargs):
        super().__init__(**kwargs)
        self.text = message.reasoning_content or ""
        self.seconds = message.stats.thinking_s if message.stats else None
        self.tokens = message.stats.reasoning_tokens if message.stats else 0
        self.streaming = False  # reasoning arrives and no answer yet
        self.started_at = 0.0  # time.monotonic() of its first reasoning, while it streams
        self.display = bool(self.text)

    def compose(self) -> ComposeResult:
        yield Static(self.title_line(), classes="thinking-title", markup=False)
        text = Static(self.text, classes="thinking-text", markup=False)
        text.display = self.expanded
        yield text

    def title_line(self) -> str:
        return f"{'▼' if self.expanded else '▶'} {thinking_title(self.streaming, self.tokens, self.seconds)}"

    def on_click(self) -> None:
        self.expanded = not self.expanded

    def watch_expanded(self) -> None:
        if self.is_mounted:
            self.show()

    def show(self) -> None:
        self.display = bool(self.text) or self.streaming
        self.query_one(".thinking-title", Static).update(self.title_line())
        self.query_one(".thinking-text", Static).display = self.expanded

    def add(self, reasoning: str, tokens: int) -> None:
        """More of the thinking, streamed (`tokens` so far)."""
        if not self.streaming:
            self.streaming, self.started_at = True, time.monotonic()
            self.refresh_bindings()  # its screen's Answer now shows, or goes
        self.text += reasoning
        self.tokens = tokens
        self.query_one(".thinking-text", Static).update(self.text)
        self.show()

    def end(self) -> None:
        """The answer began (or the reply ended): how long it thought, as measured here until the stored reply says."""
        if self.streaming:
            self.streaming, self.seconds = False, time.monotonic() - self.started_at
            self.refresh_bindings()  # its screen's Answer now shows, or goes
            self.show()

    def finish(self, message: Message) -> None:
        """The stored reply: its thinking as saved, how long it took and how many tokens."""
        self.end()
        self.text = message.reasoning_content or ""
        if message.stats is not None:
            self.tokens = message.stats.reasoning_tokens
            self.seconds = message.stats.thinking_s if message.stats.thinking_s is not None else self.seconds
        self.query_one(".thinking-text", Static).update(self.text)
        self.show()
