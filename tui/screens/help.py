"""The keys, with the binding ids that `[keymap]` in tui.toml remaps: every column whole at 80 columns, the description
wrapping in what the others leave."""

from textual.app import ComposeResult
from textual.binding import Binding
from textual.containers import Vertical
from textual.screen import ModalScreen
from textual.widgets import DataTable, Label

HEADER = ("Where", "Keys", "Does", "Binding id")
MIN_DOES = 16  # columns for a key's description, below which the table scrolls sideways instead
MAX_WIDTH, FRAME = 100, 6  # the dialog's widest (localchat.tcss #help), and its border, padding and scroll bar


class KeyTable(DataTable):
    """The list of keys; Home and End go to its first and last row."""

    BINDINGS = [Binding("home", "first_row", show=False), Binding("end", "last_row", show=False)]

    def action_first_row(self) -> None:
        self.move_cursor(row=0)

    def action_last_row(self) -> None:
        self.move_cursor(row=self.row_count - 1)


class HelpScreen(ModalScreen[None]):
    BINDINGS = [Binding("escape,f1,q", "dismiss", "Close", id="cancel")]

    def __init__(self, groups: list[tuple[str, list[Binding]]], keymap: dict[str, str], config_path: str):
        super().__init__()
        self.groups, self.keymap, self.config_path = groups, keymap, config_path

    def compose(self) -> ComposeResult:
        with Vertical(classes="dialog", id="help"):
            yield Label("Keys", classes="dialog-title")
            yield KeyTable(cursor_type="row", zebra_stripes=True)
            yield Label("Typing goes to the message box wherever the focus is: Enter sends, Shift+Enter or Ctrl+J "
                        "starts a new line. ↑ there focuses the last message; a message's keys act on it.",
                        markup=False)
            yield Label(f"Remap keys in {self.config_path} ([keymap], binding id = \"keys\"). Ctrl+P: all commands, "
                        "themes.", markup=False)

    def on_mount(self) -> None:
        table = self.query_one(DataTable)
        rows = [(where, self.keymap.get(binding.id, binding.key), binding.tooltip or binding.description,
                 binding.id or "") for where, bindings in self.groups for binding in bindings]
        widths = [max(len(row[i]) for row in [HEADER, *rows]) for i in range(len(HEADER))]
        # the description takes what the others leave of the dialog (its frame, the scroll bar, a column of padding
        # each side of a cell), at least MIN_DOES
        room = min(self.app.size.width, MAX_WIDTH) - FRAME - 2 * len(HEADER)
        widths[2] = max(MIN_DOES, room - sum(widths) + widths[2])
        for label, width in zip(HEADER, widths, strict=True):
            table.add_column(label, width=width)
        for row in rows:
            table.add_row(*row, height=None)  # a long description wraps
