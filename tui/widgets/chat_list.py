"""The sidebar: conversations, newest activity first."""

from textual.message import Message
from textual.widgets import Label, ListItem, ListView

from localchat.app.protocol.conversations import Conversation


class ChatItem(ListItem):
    def __init__(self, conversation: Conversation):
        super().__init__(Label(conversation.title, markup=False))
        self.conversation = conversation


class ChatList(ListView):
    class Opened(Message):
        def __init__(self, conversation: Conversation):
            super().__init__()
            self.conversation = conversation

    async def show(self, conversations: list[Conversation], current: str | None) -> None:
        await self.clear()
        await self.extend(ChatItem(conversation) for conversation in conversations)
        ids = [conversation.id for conversation in conversations]
        self.index = ids.index(current) if current in ids else None

    def on_list_view_selected(self, event: ListView.Selected) -> None:
        event.stop()
        self.post_message(self.Opened(event.item.conversation))
