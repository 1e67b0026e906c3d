"""N replies to one message, written at once; the user picks the one to continue from (the others stay as sibling
branches). Side by side where they all fit; where they do not (3 replies at 80 columns), one whole reply at a time,
with its place ("Reply 2 of 3") and ←/→ to the others."""

from collections.abc import Callable

from textual import events
from textual.app import ComposeResult
from textual.binding import Binding
from textual.containers import Horizontal, Vertical
from textual.screen import ModalScreen
from textual.widgets import Label

from localchat.app.markdown import variation_words
from localchat.app.protocol.conversations import Message
from localchat.tui.widgets.key_footer import KeyFooter
from localchat.tui.widgets.message_view import MessageView
from localchat.tui.widgets.thinking_block import END_THINKING_KEY

CARD_WIDTH = 37  # the narrowest a reply is readable side by side (36), and the gap to the next

OTHER_REPLY = Binding.Group("Other reply")  # ← and → as one footer entry


class ReplyCard(MessageView, can_focus=True):
    BINDINGS = [Binding("t", "toggle_details", "Details (stats, thinking)", id="card_details", show=False)]


class ReplyRow(Horizontal):
    """The replies' row: it tells the picker whether they all fit side by side at its width."""

    def on_resize(self, event: events.Resize) -> None:
        self.screen.set_class(event.size.width < len(self.children) * CARD_WIDTH, "-one-at-a-time")


class ForkPicker(ModalScreen[str | None]):
    BINDINGS = [
        Binding("left", "step(-1)", "Previous reply", id="fork_previous", group=OTHER_REPLY),
        Binding("right", "step(1)", "Next reply", id="fork_next", group=OTHER_REPLY),
        Binding("enter", "pick_focused", "Continue from this one", id="fork_pick"),
        *(Binding(str(i), f"pick({i})", f"Pick {i}", show=False, id=f"fork_pick_{i}") for i in range(1, 10)),
        Binding("escape", "stop_or_close", "Stop / close", id="fork_close"),
        Binding(END_THINKING_KEY, "end_thinking", "Answer now", id="end_thinking"),  # shown while a reply thinks
    ]

    def __init__(self, replies: list[Message], temperature: float | None, stop: Callable[[], None],
                 end_thinking: Callable[[], None] | None = None):
        """temperature: what the replies sample at; stop: stops the replies; end_thinking: ends their thinking (None:
        the model does not think)."""
        super().__init__()
        self.replies, self.temperature, self.stop, self.end_thinking = replies, temperature, stop, end_thinking
        self.finished: set[str] = set()

    def compose(self) -> ComposeResult:
        with Vertical(id="fork-picker"):
            yield Label(f"Pick the reply to go on from: 1-{len(self.replies)} or enter. The others stay as branches.",
                        classes="dialog-title", id="fork-title")
            if any(reply.variation is not None for reply in self.replies):  # they differ on purpose
                kept = any(r.variation.keep and r.variation.instruction for r in self.replies if r.variation)
                yield Label(f"Each asked its own way; the one picked goes on {'with' if kept else 'without'} its "
                            "instruction", id="fork-sampling")
            elif self.temperature is not None:  # a reply the same as another's is sampled again by the engine
                yield Label(f"{len(self.replies)} replies sampled at temperature {self.temperature:g}; a repeat "
                            "sampled again, wider until it differs", id="fork-sampling")
            yield Label(id="fork-position")  # shown one reply at a time: which one, of how many
            with ReplyRow(id="fork-replies"):
                for i, reply in enumerate(self.replies, 1):
                    asked = f" · {variation_words(reply.variation)}" if reply.variation is not None else ""
                    yield ReplyCard(reply, title=f"Reply {i}{asked}")
            yield KeyFooter()

    @property
    def cards(self) -> list[ReplyCard]:
        return list(self.query(ReplyCard))

    def card_of(self, message_id: str) -> ReplyCard | None:
        return next((card for card in self.cards if card.message.id == message_id), None)

    def on_mount(self) -> None:
        self.cards[0].focus()

    def on_descendant_focus(self, event: events.DescendantFocus) -> None:
        if isinstance(event.widget, ReplyCard):
            for card in self.cards:
                card.set_class(card is event.widget, "-shown")
            at = self.cards.index(event.widget) + 1
            self.query_one("#fork-position", Label).update(f"Reply {at} of {len(self.cards)} · ← → the others")

    def action_step(self, delta: int) -> None:
        """The reply before or after the focused one (one at a time, hidden ones are out of Tab's reach too)."""
        cards = self.cards
        at = cards.index(self.focused) if self.focused in cards else 0
        cards[max(0, min(len(cards) - 1, at + delta))].focus()

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
