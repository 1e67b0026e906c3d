"""The chat screen's export (ctrl+o): the engine's Markdown of the branch on screen or JSON of the whole tree, with the
documents the chat and its messages carry (their names and text, which the engine's export leaves out), written where
the dialog says; the chat says where it went (the full path), or that nothing was written."""

import json

from textual.widget import Widget

from localchat.app.client.engine_client import EngineClient
from localchat.app.protocol.documents import DocumentText
from localchat.tui.chat.host import ChatHost
from localchat.tui.engine_work import engine_work
from localchat.tui.screens.export import ExportChoice, ExportScreen


def documents_markdown(documents: list[DocumentText]) -> str:
    """A section per document: its name, then its text in a fence longer than any run of backticks in it."""
    parts = ["## Documents", ""]
    for document in documents:
        fence = "`" * max(3, 1 + max((len(run) for run in document.text.split("\n") if set(run) == {"`"}), default=0))
        parts += [f"### {document.document.name}", "", fence, document.text, fence, ""]
    return "\n".join(parts)


def with_documents(text: str, format: str, documents: list[DocumentText]) -> str:
    """The engine's export and the documents: a section after the Markdown, or a "document_texts" list (id, name,
    text) in the JSON."""
    if not documents:
        return text
    if format == "markdown":
        return f"{text.rstrip()}\n\n{documents_markdown(documents)}"
    tree = json.loads(text)
    tree["document_texts"] = [{"id": d.document.id, "name": d.document.name, "text": d.text} for d in documents]
    return json.dumps(tree, ensure_ascii=False)


class ChatExport(Widget):
    DEFAULT_CSS = "ChatExport { display: none; }"

    def __init__(self, client: EngineClient, host: ChatHost):
        super().__init__()
        self.client, self.host = client, host

    def document_ids(self, format: str) -> list[str]:
        """The chat's documents, and those the messages carry: the branch's for Markdown, every one's for JSON."""
        session = self.host.session
        messages = session.path() if format == "markdown" else session.tree.messages.values()
        ids = [*session.conversation.documents, *(i for message in messages for i in message.documents)]
        return list(dict.fromkeys(ids))

    def ask(self) -> None:
        conversation = self.host.session.conversation
        if conversation is not None and self.host.session.tree.messages:
            documents = len(self.document_ids("json"))
            self.app.push_screen(ExportScreen(conversation.title, documents), self.write)

    @engine_work()
    async def write(self, choice: ExportChoice | None) -> None:
        if choice is None:
            self.notify("Export cancelled: nothing was written", title="Export")
            return
        conversation_id, leaf = self.host.session.conversation.id, self.host.session.leaf
        text = await self.client.export(conversation_id, choice.format,
                                        leaf=leaf if choice.format == "markdown" else None)
        documents = [await self.client.document_text(i) for i in self.document_ids(choice.format)]
        try:
            choice.path.write_text(with_documents(text, choice.format, documents))
        except OSError as error:
            self.notify(f"Could not write {choice.path}: {error.strerror}", title="Export", severity="error")
        else:
            self.notify(f"Exported to {choice.path}", title="Export", timeout=10)  # time to read the path
