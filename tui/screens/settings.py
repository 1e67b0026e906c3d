"""A chat's system prompt and sampling settings, and N (how many replies "fork" asks for); with a thinking model,
whether it thinks and its thinking budget too; and what happens when the chat outgrows the model's context. Every
field is checked against the engine's limits (GET /api/limits), the ones the web UI and the server use."""

from dataclasses import dataclass

import msgspec
from textual.app import ComposeResult
from textual.binding import Binding
from textual.containers import Grid, Horizontal, Vertical, VerticalScroll
from textual.screen import ModalScreen
from textual.widgets import Button, Checkbox, Input, Label, Select, TextArea

from localchat.app.protocol.conversations import Conversation, SamplingSettings
from localchat.app.protocol.limits import Limits
from localchat.app.protocol.openai import Tool

# (setting, label, input type): the numeric settings of SamplingSettings, in the dialog's order
NUMBERS = [
    ("temperature", "Temperature", "number"),
    ("top_p", "Top p", "number"),
    ("top_k", "Top k", "integer"),
    ("min_p", "Min p", "number"),
    ("repetition_penalty", "Repetition penalty", "number"),
    ("presence_penalty", "Presence penalty", "number"),
    ("frequency_penalty", "Frequency penalty", "number"),
    ("max_tokens", "Max tokens", "integer"),
]

# SamplingSettings.context_overflow: (label, value); None is the server's default (serve.toml's, truncate_middle
# unless set)
SERVER_DEFAULT = "default"  # the Select's value for None
CONTEXT_OVERFLOW = [
    ("Server default", SERVER_DEFAULT),
    ("Stop: refuse to send", "stop"),
    ("Truncate the middle: keep the first exchange", "truncate_middle"),
    ("Rolling window: leave out the oldest", "rolling_window"),
]


@dataclass
class ChatSettings:
    system_prompt: str
    sampling: SamplingSettings
    fork_n: int


def field_id(setting: str) -> str:
    return setting.replace("_", "-")


