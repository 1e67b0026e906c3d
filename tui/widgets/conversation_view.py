"""The branch on screen: one ChatMessage per message of root..leaf. Showing another branch keeps the widgets
of the shared prefix and replaces only the rest, so a long chat is not rendered again per turn or per token."""

from textual.containers import VerticalScroll

from localchat.app.protocol.conversations import Message
from localchat.tui.message_tree import MessageTree
from localchat.tui.widgets.message_view import ChatMessage


class ConversationView(VerticalScroll, can_focus=False):
    @property
    def views(self) -> list[ChatMessage]:
        return list(self.query_children(ChatMessage))

    def view_of(self, message_id: str) -> ChatMessage | None:
        return next((view for view in self.views if view.message.id == message_id), None)

    async def show(self, branches: MessageTree, path: list[Message]) -> None:
        views = self.views
        shared = 0
        while shared < min(len(views), len(path)) and views[shared].message.id == path[shared].id:
            shared += 1
        if shared < len(views):
            await self.remove_children(views[shared:])
        if shared < len(path):
            await self.mount_all([ChatMessage(message) for message in path[shared:]])
        self.show_positions(branches)
        self.anchor()

    def show_positions(self, branches: MessageTree) -> None:
        for view in self.views:
            siblings = branches.siblings(view.message.id)
            view.show_position(siblings.index(view.message.id), len(siblings))
