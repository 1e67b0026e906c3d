"""One message: who wrote it, the documents it carries, a thinking model's thinking (collapsed), its Markdown (streamed
while it is written; the line breaks and indents it was written with kept), and a reply's stats: one short line, all
of them in its details (which also show its thinking)."""

from textual.app import ComposeResult
from textual.containers import Horizontal, Vertical
from textual.content import Content
from textual.reactive import reactive
from textual.widgets import Markdown, Static
from textual.widgets.markdown import MarkdownFence, MarkdownStream

from localchat.app.markdown import author, variation_words
from localchat.app.protocol.conversations import Message, ReplyStats, continuable
from localchat.app.protocol.documents import Document
from localchat.tui.chat.keys import MESSAGE_KEYS, key_of
from localchat.tui.reply_text import shown_markdown
from localchat.tui.widgets.branch_switcher import BranchSwitcher
from localchat.tui.widgets.document_chips import DocumentChips
from localchat.tui.widgets.thinking_block import ThinkingBlock


def short_stats(stats: ReplyStats) -> str:
    """One short line: how fast, how much of the prompt the cache held ("42.5 tok/s · 32 cached"), and how a reply
    sampled again for being the same as another was sampled at last."""
    speed = f"{stats.tokens_per_s:.1f} tok/s" if stats.tokens_per_s is not None else f"{stats.completion_tokens} tokens"
    return f"{speed} · {stats.cached_tokens} cached" + (f" · {resampled_words(stats)}" if stats.resampled else "")


def resampled_words(stats: ReplyStats) -> str:
    """"sampled again ×2, wider: temperature 1.0, top-p 1, min-p 0" (it was the same as another reply)."""
    wider = (f", wider: temperature {stats.temperature:g}, top-p {stats.top_p:g}, min-p {stats.min_p:g}"
             if stats.top_p is not None else "")
    return f"sampled again ×{stats.resampled}{wider}"


def title_of(message: Message) -> str:
    """Who wrote the message, and for a fork's reply that varied on purpose what it was asked for ("Assistant · asked:
    Shorter."; "kept": the instruction is a turn of the chat from there on)."""
    variation = message.variation
    if variation is None:
        return author(message)
    kept = " (kept in the chat)" if variation.keep and variation.instruction else ""
    return f"{author(message)} · asked: {variation_words(variation)}{kept}"


def describe_stats(stats: ReplyStats) -> str:
    """All of them, for the details."""
    parts = []
    if stats.time_to_first_token_s is not None:
        parts.append(f"first token {stats.time_to_first_token_s:.2f} s")
    if stats.tokens_per_s is not None:
        parts.append(f"{stats.tokens_per_s:.1f} tok/s")
    if stats.draft_tokens:
        parts.append(f"drafts {stats.accepted_draft_tokens / stats.draft_tokens:.0%} kept")
    thinking = f" ({stats.reasoning_tokens} thinking)" if stats.reasoning_tokens else ""
    parts.append(f"{stats.completion_tokens} tokens{thinking}")
    parts.append(f"prompt {stats.prompt_tokens} ({stats.cached_tokens} cached)")
    if stats.resampled:
        parts.append(f"{resampled_words(stats)} (the same as another reply)")
    return " · ".join(parts)