class SettingsScreen(ModalScreen[ChatSettings | None]):
    BINDINGS = [Binding("escape", "dismiss(None)", "Cancel", id="cancel"),
                Binding("ctrl+s", "save", "Save", id="submit", priority=True)]

    def __init__(self, conversation: Conversation, fork_n: int, limits: Limits, thinking: bool = False):
        """thinking: the model thinks before it answers (Health.thinking), so its thinking settings are shown."""
        super().__init__()
        self.conversation, self.fork_n, self.limits, self.thinking = conversation, fork_n, limits, thinking

    def compose(self) -> ComposeResult:
        s = self.conversation.settings
        with Vertical(classes="dialog", id="settings"):
            yield Label(f"Settings of “{self.conversation.title}”", classes="dialog-title", markup=False)
            with VerticalScroll(id="settings-fields"):
                yield Label("System prompt")
                yield TextArea(self.conversation.system_prompt, id="system-prompt")
                with Grid(id="sampling"):
                    for setting, label, kind in NUMBERS:
                        yield Label(label)
                        yield Input(str(getattr(s, setting)), type=kind, id=field_id(setting),
                                    tooltip=self.describe(setting), compact=True)
                    yield Label("Seed")
                    yield Input("" if s.seed is None else str(s.seed), type="integer", placeholder="random",
                                id="seed", compact=True)
                    yield Label("N (fork)")
                    yield Input(str(self.fork_n), type="integer", id="fork-n", tooltip=self.describe("n"),
                                compact=True)
                    if self.thinking:
                        yield Label("Thinking budget")
                        budget = s.thinking_token_budget
                        yield Input("" if budget is None else str(budget), type="integer", placeholder="server default",
                                    id="thinking-token-budget", tooltip=self.describe("thinking_token_budget"),
                                    compact=True)
                if self.thinking:
                    yield Checkbox("Think before answering", s.enable_thinking, id="enable-thinking")
                yield Label(f"Stop strings (one per line, at most {self.limits.max_stop_strings})")
                yield TextArea("\n".join(s.stop), id="stop")
                yield Checkbox("Replies are JSON objects", s.json_mode, id="json-mode")
                yield Label("Tools the model may call (JSON, OpenAI's format)")
                tools = msgspec.json.format(msgspec.json.encode(s.tools)).decode() if s.tools else ""
                yield TextArea(tools, id="tools", language="json")
                yield Label("Tool choice")
                yield Select([(choice, choice) for choice in ("auto", "required", "none")], value=s.tool_choice,
                             allow_blank=False, id="tool-choice",
                             compact=True)
                yield Label("When the chat outgrows the model's context")
                yield Select(CONTEXT_OVERFLOW, value=s.context_overflow or SERVER_DEFAULT, allow_blank=False,
                             id="context-overflow", compact=True)
            yield Label("", id="settings-error")
            with Horizontal(classes="dialog-buttons"):
                yield Button("Cancel", id="cancel")
                yield Button("Save", id="save", variant="primary")

    def describe(self, setting: str) -> str:
        limit = self.limits.sampling[setting]
        return f"{limit.min} to {limit.max}" if limit.max is not None else f"at least {limit.min}"

    def value(self, field: str) -> str:
        return self.query_one(f"#{field}", Input).value.strip()

    def number(self, setting: str, label: str, kind: type, field: str | None = None) -> int | float:
        """The field's value within the engine's limit; raises ValueError with a message for the user."""
        try:
            value = kind(self.value(field or field_id(setting)))
        except ValueError:
            raise ValueError(f"{label} needs {'a whole number' if kind is int else 'a number'}") from None
        limit = self.limits.sampling[setting]
        if value < limit.min or (limit.max is not None and value > limit.max):
            raise ValueError(f"{label} is {self.describe(setting)}")
        if setting == "temperature" and 0 < value < self.limits.min_temperature:
            raise ValueError(f"Temperature is 0 (greedy) or at least {self.limits.min_temperature}")
        return value

    def read(self) -> ChatSettings:
        """Raises ValueError with a message for the user."""
        numbers = {setting: self.number(setting, label, int if kind == "integer" else float)
                   for setting, label, kind in NUMBERS}
        seed = self.number("seed", "Seed", int) if self.value("seed") else None
        fork_n = self.number("n", "N", int, field="fork-n")
        stop = [line for line in self.query_one("#stop", TextArea).text.splitlines() if line]
        if len(stop) > self.limits.max_stop_strings:
            raise ValueError(f"at most {self.limits.max_stop_strings} stop strings")
        tools_text = self.query_one("#tools", TextArea).text.strip()
        try:
            tools = msgspec.json.decode(tools_text, type=list[Tool]) if tools_text else []
        except msgspec.DecodeError as error:
            raise ValueError(f"Tools: {error}") from None
        sampling = msgspec.structs.replace(self.conversation.settings, **numbers, seed=seed, stop=stop, tools=tools,
                                           json_mode=self.query_one("#json-mode", Checkbox).value,
                                           tool_choice=self.query_one("#tool-choice", Select).value,
                                           context_overflow=self.context_overflow(),
                                           **self.read_thinking())
        return ChatSettings(self.query_one("#system-prompt", TextArea).text, sampling, fork_n)

    def context_overflow(self) -> str | None:
        policy = self.query_one("#context-overflow", Select).value
        return None if policy == SERVER_DEFAULT else policy

    def read_thinking(self) -> dict:
        """The thinking settings, where shown (else the chat keeps its own); raises ValueError like read()."""
        if not self.thinking:
            return {}
        budget = (self.number("thinking_token_budget", "Thinking budget", int)
                  if self.value("thinking-token-budget") else None)
        return {"enable_thinking": self.query_one("#enable-thinking", Checkbox).value, "thinking_token_budget": budget}

    def action_save(self) -> None:
        try:
            self.dismiss(self.read())
        except ValueError as error:
            note = self.query_one("#settings-error", Label)
            note.update(str(error))
            note.add_class("-shown")

    def on_button_pressed(self, event: Button.Pressed) -> None:
        if event.button.id == "save":
            self.action_save()
        else:
            self.dismiss(None)
