"""Fork (ctrl+g): how many replies to write at once, and, optionally, one line per reply that says how it should differ
("Shorter.", "As a table."): each reply's instruction goes after the whole chat, so all of them share its cached
history. Presets fill the lines (one comes with the app; `Save` keeps the lines shown as another, in tui.toml); the
reply picked goes on without its instruction unless the box says keep it."""

from dataclasses import dataclass

from textual.app import ComposeResult
from textual.binding import Binding
from textual.containers import Horizontal, Vertical, VerticalScroll
from textual.screen import ModalScreen
from textual.widgets import Button, Checkbox, Input, Label

from localchat.app.protocol.conversations import Variation

PLAIN = "a line for each, or none"


@dataclass(frozen=True)
class ForkRequest:
    """What the dialog asks for: n replies, each line an instruction ("" for none), kept in the chat or not."""

    n: int
    lines: tuple[str, ...]
    keep: bool = False

    @property
    def variations(self) -> list[Variation] | None:
        """One per reply, or None where no line says anything (a plain fork)."""
        if not any(self.lines):
            return None
        return [Variation(instruction=line or None, keep=self.keep and bool(line)) for line in self.lines]


def preset_name(lines: list[str]) -> str:
    """A preset's name: its lines, short ("shorter / longer / as a list")."""
    return " / ".join(line.rstrip(".").lower() for line in lines if line)


class ForkDialog(ModalScreen[ForkRequest | None]):
    BINDINGS = [Binding("escape", "dismiss(None)", "Cancel", id="cancel")]

    def __init__(self, n: int, max_n: int, lines: tuple[str, ...], presets: dict[str, list[str]],
                 save_preset, keep: bool = False):
        """n: the replies it starts with (within 2..max_n); lines: the last fork's; presets: name -> lines;
        save_preset(name, lines) keeps one."""
        super().__init__()
        self.n, self.max_n, self.lines = max(2, min(n, max_n)), max_n, list(lines)
        self.presets, self.save_preset, self.keep = presets, save_preset, keep

    def compose(self) -> ComposeResult:
        with Vertical(classes="dialog", id="fork-dialog"):
            yield Label("Fork: replies written at once, to pick one from", classes="dialog-title")
            with Horizontal(id="fork-count"):
                yield Label("Replies ")
                yield Input(str(self.n), id="fork-n", type="integer", max_length=2)
                yield Label(f" {PLAIN}", id="fork-hint", markup=False)
            yield VerticalScroll(id="fork-lines")
            with Horizontal(id="fork-presets"):
                yield Label("Presets ")
                for name in self.presets:
                    yield Button(name, classes="preset", name=name)
                yield Button("Save these", id="save-preset")
            yield Checkbox("Keep the instruction in the chat", self.keep, id="fork-keep",
                           tooltip="The reply picked goes on with its instruction as a turn of the chat (else without)")
            with Horizontal(classes="dialog-buttons"):
                yield Button("Cancel", id="cancel")
                yield Button("Fork", id="fork", variant="primary")

    async def on_mount(self) -> None:
        await self.show_lines()
        self.query_one("#fork-lines Input", Input).focus()

    @property
    def line_inputs(self) -> list[Input]:
        return list(self.query("#fork-lines Input").results(Input))

    async def show_lines(self, texts: list[str] | None = None) -> None:
        """One line per reply: `texts`, else what is typed in each (the last fork's lines at first)."""
        texts = texts if texts is not None else [box.value for box in self.line_inputs] or self.lines
        lines = self.query_one("#fork-lines", VerticalScroll)
        await lines.remove_children()
        await lines.mount_all(Horizontal(Label(f"{i + 1} "), Input(
            texts[i] if i < len(texts) else "", placeholder="as asked, or: shorter, formal, in French",
            id=f"fork-line-{i + 1}", classes="fork-line"), classes="fork-row") for i in range(self.n))

    async def on_input_changed(self, event: Input.Changed) -> None:
        if event.input.id == "fork-n" and event.value.isdigit():
            n = max(2, min(int(event.value), self.max_n))
            if n != self.n:
                self.n = n
                await self.show_lines()

    def on_input_submitted(self, event: Input.Submitted) -> None:
        event.stop()
        self.fork()

    async def on_button_pressed(self, event: Button.Pressed) -> None:
        if event.button.id == "fork":
            self.fork()
        elif event.button.id == "cancel":
            self.dismiss(None)
        elif event.button.id == "save-preset":
            self.save()
        elif event.button.has_class("preset"):
            await self.use(self.presets[event.button.name])

    async def use(self, lines: list[str]) -> None:
        """A preset: as many replies as it has lines, each with its line."""
        self.n = max(2, min(len(lines), self.max_n))
        self.query_one("#fork-n", Input).value = str(self.n)
        await self.show_lines(list(lines))

    def save(self) -> None:
        lines = [box.value.strip() for box in self.line_inputs]
        if not any(lines):
            self.notify("Write a line for a reply first: a preset is its lines", severity="warning")
            return
        name = preset_name(lines)
        if name not in self.presets:
            self.query_one("#fork-presets").mount(Button(name, classes="preset", name=name),
                                                 before=self.query_one("#save-preset"))
        self.presets[name] = [line for line in lines if line]
        self.save_preset(name, self.presets[name])
        self.notify(f"Saved the preset “{name}”")

    def fork(self) -> None:
        lines = tuple(box.value.strip() for box in self.line_inputs)
        self.dismiss(ForkRequest(self.n, lines, self.query_one("#fork-keep", Checkbox).value))
