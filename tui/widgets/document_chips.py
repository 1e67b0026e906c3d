"""Documents as chips, one line: "▤ report.pdf · 1.2k tokens". The ones attached to the next message (or the new
chat) can be taken off again: a click on its ✕, or Delete on a focused chip, which is shown selected (Backspace and
letters typed there go to the message box); a chat's and a message's are only shown."""

import asyncio

from textual.binding import Binding
from textual.containers import Container
from textual.message import Message as WidgetMessage
from textual.widgets import Static

from localchat.app.protocol.documents import Document
from localchat.tui.context_budget import tokens_text

NAME_LENGTH = 28  # of a chip's name; the whole name is its tooltip


def chip_text(document: Document) -> str:
    name = document.name if len(document.name) <= NAME_LENGTH else document.name[:NAME_LENGTH - 1] + "…"
    return f"▤ {name} · {tokens_text(document.tokens)} tokens" if document.tokens else f"▤ {name}"


def chip_tooltip(document: Document) -> str:
    pages = ", ".join(map(str, document.empty_pages))
    blank = f"; pages without text (scans?): {pages}" if pages else ""
    return f"{document.name}: {document.chars:,} characters, {document.tokens:,} tokens{blank}"


class DocumentChip(Static):
    def __init__(self, document: Document):
        super().__init__(chip_text(document), markup=False, classes="document-chip")
        self.document = document
        self.tooltip = chip_tooltip(document)


class AttachedChip(DocumentChip, can_focus=True):
    """A document the next message (or the new chat) will carry."""

    BINDINGS = [Binding("delete", "detach", "Take the document off", id="detach_document")]

    def __init__(self, document: Document):
        super().__init__(document)
        self.update(f"{chip_text(document)} ✕")

    def on_click(self) -> None:
        self.action_detach()

    def action_detach(self) -> None:
        self.post_message(AttachedDocuments.Detached(self.document))


class DocumentChips(Container):
    """A chat's or a message's documents (hidden where there are none), two a row (localchat.tcss)."""

    def __init__(self, documents: list[Document] = (), **kwargs):
        super().__init__(*map(self.chip, documents), **kwargs)
        self.documents = list(documents)
        self.display = bool(documents)
        self.replacing = asyncio.Lock()  # one show() at a time

    @staticmethod
    def chip(document: Document) -> DocumentChip:
        return DocumentChip(document)

    async def show(self, documents: list[Document]) -> None:
        async with self.replacing:
            if documents == self.documents:
                return
            self.documents = list(documents)
            await self.remove_children()
            await self.mount_all(map(self.chip, documents))
            self.display = bool(documents)


class AttachedDocuments(DocumentChips):
    """The documents attached to the next message (or the new chat), above the message box."""

    class Detached(WidgetMessage):
        def __init__(self, document: Document):
            super().__init__()
            self.document = document

    @staticmethod
    def chip(document: Document) -> DocumentChip:
        return AttachedChip(document)

    async def take_off(self, documents: list[Document]) -> None:
        """`documents` are no longer attached (sent with a message, or taken off)."""
        if documents:
            await self.show([document for document in self.documents if document not in documents])
