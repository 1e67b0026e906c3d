"""The chat screen's part for attaching documents: F3 attaches one (a file's path, completed as it is typed) to the
next message, or in a chat without messages to the chat (it starts with them: their KV blocks are shared by the chats
that start alike), shown as a chip above the message box until the message is sent (a click on its ✕, or Delete on
a selected chip, takes it off). A controller without a face, mounted in the chat screen: it tells the screen of a
document read (Attached), which the open chat's documents then include."""

from dataclasses import dataclass
from typing import TYPE_CHECKING

from textual.message import Message
from textual.widget import Widget

from localchat.app.client.engine_client import EngineClient
from localchat.app.protocol.documents import Document
from localchat.tui.engine_work import engine_work
from localchat.tui.screens.attach import AttachScreen
from localchat.tui.widgets.document_chips import AttachedDocuments

if TYPE_CHECKING:
    from localchat.tui.screens.chat import ChatScreen


class ChatDocuments(Widget):
    DEFAULT_CSS = "ChatDocuments { display: none; }"

    @dataclass
    class Attached(Message):
        """A document was read, for the next message (or the chat to start with)."""

        document: Document

    def __init__(self, client: EngineClient):
        super().__init__()
        self.client = client
        self.attach_from = "~/"  # the path the attach dialog starts from: the last one's folder

    @property
    def chat(self) -> "ChatScreen":
        return self.screen

    @property
    def chips(self) -> AttachedDocuments:
        return self.chat.query_one(AttachedDocuments)

    @property
    def starts_chat(self) -> bool:
        """The documents attached now will be the chat's own, which it starts with: it has no message yet."""
        return not self.chat.session.tree.messages

    @engine_work()
    async def attach(self) -> None:
        """A document for the next message (or, in a chat without messages, for the chat to start with)."""
        limits = await self.client.limits()
        if len(self.chips.documents) >= limits.max_documents:
            self.notify(f"A message carries at most {limits.max_documents} documents", severity="warning")
            return
        to = "the chat (it starts with it)" if self.starts_chat else "your next message"
        dialog = AttachScreen(self.client, limits.max_document_bytes, to, self.attach_from)
        document = await self.app.push_screen_wait(dialog)
        self.attach_from = dialog.folder
        if document is not None:
            self.post_message(self.Attached(document))
            await self.chips.show([*self.chips.documents, document])
            if document.empty_pages:
                pages = ", ".join(map(str, document.empty_pages))
                self.notify(f"{document.name}: pages {pages} hold no text (scanned images?); the rest was read",
                            severity="warning")
        self.chat.composer.focus()

    async def detach(self, documents: list[Document]) -> None:
        if documents:
            await self.chips.show([d for d in self.chips.documents if d not in documents])
