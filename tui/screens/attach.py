"""Attach a document: a file's path, completed as it is typed (Tab completes the path as typed, → takes the completion
shown; the names that match are listed below), read by the engine into a document (POST /api/documents). The dialog
stays open on an error (no such file, too large, no text in it) and says what it was, whole."""

import asyncio
import os
from pathlib import Path

from textual import events, on
from textual.app import ComposeResult
from textual.binding import Binding
from textual.containers import Horizontal, Vertical
from textual.screen import ModalScreen
from textual.suggester import Suggester
from textual.widgets import Button, Input, Label, Static

from localchat.app.client.engine_client import EngineClient, EngineError
from localchat.app.protocol.documents import Document
from localchat.tui.engine_work import engine_work

MATCHES_SHOWN = 12


def typed_path(value: str) -> str:
    """The path a value names: where a path from the root or home was typed after the one the dialog started with
    ("~//tmp/notes.txt", "~/Documents/~/notes.txt"), that one, as a shell reads "~/" again."""
    for restart in ("//", "/~/"):
        at = value.rfind(restart)
        if at != -1:
            value = value[at + 1:]
    return value


def path_completions(value: str) -> list[str]:
    """`value` completed to each entry of its folder whose name begins with its last part (a folder ends with /),
    folders first; hidden entries only where that part begins with a dot."""
    typed = typed_path(value)
    return [value[: len(value) - len(typed)] + completion for completion in _completions(typed)]


def _completions(value: str) -> list[str]:
    head = value[:value.rfind("/") + 1]  # "~/Doc" -> "~/", "notes" -> ""
    prefix = value[len(head):]
    folder = Path(os.path.expanduser(head)) if head else Path.cwd()
    try:
        entries = [(entry.is_dir(), entry.name) for entry in os.scandir(folder)
                   if entry.name.startswith(prefix) and (prefix.startswith(".") or not entry.name.startswith("."))]
    except OSError:
        return []
    entries.sort(key=lambda entry: (not entry[0], entry[1].lower()))
    return [head + name + ("/" if is_dir else "") for is_dir, name in entries]


class PathSuggester(Suggester):
    def __init__(self):
        super().__init__(use_cache=False, case_sensitive=True)

    async def get_suggestion(self, value: str) -> str | None:
        completions = await asyncio.to_thread(path_completions, value)
        return completions[0] if completions else None


class PathInput(Input):
    """Tab completes the path as it is now (→ at the end of the text takes the completion shown): the completion is
    worked out when Tab is pressed, not taken from the suggester, which works in the background and may still be on
    the text before the last key."""

    BINDINGS = [Binding("tab", "complete", "Complete the path", show=False)]

    def __init__(self, value: str, **kwargs):
        super().__init__(value, **kwargs)
        self.prefilled = True  # the path the dialog started with, not yet edited

    async def _on_key(self, event: events.Key) -> None:
        """A "/" typed first, at the end of the path the dialog started with, starts a path from the root in its
        place (not "~//tmp")."""
        if self.prefilled and event.character == "/" and self.cursor_at_end:
            event.stop()
            event.prevent_default()
            self.value, self.prefilled = "/", False
            self.cursor_position = 1
            return
        if event.is_printable or event.key in ("backspace", "delete"):
            self.prefilled = False
        await super()._on_key(event)

    def action_complete(self) -> None:
        if self.cursor_at_end and (completions := path_completions(self.value)):
            self.value = completions[0]
            self.cursor_position = len(self.value)


class AttachScreen(ModalScreen[Document | None]):
    BINDINGS = [Binding("escape", "dismiss(None)", "Cancel", id="cancel")]

    def __init__(self, client: EngineClient, max_bytes: int, to: str, start: str = "~/"):
        """to: what the document goes with ("the next message", "the new chat"); start: the path typed first."""
        super().__init__()
        self.client, self.max_bytes, self.to, self.start = client, max_bytes, to, start
        self.folder = start  # where the next dialog starts: the folder of the file attached

    def compose(self) -> ComposeResult:
        with Vertical(classes="dialog", id="attach"):
            yield Label(f"Attach a document to {self.to}", classes="dialog-title", markup=False)
            yield PathInput(self.start, placeholder="a file: text, Markdown, source code, HTML or PDF",
                            suggester=PathSuggester(), id="document-path")
            yield Static(id="path-matches", markup=False)
            yield Label("", id="attach-status", markup=False)
            with Horizontal(classes="dialog-buttons"):
                yield Button("Cancel", id="cancel")
                yield Button("Attach", id="attach-file", variant="primary")

    @property
    def path_input(self) -> PathInput:
        return self.query_one(PathInput)

    def on_mount(self) -> None:
        self.path_input.focus()
        self.path_input.cursor_position = len(self.path_input.value)

    @on(Input.Changed)
    async def list_matches(self, event: Input.Changed) -> None:
        completions = await asyncio.to_thread(path_completions, event.value)
        if event.value != self.path_input.value:  # typed on meanwhile: a later call lists the matches
            return
        names = [completion.rstrip("/").rpartition("/")[2] + ("/" if completion.endswith("/") else "")
                 for completion in completions[:MATCHES_SHOWN]]
        more = f"  (+{len(completions) - MATCHES_SHOWN})" if len(completions) > MATCHES_SHOWN else ""
        self.query_one("#path-matches", Static).update("  ".join(names) + more)

    def on_input_submitted(self) -> None:
        self.attach()

    def on_button_pressed(self, event: Button.Pressed) -> None:
        if event.button.id == "attach-file":
            self.attach()
        else:
            self.dismiss(None)

    def say(self, text: str, error: bool = True) -> None:
        status = self.query_one("#attach-status", Label)
        status.set_class(error, "-error")
        status.update(text)

    def attach(self) -> None:
        typed = typed_path(self.path_input.value.strip())
        path = Path(typed).expanduser()
        if not typed:
            return
        if path.is_dir():  # a folder: go on into it
            self.path_input.value = typed.rstrip("/") + "/"
            self.path_input.cursor_position = len(self.path_input.value)
        elif not path.is_file():
            self.say(f"There is no file {typed}")
        elif path.stat().st_size > self.max_bytes:
            self.say(f"{path.name} has {path.stat().st_size:,} bytes: a document may have {self.max_bytes:,}")
        else:
            self.say(f"Reading {path.name}…", error=False)
            self.upload(path)

    @engine_work(exclusive=True)
    async def upload(self, path: Path) -> None:
        try:
            document = await self.client.upload_document(path)
        except EngineError as error:
            self.say(str(error))
        except OSError as error:
            self.say(f"Could not read {path}: {error.strerror}")
        else:
            typed = self.path_input.value.strip()
            self.folder = typed[:typed.rfind("/") + 1] or self.start
            self.dismiss(document)
