"""What the chat screen's parts may use of it: the chat session, the message box, the branch on screen, and what it
does for them: show the branch, open a chat, store the open one (a new chat is created by its first message or its
settings)."""

from collections.abc import Sequence
from typing import Protocol

from textual.widget import Widget

from localchat.app.protocol.conversations import Conversation
from localchat.tui.chat_session import ChatSession
from localchat.tui.widgets.composer import Composer
from localchat.tui.widgets.conversation_view import ConversationView


class ChatHost(Protocol):
    session: ChatSession  # the open chat, its messages and the branch on screen
    composer: Composer  # the message box
    view: ConversationView  # the branch on screen
    focused: Widget | None  # the widget with the focus on the screen (Textual's)

    async def show_branch(self) -> None:
        """Render the session's branch and its use of the model's context."""

    async def open_chat(self, conversation_id: str, message_id: str | None = None) -> None:
        """Open a stored chat (selected in the chat list), on the branch through `message_id` (then remembered as its
        active one), else on the one it showed last."""

    async def stored_chat(self, documents: Sequence[str] = ()) -> Conversation:
        """The open chat as stored: a new one is created (with `documents`, ids, to start with: its first message or
        its settings create it), one without messages given `documents` takes them on."""
