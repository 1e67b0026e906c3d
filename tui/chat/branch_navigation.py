"""The chat screen's moves between branches: a message's previous or next sibling (←/→ on it, a click on ‹ ›), the
outline of every branch (ctrl+t), and a search hit, which may be on another branch than the one its chat was on: a
notice above the chat says which ("branch 2 of 3"), and a key (or a click on it) goes back to where the chat was."""

from dataclasses import dataclass

from textual.widget import Widget

from localchat.app.client.engine_client import EngineClient
from localchat.app.markdown import message_markdown
from localchat.app.protocol.conversations import SearchHit
from localchat.tui.chat.host import ChatHost
from localchat.tui.chat.keys import key_of
from localchat.tui.engine_work import engine_work
from localchat.tui.screens.branch_tree import BranchTreeScreen
from localchat.tui.screens.search import SearchScreen
from localchat.tui.widgets.branch_notice import BranchNotice

FORK_WORDS = 24  # characters of the message the branches follow, in the notice: one line at 80 columns


@dataclass(frozen=True)
class Place:
    """Where the chat was before a search hit moved it: which chat, on the branch that ends at `leaf`."""

    conversation_id: str
    leaf: str | None


class BranchNavigation(Widget):
    DEFAULT_CSS = "BranchNavigation { display: none; }"

    def __init__(self, client: EngineClient, host: ChatHost, notice: BranchNotice):
        """notice: the line above the chat that says on which branch a search hit is."""
        super().__init__()
        self.client, self.host, self.notice = client, host, notice
        self.back_to: Place | None = None  # while a search hit is shown on another branch

    @engine_work(group="branch")
    async def switch(self, message_id: str, delta: int) -> None:
        """The message's previous (-1) or next (1) sibling, and its branch."""
        if (sibling := self.host.session.step_sibling(message_id, delta)) is not None:
            await self.show_picked(sibling)

    def show_tree(self) -> None:
        session = self.host.session
        if session.conversation is not None and session.tree.messages:
            path = [message.id for message in session.path()]
            self.app.push_screen(BranchTreeScreen(session.conversation.title, session.tree, path), self.pick)

    @engine_work(group="branch")
    async def pick(self, message_id: str | None) -> None:
        if message_id is not None:
            self.host.session.pick(message_id)
            await self.show_picked(message_id)

    async def show_picked(self, message_id: str) -> None:
        """The branch through `message_id`, just picked: shown, the message focused, remembered as the active one."""
        host = self.host
        self.forget_back()
        await host.show_branch()
        if (view := host.view.view_of(message_id)) is not None:
            view.focus()
        await self.client.update_conversation(host.session.conversation.id, active_leaf=host.session.leaf)

    def search(self) -> None:
        self.app.push_screen(SearchScreen(self.client), self.open_hit)

    @engine_work(group="chats")
    async def open_hit(self, hit: SearchHit | None) -> None:
        """The hit's chat, on the branch through it, the hit scrolled into view. Where that is another branch than the
        one the chat was on, the notice says which, until the user goes back (or moves on)."""
        if hit is None:
            return
        host = self.host
        tree = await self.client.conversation(hit.conversation_id)
        shown = host.session.conversation
        was = Place(hit.conversation_id, host.session.leaf if shown is not None and shown.id == hit.conversation_id
                    else tree.conversation.active_leaf)
        await host.open_chat(hit.conversation_id, message_id=hit.message_id)
        branches = host.session.tree
        fork = branches.fork_from(hit.message_id, branches.shown_leaf(was.leaf)) if was.leaf else None
        if fork is not None:
            self.back_to = was
            parent = branches.messages[fork].parent_id
            words = " ".join(message_markdown(branches.messages[parent]).split()) if parent else "the start"
            words = words if len(words) <= FORK_WORDS else words[:FORK_WORDS - 1] + "…"
            self.notice.show(branches.place(fork), words, key_of(self.app, "back_from_hit"))
            self.refresh_bindings()
        if (view := host.view.view_of(hit.message_id)) is not None:
            view.scroll_visible(top=True)
        host.composer.focus()  # the hit is shown; typing goes on in the message box

    @engine_work(group="chats")
    async def go_back(self) -> None:
        """The branch the chat was on before the search hit."""
        place = self.back_to
        if place is None:
            return
        self.forget_back()
        await self.host.open_chat(place.conversation_id, message_id=place.leaf)
        self.notify("Back on the branch you were on", title="Search")
        self.host.composer.focus()

    def forget_back(self) -> None:
        """The user moved on (another branch, another chat): no way back to offer."""
        if self.back_to is not None:
            self.back_to = None
            self.notice.hide()
            self.refresh_bindings()
