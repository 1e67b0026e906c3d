"""The message box: several lines, Enter sends, Shift+Enter or Ctrl+J starts a new line, a paste keeps its
newlines, Ctrl+U clears it (Ctrl+Z brings the text back); ↑ on the first line or Tab asks for the last message
(ToMessages). It is the chat's typing surface: a key typed while something else is focused comes here
(take_typing)."""

from dataclasses import dataclass

from textual import events
from textual.binding import Binding
from textual.message import Message
from textual.widgets import TextArea

NEW_LINE_KEYS = ("shift+enter", "ctrl+j")  # terminals that cannot tell Shift+Enter from Enter send Ctrl+J as \n
EDITING_KEYS = ("backspace", "delete")  # keys that edit the text wherever the focus is


def is_typing(event: events.Key) -> bool:
    """A key that writes or erases text (a letter, a space, Backspace, Delete), not one that moves or acts."""
    return bool(event.is_printable and event.character) or event.key in EDITING_KEYS


class MessageBox(TextArea):
    """A text box where Enter sends (Submitted) and Shift+Enter or Ctrl+J starts a new line."""

    @dataclass
    class Submitted(Message):
        box: "MessageBox"
        text: str

    def __init__(self, text: str = "", **kwargs):
        super().__init__(text, soft_wrap=True, show_line_numbers=False, tab_behavior="focus", **kwargs)

    async def _on_key(self, event: events.Key) -> None:
        if event.key == "enter":
            event.stop()
            event.prevent_default()
            self.post_message(self.Submitted(self, self.text))
        elif event.key in NEW_LINE_KEYS:
            event.stop()
            event.prevent_default()
            self.insert("\n")
        else:
            await super()._on_key(event)


class Composer(MessageBox):
    """The chat's message box."""

    # shown in the footer while the box has text (as shells have it; the text area's own Ctrl+U clears a line's start)
    BINDINGS = [Binding("ctrl+u", "clear_box", "Clear", id="clear_message", tooltip="Clear the message box")]

    class ToMessages(Message):
        """↑ on the first line, or Tab: the user moves up to the messages (the last one)."""

    async def _on_key(self, event: events.Key) -> None:
        if event.key == "tab" or (event.key == "up" and self.cursor_location[0] == 0):
            event.stop()
            event.prevent_default()
            self.post_message(self.ToMessages())
        else:
            await super()._on_key(event)

    def action_clear_box(self) -> None:
        """Empty the box as an edit, which Ctrl+Z takes back: nothing typed is lost."""
        self.select_all()
        self.delete(*self.selection, maintain_selection_offset=False)

    def check_action(self, action: str, parameters: tuple) -> bool | None:
        return bool(self.text) if action == "clear_box" else True

    def on_text_area_changed(self) -> None:
        self.refresh_bindings()  # Clear shows while there is text

    def take_typing(self, event: events.Key) -> None:
        """A key typed while another widget had the focus: the box takes the focus and the key, as if it had had
        them (a letter at the cursor, Backspace or Delete beside it)."""
        event.stop()
        event.prevent_default()
        self.focus()
        if event.key == "backspace":
            self.action_delete_left()
        elif event.key == "delete":
            self.action_delete_right()
        else:
            self.insert(event.character)
