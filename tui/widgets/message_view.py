"""One message: who wrote it, its Markdown (streamed while it is written), and a reply's stats."""

from textual.app import ComposeResult
from textual.binding import Binding
from textual.containers import Horizontal, Vertical
from textual.content import Content
from textual.widgets import Markdown, Static
from textual.widgets.markdown import MarkdownFence, MarkdownStream

from localchat.app.markdown import author, message_markdown
from localchat.app.protocol.conversations import Message, ReplyStats
from localchat.tui.widgets.branch_switcher import BranchSwitcher


def describe_stats(stats: ReplyStats) -> str:
    parts = []
    if stats.time_to_first_token_s is not None:
        parts.append(f"first token {stats.time_to_first_token_s:.2f} s")
    if stats.tokens_per_s is not None:
        parts.append(f"{stats.tokens_per_s:.1f} tok/s")
    if stats.draft_tokens:
        parts.append(f"drafts {stats.accepted_draft_tokens / stats.draft_tokens:.0%} kept")
    parts.append(f"{stats.completion_tokens} tokens")
    parts.append(f"prompt {stats.prompt_tokens} ({stats.cached_tokens} cached)")
    return " · ".join(parts)


class MessageView(Vertical):
    """A message as shown; a reply being written grows through a MarkdownStream until finish()."""

    def __init__(self, message: Message, title: str | None = None, **kwargs):
        super().__init__(**kwargs)
        self.message = message
        self.title = title or author(message)
        self.stream: MarkdownStream | None = None
        self.next_code_block = 0  # the one the next copy takes
        self.add_class(f"-{message.role}")

    def compose(self) -> ComposeResult:
        with Horizontal(classes="message-header"):
            yield Static(self.title, classes="message-role")
            yield BranchSwitcher(classes="branch-switcher")
            yield Static(classes="message-note")
        yield Markdown(message_markdown(self.message), classes="message-body")
        yield Static(classes="message-stats")

    def on_mount(self) -> None:
        self.query_one(BranchSwitcher).display = False
        self.show_outcome()

    @property
    def body(self) -> Markdown:
        return self.query_one(".message-body", Markdown)

    @property
    def code_blocks(self) -> list[str]:
        return [fence.code for fence in self.query(MarkdownFence)]

    async def on_unmount(self) -> None:
        if self.stream is not None:  # a reply still being written when another branch or chat was opened
            await self.stream.stop()

    def show_position(self, index: int, count: int) -> None:
        self.query_one(BranchSwitcher).show_position(index, count)

    def start_stream(self) -> None:
        self.add_class("-streaming")
        self.query_one(".message-note", Static).update("writing…")
        self.stream = Markdown.get_stream(self.body)

    async def write(self, text: str) -> None:
        await self.stream.write(text)

    async def finish(self, message: Message) -> None:
        """The stored reply: the text as saved, whether it was stopped, its stats."""
        if self.stream is not None:
            await self.stream.stop()
            self.stream = None
        self.remove_class("-streaming")
        self.message = message
        markdown = message_markdown(message)  # a reply's tool calls show once they are read out of it
        if self.body.source != markdown:
            await self.body.update(markdown)
        self.show_outcome()

    def show_outcome(self) -> None:
        note, stats = self.query_one(".message-note", Static), self.query_one(".message-stats", Static)
        message = self.message
        note.update(Content.from_markup("[$warning]stopped[/]") if message.stopped else
                    "cut at max tokens" if message.finish_reason == "length" else "")
        stats.display = message.stats is not None
        if message.stats is not None:
            stats.update(describe_stats(message.stats))


BRANCH = Binding.Group("Branch")  # ← and → as one footer entry


class ChatMessage(MessageView, can_focus=True):
    """A message of the branch on screen; keys act on the focused one."""

    BINDINGS = [
        Binding("left", "screen.switch_branch(-1)", "Prev branch", id="branch_previous", group=BRANCH),
        Binding("right", "screen.switch_branch(1)", "Next branch", id="branch_next", group=BRANCH),
        Binding("r", "screen.regenerate", "Regenerate", id="regenerate"),
        Binding("e", "screen.edit", "Edit", id="edit"),
        Binding("f", "screen.fork", "Fork N", id="fork_here", show=False),
        Binding("c", "screen.copy_message", "Copy", id="copy_message", show=False),
        Binding("y", "screen.copy_code", "Copy code", id="copy_code", show=False),
        Binding("up", "screen.focus_message(-1)", "Previous message", show=False, id="message_previous"),
        Binding("down", "screen.focus_message(1)", "Next message", show=False, id="message_next"),
    ]
