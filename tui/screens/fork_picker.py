"""N replies to one message, side by side while they stream; the user picks the one to continue from (the
others stay as sibling branches)."""

from collections.abc import Callable

from textual.app import ComposeResult
from textual.binding import Binding
from textual.containers import HorizontalScroll, Vertical
from textual.screen import ModalScreen
from textual.widgets import Footer, Label

from localchat.app.protocol.conversations import Message
from localchat.tui.widgets.message_view import MessageView
from localchat.tui.widgets.thinking_block import END_THINKING_KEY, ThinkingBlock


class ReplyCard(MessageView, can_focus=True):
    pass


class ForkPicker(ModalScreen[str | None]):
    BINDINGS = [
        Binding("left", "app.focus_previous", "Previous", id="fork_previous"),
        Binding("right", "app.focus_next", "Next", id="fork_next"),
        Binding("enter", "pick_focused", "Continue from this one", id="fork_pick"),
        *(Binding(str(i), f"pick({i})", f"Pick {i}", show=False, id=f"fork_pick_{i}") for i in range(1, 10)),
        Binding("escape", "stop_or_close", "Stop / close", id="fork_close"),
        Binding(END_THINKING_KEY, "end_thinking", "Answer now", id="end_thinking"),  # shown while a reply thinks
    ]

    def __init__(self, replies: list[Message], stop: Callable[[], None],
                 end_thinking: Callable[[], None] | None = None):
        """stop: stops the replies; end_thinking: ends their thinking (None: the model does not think)."""
        super().__init__()
        self.replies, self.stop, self.end_thinking = replies, stop, end_thinking
        self.finished: set[str] = set()

    def compose(self) -> ComposeResult:
        with Vertical(id="fork-picker"):
            yield Label(f"{len(self.replies)} replies: pick one to continue from (1-{len(self.replies)} or enter); "
                        "the others stay as branches", classes="dialog-title")
            with HorizontalScroll(id="fork-replies"):
                for i, reply in enumerate(self.replies, 1):
                    yield ReplyCard(reply, title=f"Reply {i}")
            yield Footer()

    @property
    def cards(self) -> list[ReplyCard]:
        return list(self.query(ReplyCard))

    def card_of(self, message_id: str) -> ReplyCard | None:
        return next((card for card in self.cards if card.message.id == message_id), None)

    def on_mount(self) -> None:
        self.cards[0].focus()

    async def finish(self, message: Message) -> None:
        await self.card_of(message.id).finish(message)
        self.finished.add(message.id)
        self.refresh_bindings()

    @property
    def streaming(self) -> bool:
        return len(self.finished) < len(self.replies)

    def check_action(self, action: str, parameters: tuple) -> bool | None:
        if action in ("pick", "pick_focused"):
            return not self.streaming
        if action == "end_thinking":
            return self.end_thinking is not None and any(card.thinking for card in self.cards)
        return True

    def on_thinking_block_streaming(self, event: ThinkingBlock.Streaming) -> None:
        self.refresh_bindings()

    def action_end_thinking(self) -> None:
        self.end_thinking()

    def action_pick(self, number: int) -> None:
        if number <= len(self.replies):
            self.dismiss(self.replies[number - 1].id)

    def action_pick_focused(self) -> None:
        if isinstance(self.focused, ReplyCard):
            self.dismiss(self.focused.message.id)

    def action_stop_or_close(self) -> None:
        if self.streaming:
            self.stop()
        else:
            self.dismiss(None)
