"""The engine could not start or went away: what happened, and a way to try again."""

from textual.app import ComposeResult
from textual.binding import Binding
from textual.containers import Center, Horizontal, Middle, Vertical
from textual.screen import Screen
from textual.widgets import Button, Label


class EngineErrorScreen(Screen):
    BINDINGS = [Binding("r", "app.retry", "Retry", id="retry"), Binding("q", "app.quit", "Quit", id="quit")]

    def __init__(self, message: str, log_path: str):
        super().__init__()
        self.message, self.log_path = message, log_path

    def compose(self) -> ComposeResult:
        with Middle(), Center(), Vertical(classes="dialog", id="engine-error"):
            yield Label("The engine is not available", classes="dialog-title")
            yield Label(self.message, id="error-message", markup=False)
            yield Label(f"Its log: {self.log_path}", markup=False)
            with Horizontal(classes="dialog-buttons"):
                yield Button("Quit (q)", id="quit")
                yield Button("Retry (r)", id="retry", variant="primary")

    def on_button_pressed(self, event: Button.Pressed) -> None:
        self.app.run_action("retry" if event.button.id == "retry" else "quit")
