"""The sidebar: conversations, newest activity first, each with where its history is (its warmth: warm, on disk or
cold, and about how long its next reply waits for it) and whether it is pinned (kept warm)."""

from textual.containers import Vertical
from textual.message import Message
from textual.widgets import Label, ListItem, ListView

from localchat.app.protocol.conversations import Conversation

# a chat's warmth at a glance, before the engine's words for it ("warm · instant", "cold · about 4 s")
WARMTH_GLYPHS = {"resident": "●", "on_disk": "◐", "cold": "○"}
PINNED = "◆ pinned"


def warmth_line(conversation: Conversation) -> str:
    """"● warm · instant · ◆ pinned"; "" where the engine says nothing of it (a new chat, a remote engine)."""
    warmth = conversation.warmth
    line = f"{WARMTH_GLYPHS[warmth.state]} {warmth.summary}" if warmth is not None else ""
    return " · ".join(part for part in (line, PINNED if conversation.pinned else "") if part)


class ChatItem(ListItem):
    def __init__(self, conversation: Conversation):
        warmth = warmth_line(conversation)
        lines = [Label(conversation.title, markup=False, classes="chat-title")]
        if warmth:
            lines.append(Label(warmth, markup=False, classes="chat-warmth"))
        super().__init__(Vertical(*lines))
        self.conversation = conversation


class ChatList(ListView):
    class Opened(Message):
        def __init__(self, conversation: Conversation):
            super().__init__()
            self.conversation = conversation

    async def show(self, conversations: list[Conversation], current: str | None) -> None:
        await self.clear()
        await self.extend(ChatItem(conversation) for conversation in conversations)
        self.select(current)

    def select(self, conversation_id: str | None) -> None:
        """Highlight the chat (None, or one the list does not show yet: none)."""
        ids = [item.conversation.id for item in self.query_children(ChatItem)]
        self.index = ids.index(conversation_id) if conversation_id in ids else None

    def on_list_view_selected(self, event: ListView.Selected) -> None:
        event.stop()
        self.post_message(self.Opened(event.item.conversation))
