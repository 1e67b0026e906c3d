"""The chat screen's part for the open chat's record in the engine: its title (F2 renames it), its pin (F9: its
history's KV blocks are evicted last, within the pin budget) and its deletion (F8, once confirmed: the screen then
shows a new chat, Deleted). Each changes the session's chat as stored, and the chat list is read again."""

from textual.message import Message
from textual.widget import Widget

from localchat.app.client.engine_client import EngineClient, EngineError
from localchat.tui.chat.host import ChatHost
from localchat.tui.chat.news import ChatsChanged
from localchat.tui.engine_work import engine_work
from localchat.tui.screens.confirm import ConfirmScreen
from localchat.tui.screens.prompt import PromptScreen


class ChatRecord(Widget):
    DEFAULT_CSS = "ChatRecord { display: none; }"

    class Deleted(Message):
        """The open chat was deleted: a new one takes its place."""

    def __init__(self, client: EngineClient, host: ChatHost):
        super().__init__()
        self.client, self.host = client, host

    def ask_rename(self) -> None:
        if (conversation := self.host.session.conversation) is not None:
            self.app.push_screen(PromptScreen("Rename the chat", conversation.title), self.rename)

    @engine_work()
    async def rename(self, title: str | None) -> None:
        if title:
            self.host.session.update(await self.client.rename(self.host.session.conversation.id, title.strip()))
            self.post_message(ChatsChanged())

    def ask_delete(self) -> None:
        if (conversation := self.host.session.conversation) is not None:
            self.app.push_screen(ConfirmScreen(f"Delete “{conversation.title}” and all its branches?", yes="Delete"),
                                 self.delete)

    @engine_work()
    async def delete(self, confirmed: bool) -> None:
        if confirmed:
            conversation = self.host.session.conversation
            await self.client.delete_conversation(conversation.id)
            self.notify(f"Deleted “{conversation.title}”")
            self.post_message(self.Deleted())
            self.post_message(ChatsChanged())

    @engine_work()
    async def pin(self) -> None:
        """Pin the open chat, or unpin it."""
        conversation = self.host.session.conversation
        if conversation is None:
            self.notify("Write a message first: a new chat has nothing to keep warm", severity="warning")
            return
        try:
            changed = await (self.client.unpin if conversation.pinned else self.client.pin)(conversation.id)
        except EngineError as error:
            self.notify(str(error), title="Not pinned", severity="warning")
            return
        self.host.session.update(changed)
        self.notify("Pinned: this chat stays warm" if changed.pinned else "Unpinned: this chat ages as the others")
        self.post_message(ChatsChanged())
