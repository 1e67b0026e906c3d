"""The message box: several lines, Enter sends, Shift+Enter or Ctrl+J starts a new line, a paste keeps its
newlines; ↑ on the first line focuses the last message (whose keys then act on it)."""

from dataclasses import dataclass

from textual import events
from textual.message import Message
from textual.widgets import TextArea

NEW_LINE_KEYS = ("shift+enter", "ctrl+j")  # terminals that cannot tell Shift+Enter from Enter send Ctrl+J as \n


class Composer(TextArea):
    @dataclass
    class Submitted(Message):
        composer: "Composer"
        text: str

    def __init__(self, **kwargs):
        super().__init__(soft_wrap=True, show_line_numbers=False, tab_behavior="focus", **kwargs)

    async def _on_key(self, event: events.Key) -> None:
        if event.key == "enter":
            event.stop()
            event.prevent_default()
            self.post_message(self.Submitted(self, self.text))
        elif event.key in NEW_LINE_KEYS:
            event.stop()
            event.prevent_default()
            self.insert("\n")
        elif event.key == "up" and self.cursor_location[0] == 0:  # above the first line: the last message
            event.stop()
            event.prevent_default()
            await self.run_action("screen.focus_message(-1)")
        else:
            await super()._on_key(event)
