"""Where to export a chat, and as what: Markdown (the branch on screen) or JSON (the whole tree), with its documents."""

import re
from dataclasses import dataclass
from pathlib import Path

import platformdirs
from textual.app import ComposeResult
from textual.binding import Binding
from textual.containers import Horizontal, Vertical
from textual.screen import ModalScreen
from textual.widgets import Button, Input, Label, RadioButton, RadioSet

EXTENSIONS = {"markdown": ".md", "json": ".json"}


@dataclass
class ExportChoice:
    format: str  # "markdown" or "json"
    path: Path


def export_folder() -> Path:
    """The user's downloads folder, else documents folder, else home (never the current folder: with ./dev that is
    the source checkout)."""
    for folder in (platformdirs.user_downloads_path(), platformdirs.user_documents_path()):
        if folder.is_dir():
            return folder
    return Path.home()


def folder_note(folder: Path) -> str:
    """Where the file goes, said in the dialog: the home folder is the last resort, and a surprise without a word."""
    if folder == Path.home():
        return f"No Downloads or Documents folder: the file goes to your home folder, {folder}."
    return f"Into {folder}; edit the path to write it elsewhere."


def default_path(title: str, format: str) -> Path:
    name = re.sub(r"[^A-Za-z0-9._-]+", "-", title).strip(".-")[:60] or "chat"
    return export_folder() / f"{name}{EXTENSIONS[format]}"


class ExportScreen(ModalScreen[ExportChoice | None]):
    """Enter in the path, or on Export, exports; the buttons as in the other dialogs, Cancel then Export. The chat
    screen says where the file went, or that nothing was written."""

    BINDINGS = [Binding("escape", "dismiss(None)", "Cancel", id="cancel")]

    def __init__(self, title: str, documents: int = 0):
        """documents: how many the chat and its messages carry (the export holds them)."""
        super().__init__()
        self.chat_title, self.documents = title, documents

    def compose(self) -> ComposeResult:
        with Vertical(classes="dialog"):
            yield Label("Export the chat", classes="dialog-title")
            with RadioSet(id="format"):
                yield RadioButton("Markdown (this branch)", value=True, id="markdown")
                yield RadioButton("JSON (every branch)", id="json")
            yield Input(str(default_path(self.chat_title, "markdown")), id="path")
            yield Label(folder_note(export_folder()), id="export-folder", markup=False)
            if self.documents:
                held = "its document" if self.documents == 1 else f"its {self.documents} documents"
                yield Label(f"With {held} (name and text) at the end.", id="export-documents", markup=False)
            with Horizontal(classes="dialog-buttons"):
                yield Button("Cancel", id="cancel")
                yield Button("Export", id="export", variant="primary")

    def on_mount(self) -> None:
        self.query_one("#path", Input).focus()

    @property
    def format(self) -> str:
        return self.query_one(RadioSet).pressed_button.id

    def on_radio_set_changed(self) -> None:
        path = self.query_one("#path", Input)
        path.value = str(Path(path.value).with_suffix(EXTENSIONS[self.format]))

    def on_input_submitted(self) -> None:
        self.export()

    def on_button_pressed(self, event: Button.Pressed) -> None:
        if event.button.id == "export":
            self.export()
        else:
            self.dismiss(None)

    def export(self) -> None:
        path = self.query_one("#path", Input).value.strip()
        if path:
            self.dismiss(ExportChoice(self.format, Path(path).expanduser().absolute()))
