"""The chat screen's part for documents: F3 attaches one (a file's path, completed as it is typed) to the next
message, or in a chat without messages to the chat (it starts with them: their KV blocks are shared by the chats that
start alike), shown as a chip above the message box until the message is sent (a click or Delete on a chip takes it
off); a chat's and a message's documents are shown with them."""

from localchat.app.protocol.documents import Document
from localchat.tui.engine_work import engine_work
from localchat.tui.screens.attach import AttachScreen
from localchat.tui.widgets.document_chips import AttachedDocuments


class ChatDocuments:
    """A mixin of ChatScreen (its session, client and composer)."""

    def __init__(self, *args, **kwargs):
        super().__init__(*args, **kwargs)
        self.documents: dict[str, Document] = {}  # the documents the open chat and its messages carry, by id
        self.attach_from = "~/"  # the path the attach dialog starts from: the last one's folder

    @property
    def attached(self) -> AttachedDocuments:
        return self.query_one(AttachedDocuments)

    def action_attach_document(self) -> None:
        self.attach_document()

    @engine_work()
    async def attach_document(self) -> None:
        """A document for the next message (or, in a chat without messages, for the chat to start with)."""
        limits = await self.client.limits()
        if len(self.attached.documents) >= limits.max_documents:
            self.notify(f"A message carries at most {limits.max_documents} documents", severity="warning")
            return
        to = "the chat (it starts with it)" if self.starts_chat else "your next message"
        dialog = AttachScreen(self.client, limits.max_document_bytes, to, self.attach_from)
        document = await self.app.push_screen_wait(dialog)
        self.attach_from = dialog.folder
        if document is not None:
            self.documents[document.id] = document
            await self.attached.show([*self.attached.documents, document])
            if document.empty_pages:
                pages = ", ".join(map(str, document.empty_pages))
                self.notify(f"{document.name}: pages {pages} hold no text (scanned images?); the rest was read",
                            severity="warning")
        self.composer.focus()

    @property
    def starts_chat(self) -> bool:
        """The documents attached now will be the chat's own, which it starts with: it has no message yet."""
        return not self.session.tree.messages

    async def on_attached_documents_detached(self, event: AttachedDocuments.Detached) -> None:
        await self.detach([event.document])
        self.composer.focus()

    async def detach(self, documents: list[Document]) -> None:
        if documents:
            await self.attached.show([d for d in self.attached.documents if d not in documents])
