"""The chat screen's part for long chats: the header's gauge of the context the branch on screen uses, the warning
near its edge (once per chat) and the divider where the last prompt was cut; a new chat from a summary of this one
(F5, or a click on the warning), and the links between a chat and those begun from its summary (ctrl+l, or a click).
A controller without a face, mounted in the chat screen (no longer a mixin of it)."""

from typing import TYPE_CHECKING

from textual.widget import Widget

from localchat.app.client.engine_client import EngineClient
from localchat.app.protocol.conversations import Conversation, Message
from localchat.tui.context_budget import branch_use, gauge_text, last_cut, near_limit
from localchat.tui.engine_work import engine_work
from localchat.tui.widgets.chat_links import ChatLink, ChatLinks
from localchat.tui.widgets.chat_list import ChatList
from localchat.tui.widgets.context_gauge import ContextGauge

if TYPE_CHECKING:
    from localchat.tui.screens.chat import ChatScreen


class LongChats(Widget):
    DEFAULT_CSS = "LongChats { display: none; }"

    def __init__(self, client: EngineClient):
        super().__init__()
        self.client = client
        self.context_limit: int | None = None  # the model's context (None: not known yet, or a remote engine's)
        self.warned_near_limit: set[str] = set()  # the chats whose use of the context was said to be near its edge
        self.summarizing = False  # a summary is being written, for a new chat to start from
        self.summaries: list[str] = []  # the open chat's: the chats started from a summary of it
        self.chat_titles: dict[str, str] = {}  # every chat's, as the chat list last showed them

    @property
    def chat(self) -> "ChatScreen":
        return self.screen

    @property
    def gauge(self) -> ContextGauge:
        return self.chat.query_one(ContextGauge)

    async def show_context(self, conversation: Conversation | None, path: list[Message]) -> None:
        """The gauge of the use of the context by a chat's branch (`path`; conversation None: a new chat), a warning
        near its edge (once per chat), and the divider where its last prompt was cut."""
        known = self.chat.documents
        documents = [known[i] for i in conversation.documents if i in known] if conversation else []
        use = branch_use(path, self.context_limit, sum(document.tokens for document in documents))
        self.gauge.show(use, self.chat.key_of("summarize"))
        if use is not None and near_limit(use) and conversation.id not in self.warned_near_limit:
            self.warned_near_limit.add(conversation.id)
            edge = ("sending is refused (its context overflow setting is stop)"
                    if conversation.settings.context_overflow == "stop" else "earlier messages are left out")
            self.notify(f"This chat uses {gauge_text(use)} of the model's context; past its edge {edge}. "
                        f"{self.chat.key_of('summarize')} starts a new chat from a summary of it.", title="Context")
        await self.chat.view.show_cut(last_cut(path))

    def ask_summary(self) -> None:
        session = self.chat.session
        if session.conversation is None or not session.path():
            self.notify("This chat has no messages to summarize yet", severity="warning")
        elif self.summarizing:
            self.notify("A summary is being written", severity="warning")
        elif self.chat.writing:
            self.notify("A reply is being written; esc stops it, then the chat can be summarized", severity="warning")
        else:
            self.summarize()

    @engine_work(group="summary")
    async def summarize(self) -> None:
        """A new chat from the model's summary of the branch on screen: opened once written, if this chat is still
        the one shown."""
        chat = self.chat
        conversation, leaf = chat.session.conversation, chat.session.leaf
        self.summarizing = True
        self.gauge.summarizing(True)
        self.notify(f"Writing a summary of “{conversation.title}” for a new chat to start from…", title="Summary")
        try:
            continued = await self.client.summarize(conversation.id, leaf=leaf)
        finally:
            self.summarizing = False
            self.gauge.summarizing(False)
        if chat.session.conversation is not None and chat.session.conversation.id == conversation.id:
            await chat.open(continued.id)
            chat.composer.focus()
            self.notify(f"This new chat goes on from a summary of “{conversation.title}”", title="Summary")
        else:
            self.notify(f"“{continued.title}” is ready in the chat list", title="Summary")
        chat.load_chats()

    async def show_links(self) -> None:
        conversation = self.chat.session.conversation
        links = []
        if conversation is not None and conversation.summary_of is not None:
            links.append(ChatLink(conversation.summary_of, self.chat_titles.get(conversation.summary_of), False))
        if conversation is not None:
            links += [ChatLink(i, self.chat_titles.get(i), True) for i in self.summaries]
        await self.chat.query_one(ChatLinks).show(links, self.chat.key_of("open_linked_chat"))

    def open_linked(self) -> None:
        if (target := self.chat.query_one(ChatLinks).target) is not None:
            self.open_chat(target.conversation_id)
        else:
            self.notify("This chat is not linked to another by a summary", severity="warning")

    @engine_work(group="chats")
    async def open_chat(self, conversation_id: str) -> None:
        chat = self.chat
        await chat.open(conversation_id)
        await chat.query_one(ChatList).show(await self.client.list_conversations(), conversation_id)
        chat.composer.focus()
