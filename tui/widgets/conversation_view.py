"""The branch on screen: one ChatMessage per message of root..leaf. Showing another branch keeps the widgets
of the shared prefix and replaces only the rest, so a long chat is not rendered again per turn or per token. Where the
last reply's prompt was cut to fit the model's context, a divider stands before the first message it saw."""

import asyncio

from textual.containers import VerticalScroll
from textual.widgets import Static

from localchat.app.protocol.conversations import Message
from localchat.app.protocol.documents import Document
from localchat.tui.context_budget import CutShown
from localchat.tui.message_tree import MessageTree
from localchat.tui.widgets.message_view import ChatMessage


class CutMarker(Static):
    """"4 earlier messages left out — the model sees from here", before the message `cut.first_kept`."""

    def __init__(self, cut: CutShown):
        super().__init__(str(cut), markup=False)
        self.cut = cut


class ConversationView(VerticalScroll, can_focus=False):
    def __init__(self, **kwargs):
        super().__init__(**kwargs)
        self.placing_cut = asyncio.Lock()  # one show_cut() at a time: a reply ends while another branch is shown

    @property
    def views(self) -> list[ChatMessage]:
        return list(self.query_children(ChatMessage))

    def view_of(self, message_id: str) -> ChatMessage | None:
        return next((view for view in self.views if view.message.id == message_id), None)

    @property
    def cut_marker(self) -> CutMarker | None:
        return next(iter(self.query_children(CutMarker)), None)

    async def show(self, branches: MessageTree, path: list[Message], documents: dict[str, Document]) -> None:
        """documents: the ones the messages carry, by id (a message shows those it has). One call at a time (the
        chat screen's show_branch): a second would remove the messages the first is still mounting."""
        views = self.views
        shared = 0
        while shared < min(len(views), len(path)) and views[shared].message.id == path[shared].id:
            shared += 1
        if shared < len(views):
            await self.remove_children(views[shared:])
        if shared < len(path):
            await self.mount_all([ChatMessage(message, documents=documents) for message in path[shared:]])
        self.show_positions(branches)
        self.anchor()

    def show_positions(self, branches: MessageTree) -> None:
        for view in self.views:
            siblings = branches.siblings(view.message.id)
            view.show_position(siblings.index(view.message.id), len(siblings))

    async def show_cut(self, cut: CutShown | None) -> None:
        """The divider before the first message the last reply saw, where its prompt was cut (None: no divider)."""
        async with self.placing_cut:
            marker, first_kept = self.cut_marker, cut and self.view_of(cut.first_kept)
            if marker is not None and first_kept is not None and marker.cut == cut and self.after(marker) is first_kept:
                return
            if marker is not None:
                await marker.remove()
            if first_kept is not None:
                await self.mount(CutMarker(cut), before=first_kept)

    def after(self, widget) -> object | None:
        children = list(self.children)
        at = children.index(widget) + 1
        return children[at] if at < len(children) else None
