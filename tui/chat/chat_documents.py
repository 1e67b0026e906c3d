"""The chat screen's part for documents: F3 attaches one (a file's path, completed as it is typed) to the next message,
or in a chat without messages to the chat (it starts with them: their KV blocks are shared by the chats that start
alike), shown as a chip above the message box until the message is sent (a click on its ✕, or Delete on a selected
chip, takes it off); and the documents the open chat and its messages carry, which the screen shows."""

from textual.widget import Widget

from localchat.app.client.engine_client import EngineClient
from localchat.app.protocol.conversations import ConversationTree
from localchat.app.protocol.documents import Document
from localchat.tui.chat.host import ChatHost
from localchat.tui.engine_work import engine_work
from localchat.tui.screens.attach import AttachScreen
from localchat.tui.widgets.document_chips import AttachedDocuments


class ChatDocuments(Widget):
    DEFAULT_CSS = "ChatDocuments { display: none; }"

    def __init__(self, client: EngineClient, host: ChatHost, attached: AttachedDocuments):
        """attached: the chips of the documents attached to the next message, above the message box."""
        super().__init__()
        self.client, self.host, self.chips = client, host, attached
        self.known: dict[str, Document] = {}  # the documents the open chat and its messages carry, by id
        self.attach_from = "~/"  # the path the attach dialog starts from: the last one's folder

    @property
    def starts_chat(self) -> bool:
        """The documents attached now will be the chat's own, which it starts with: it has no message yet."""
        return not self.host.session.tree.messages

    def opened(self, tree: ConversationTree) -> None:
        """A chat was opened: the documents it and its messages carry (and those attached, still to be sent)."""
        self.known = {document.id: document for document in [*self.chips.documents, *tree.documents]}

    def of_chat(self) -> list[Document]:
        """The open chat's own documents (which it starts with)."""
        conversation = self.host.session.conversation
        return [self.known[i] for i in conversation.documents if i in self.known] if conversation else []

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
            self.known[document.id] = document
            await self.chips.show([*self.chips.documents, document])
            if document.empty_pages:
                pages = ", ".join(map(str, document.empty_pages))
                self.notify(f"{document.name}: pages {pages} hold no text (scanned images?); the rest was read",
                            severity="warning")
        self.host.composer.focus()
