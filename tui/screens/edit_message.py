"""Edit one of your messages and send it again (a new branch beside the old one), or a reply and save it (a new
branch to go on from): the message box's keys, shown in the dialog: Enter sends (saves), Shift+Enter or Ctrl+J starts
a new line, Escape cancels. The cursor starts at the end."""

from textual.app import ComposeResult
from textual.binding import Binding
from textual.containers import Horizontal, Vertical
from textual.screen import ModalScreen
from textual.widgets import Button, Label

from localchat.tui.widgets.composer import MessageBox

KEYS = "enter {} · shift+enter or ctrl+j: new line · esc cancels"


class EditMessageScreen(ModalScreen[str | None]):
    """Dismissed with the edited text (None: cancelled, or nothing changed)."""

    BINDINGS = [Binding("escape", "dismiss(None)", "Cancel", id="cancel")]

    def __init__(self, text: str, reply: bool = False):
        """reply: the text is a reply's, saved as the user wrote it (no reply follows); else yours, sent again."""
        super().__init__()
        self.original, self.reply = text, reply

    def compose(self) -> ComposeResult:
        with Vertical(classes="dialog", id="edit-message"):
            title = "Edit the reply (a new branch to go on from)" if self.reply else "Edit and resend (a new branch)"
            yield Label(title, classes="dialog-title")
            yield MessageBox(self.original, id="edit-text")
            yield Label(KEYS.format("saves" if self.reply else "sends"), id="edit-keys", markup=False)
            with Horizontal(classes="dialog-buttons"):
                yield Button("Cancel", id="cancel")
                yield Button("Save" if self.reply else "Send", id="send", variant="primary")

    @property
    def box(self) -> MessageBox:
        return self.query_one(MessageBox)

    def on_mount(self) -> None:
        self.box.focus()
        self.box.move_cursor(self.box.document.end)

    def on_message_box_submitted(self, event: MessageBox.Submitted) -> None:
        event.stop()
        self.send()

    def on_button_pressed(self, event: Button.Pressed) -> None:
        if event.button.id == "send":
            self.send()
        else:
            self.dismiss(None)

    def send(self) -> None:
        """The edited text; unchanged (or emptied), nothing to send: the dialog stays until changed or cancelled."""
        text = self.box.text.strip()
        if not text:
            self.notify("An empty message cannot be sent; esc cancels", severity="warning")
        elif text == self.original.strip():
            self.notify("The message is unchanged; edit it, or esc cancels", severity="warning")
        else:
            self.dismiss(text)
