"""A chat's system prompt and sampling settings, and N (how many replies "fork" asks for)."""

from dataclasses import dataclass

import msgspec
from textual.app import ComposeResult
from textual.binding import Binding
from textual.containers import Grid, Horizontal, Vertical
from textual.screen import ModalScreen
from textual.widgets import Button, Input, Label, TextArea

from localchat.app.protocol import MAX_N, Conversation, SamplingSettings


@dataclass
class ChatSettings:
    system_prompt: str
    sampling: SamplingSettings
    fork_n: int


class SettingsScreen(ModalScreen[ChatSettings | None]):
    BINDINGS = [Binding("escape", "dismiss(None)", "Cancel", id="cancel"),
                Binding("ctrl+s", "save", "Save", id="submit", priority=True)]

    def __init__(self, conversation: Conversation, fork_n: int):
        super().__init__()
        self.conversation, self.fork_n = conversation, fork_n

    def compose(self) -> ComposeResult:
        s = self.conversation.settings
        with Vertical(classes="dialog", id="settings"):
            yield Label(f"Settings of “{self.conversation.title}”", classes="dialog-title", markup=False)
            yield Label("System prompt")
            yield TextArea(self.conversation.system_prompt, id="system-prompt")
            with Grid(id="sampling"):
                yield Label("Temperature")
                yield Input(str(s.temperature), type="number", id="temperature")
                yield Label("Top p")
                yield Input(str(s.top_p), type="number", id="top-p")
                yield Label("Max tokens")
                yield Input(str(s.max_tokens), type="integer", id="max-tokens")
                yield Label("Seed")
                yield Input("" if s.seed is None else str(s.seed), type="integer", placeholder="random", id="seed")
                yield Label("N (fork)")
                yield Input(str(self.fork_n), type="integer", id="fork-n")
            yield Label("", id="settings-error")
            with Horizontal(classes="dialog-buttons"):
                yield Button("Cancel", id="cancel")
                yield Button("Save", id="save", variant="primary")

    def value(self, field_id: str) -> str:
        return self.query_one(f"#{field_id}", Input).value.strip()

    def read(self) -> ChatSettings:
        """Raises ValueError with a message for the user."""
        try:
            temperature, top_p = float(self.value("temperature")), float(self.value("top-p"))
            max_tokens, fork_n = int(self.value("max-tokens")), int(self.value("fork-n"))
            seed = int(self.value("seed")) if self.value("seed") else None
        except ValueError:
            raise ValueError("every field but the seed needs a number") from None
        if not 0 <= temperature <= 2:
            raise ValueError("temperature is between 0 and 2")
        if not 0 < top_p <= 1:
            raise ValueError("top p is above 0 and at most 1")
        if max_tokens < 1:
            raise ValueError("max tokens is at least 1")
        if not 1 <= fork_n <= MAX_N:
            raise ValueError(f"N is between 1 and {MAX_N}")
        sampling = msgspec.structs.replace(self.conversation.settings, temperature=temperature, top_p=top_p,
                                           max_tokens=max_tokens, seed=seed)
        return ChatSettings(self.query_one("#system-prompt", TextArea).text, sampling, fork_n)

    def action_save(self) -> None:
        try:
            self.dismiss(self.read())
        except ValueError as error:
            self.query_one("#settings-error", Label).update(str(error))

    def on_button_pressed(self, event: Button.Pressed) -> None:
        if event.button.id == "save":
            self.action_save()
        else:
            self.dismiss(None)