class MessageView(Vertical):
    """A message as shown; a reply being written grows through a MarkdownStream until finish(), after its thinking
    (think()) if it thinks. Its details (all its stats, its thinking) show while `details` is set."""

    details = reactive(False, init=False)

    def __init__(self, message: Message, title: str | None = None, documents: dict[str, Document] | None = None,
                 **kwargs):
        """documents: the ones the message may carry, by id (those it does are shown)."""
        super().__init__(**kwargs)
        self.message = message
        self.documents = [documents[i] for i in message.documents if i in documents] if documents else []
        self.title = title or title_of(message)
        self.stream: MarkdownStream | None = None
        self.end_thinking_key: str | None = None  # while it is written: the key that ends its thinking, to hint at
        self.next_code_block = 0  # the one the next copy takes
        self.add_class(f"-{message.role}")

    def compose(self) -> ComposeResult:
        with Horizontal(classes="message-header"):
            yield Static(self.title, classes="message-role")
            yield BranchSwitcher(classes="branch-switcher")
            yield Static(classes="message-note")
        yield DocumentChips(self.documents, classes="message-documents")
        yield ThinkingBlock(self.message)
        yield Markdown(shown_markdown(self.message), classes="message-body")
        yield Static(classes="message-stats")

    def on_mount(self) -> None:
        self.query_one(BranchSwitcher).display = False
        self.show_outcome()

    @property
    def body(self) -> Markdown:
        return self.query_one(".message-body", Markdown)

    @property
    def thinking_block(self) -> ThinkingBlock:
        return self.query_one(ThinkingBlock)

    @property
    def thinking(self) -> bool:
        """It is being written and thinks (no answer yet). False while it has no block: the footer asks (through the
        screen's check_action) while a new message is mounted or an old one removed."""
        block = next(iter(self.query_children(ThinkingBlock)), None)
        return block is not None and block.streaming

    @property
    def code_blocks(self) -> list[str]:
        return [fence.code for fence in self.query(MarkdownFence)]

    def next_code(self) -> tuple[int, str] | None:
        """The code block a copy takes, one per press (the first, then the next, ... round again): its index and
        code; None where the message has none."""
        blocks = self.code_blocks
        if not blocks:
            return None
        index = self.next_code_block % len(blocks)
        self.next_code_block = index + 1
        return index, blocks[index]

    async def on_unmount(self) -> None:
        if self.stream is not None:  # a reply still being written when another branch or chat was opened
            await self.stream.stop()

    def show_position(self, index: int, count: int) -> None:
        self.query_one(BranchSwitcher).show_position(index, count)

    def start_stream(self, end_thinking_key: str | None = None) -> None:
        """A reply begins; end_thinking_key: the key that ends its thinking (None: the model cannot be asked to)."""
        self.add_class("-streaming")
        self.end_thinking_key = end_thinking_key
        self.query_one(".message-note", Static).update("writing…")
        self.stream = Markdown.get_stream(self.body)

    def think(self, reasoning: str, tokens: int) -> None:
        """More of the reply's thinking (`tokens` so far); the note says it thinks, and which key ends that."""
        if not self.thinking:
            hint = f" {self.end_thinking_key} answers now" if self.end_thinking_key else ""
            self.query_one(".message-note", Static).update(f"thinking…{hint}")
        self.thinking_block.add(reasoning, tokens)

    async def write(self, text: str) -> None:
        if text and self.thinking:
            self.thinking_block.end()
            self.query_one(".message-note", Static).update("writing…")
        await self.stream.write(text)

    async def finish(self, message: Message) -> None:
        """The stored reply: the text as saved, whether it was stopped, its stats."""
        if self.stream is not None:
            await self.stream.stop()
            self.stream = None
        self.remove_class("-streaming")
        self.message = message
        self.thinking_block.finish(message)
        markdown = shown_markdown(message)  # a reply's tool calls show once they are read out of it
        if self.body.source != markdown:
            await self.body.update(markdown)
        self.show_outcome()

    def show_outcome(self) -> None:
        note, stats = self.query_one(".message-note", Static), self.query_one(".message-stats", Static)
        message = self.message
        outcome = (Content.from_markup("[$warning]stopped[/]") if message.stopped else
                   Content("cut at max tokens") if message.finish_reason == "length" else
                   Content("edited") if message.finish_reason == "edited" else Content(""))
        note.update(outcome + self.continue_hint() if outcome else outcome)
        stats.display = message.stats is not None
        if message.stats is not None:
            stats.update(describe_stats(message.stats) if self.details else short_stats(message.stats))
            stats.tooltip = describe_stats(message.stats)

    def continue_hint(self) -> str:
        """What follows the note of a reply cut short: the key that continues it (none here: see ChatMessage)."""
        return ""

    def watch_details(self) -> None:
        self.thinking_block.expanded = self.details
        self.show_outcome()

    def action_toggle_details(self) -> None:
        self.details = not self.details


class ChatMessage(MessageView, can_focus=True):
    """A message of the branch on screen; keys act on the focused one, each with a modifier (or an arrow, Enter):
    letters typed while it is focused go to the message box (the chat screen's on_key)."""

    BINDINGS = MESSAGE_KEYS  # the chat screen's message_key action, but Details (Enter), its own

    def continue_hint(self) -> str:
        """" · ^d continues" after the note of a reply that can go on."""
        if not continuable(self.message):
            return ""
        return f" · {key_of(self.app, 'continue_reply')} continues"
