"""A modal that asks for one text: a title, a file path, an edited message."""

from textual.app import ComposeResult
from textual.binding import Binding
from textual.containers import Horizontal, Vertical
from textual.screen import ModalScreen
from textual.widgets import Button, Input, Label, TextArea


class PromptScreen(ModalScreen[str | None]):
    BINDINGS = [Binding("escape", "dismiss(None)", "Cancel", id="cancel"),
                Binding("ctrl+s", "submit", "Save", id="submit", priority=True)]

    def __init__(self, title: str, value: str = "", multiline: bool = False, action: str = "Save"):
        super().__init__()
        self.title_text, self.value, self.multiline, self.action_label = title, value, multiline, action

    def compose(self) -> ComposeResult:
        with Vertical(classes="dialog"):
            yield Label(self.title_text, classes="dialog-title")
            yield TextArea(self.value, id="prompt-text") if self.multiline else Input(self.value, id="prompt-text")
            with Horizontal(classes="dialog-buttons"):
                yield Button("Cancel", id="cancel")
                yield Button(self.action_label, id="submit", variant="primary")

    @property
    def text(self) -> str:
        field = self.query_one("#prompt-text")
        return field.text if isinstance(field, TextArea) else field.value

    def action_submit(self) -> None:
        if self.text.strip():
            self.dismiss(self.text)

    def on_input_submitted(self) -> None:
        self.action_submit()

    def on_button_pressed(self, event: Button.Pressed) -> None:
        if event.button.id == "submit":
            self.action_submit()
        else:
            self.dismiss(None)
