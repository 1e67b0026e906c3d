"""The keys, with the binding ids that `[keymap]` in tui.toml remaps."""

from textual.app import ComposeResult
from textual.binding import Binding
from textual.containers import Vertical
from textual.screen import ModalScreen
from textual.widgets import DataTable, Label


class HelpScreen(ModalScreen[None]):
    BINDINGS = [Binding("escape,f1,q", "dismiss", "Close", id="cancel")]

    def __init__(self, groups: list[tuple[str, list[Binding]]], keymap: dict[str, str], config_path: str):
        super().__init__()
        self.groups, self.keymap, self.config_path = groups, keymap, config_path

    def compose(self) -> ComposeResult:
        with Vertical(classes="dialog", id="help"):
            yield Label("Keys", classes="dialog-title")
            yield DataTable(cursor_type="row", zebra_stripes=True)
            yield Label(f"Remap keys in {self.config_path}, [keymap]: binding id = \"keys\". "
                        "Ctrl+P: command palette (themes too).", markup=False)

    def on_mount(self) -> None:
        table = self.query_one(DataTable)
        table.add_columns("Where", "Keys", "Does", "Binding id")
        for where, bindings in self.groups:
            for binding in bindings:
                table.add_row(where, self.keymap.get(binding.id, binding.key), binding.description, binding.id)
