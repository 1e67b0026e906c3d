"""The chat screen's part for long chats: the header's gauge of the context the branch on screen uses, the warning
near its edge (once per chat) and the divider where the last prompt was cut; a new chat from a summary of this one
(F5, or a click on the warning), and the links between a chat and those begun from its summary (ctrl+l, or a click)."""

from textual.widget import Widget

from localchat.app.client.engine_client import EngineClient
from localchat.app.protocol.conversations import Conversation, ConversationTree
from localchat.app.protocol.documents import Document
from localchat.tui.chat.host import ChatHost
from localchat.tui.chat.keys import key_of
from localchat.tui.chat.news import ChatsChanged
from localchat.tui.context_budget import branch_use, gauge_text, last_cut, near_limit
from localchat.tui.engine_work import engine_work
from localchat.tui.widgets.chat_links import ChatLink, ChatLinks
from localchat.tui.widgets.context_gauge import ContextGauge


class LongChats(Widget):
    DEFAULT_CSS = "LongChats { display: none; }"

    def __init__(self, client: EngineClient, host: ChatHost, gauge: ContextGauge, links: ChatLinks):
        """gauge: the header's, of the context; links: those above the chat, to where it comes from and goes on."""
        super().__init__()
        self.client, self.host, self.gauge, self.links = client, host, gauge, links
        self.context_limit: int | None = None  # the model's context (None: not known yet, or a remote engine's)
        self.warned_near_limit: set[str] = set()  # the chats whose use of the context was said to be near its edge
        self.summarizing = False  # a summary is being written, for a new chat to start from
        self.summaries: list[str] = []  # the open chat's: the chats started from a summary of it
        self.chat_titles: dict[str, str] = {}  # every chat's, as the chat list last showed them

    def opened(self, tree: ConversationTree | None) -> None:
        """A chat was opened (None: a new one): the chats begun from its summary, the model's context as it says."""
        self.summaries = tree.summaries if tree is not None else []
        if tree is not None and tree.context is not None:
            self.context_limit = tree.context.limit

    def listed(self, conversations: list[Conversation]) -> None:
        """The chats as the chat list shows them now (the links name them)."""
        self.chat_titles = {conversation.id: conversation.title for conversation in conversations}

    def know_limit(self, limit: int | None) -> None:
        """The model's context, as a reply's stats say it (None: they do not say; what was known stays)."""
        if limit is not None:
            self.context_limit = limit

    async def show_context(self, documents: list[Document]) -> None:
        """The gauge of the use of the context by the branch on screen (none in a new chat; documents: the chat's
        own, which it starts with), a warning near its edge (once per chat), and the divider where its last prompt
        was cut."""
        conversation, path = self.host.session.conversation, self.host.session.path()
        use = branch_use(path, self.context_limit, sum(document.tokens for document in documents))
        self.gauge.show(use, key_of(self.app, "summarize"))
        if use is not None and near_limit(use) and conversation.id not in self.warned_near_limit:
            self.warned_near_limit.add(conversation.id)
            edge = ("sending is refused (its context overflow setting is stop)"
                    if conversation.settings.context_overflow == "stop" else "earlier messages are left out")
            self.notify(f"This chat uses {gauge_text(use)} of the model's context; past its edge {edge}. "
                        f"{key_of(self.app, 'summarize')} starts a new chat from a summary of it.", title="Context")
        await self.host.view.show_cut(last_cut(path))

    def ask_summary(self, writing: bool) -> None:
        """writing: a reply is being written (the chat is summarized once it is)."""
        session = self.host.session
        if session.conversation is None or not session.path():
            self.notify("This chat has no messages to summarize yet", severity="warning")
        elif self.summarizing:
            self.notify("A summary is being written", severity="warning")
        elif writing:
            self.notify("A reply is being written; esc stops it, then the chat can be summarized", severity="warning")
        else:
            self.summarize()

    @engine_work(group="summary")
    async def summarize(self) -> None:
        """A new chat from the model's summary of the branch on screen: opened once written, if this chat is still
        the one shown."""
        session = self.host.session
        conversation, leaf = session.conversation, session.leaf
        self.summarizing = True
        self.gauge.summarizing(True)
        self.notify(f"Writing a summary of “{conversation.title}” for a new chat to start from…", title="Summary")
        try:
            continued = await self.client.summarize(conversation.id, leaf=leaf)
        finally:
            self.summarizing = False
            self.gauge.summarizing(False)
        if session.conversation is not None and session.conversation.id == conversation.id:
            await self.host.open_chat(continued.id)
            self.host.composer.focus()
            self.notify(f"This new chat goes on from a summary of “{conversation.title}”", title="Summary")
        else:
            self.notify(f"“{continued.title}” is ready in the chat list", title="Summary")
        self.post_message(ChatsChanged())

    async def show_links(self) -> None:
        conversation = self.host.session.conversation
        links = []
        if conversation is not None and conversation.summary_of is not None:
            links.append(ChatLink(conversation.summary_of, self.chat_titles.get(conversation.summary_of), False))
        if conversation is not None:
            links += [ChatLink(i, self.chat_titles.get(i), True) for i in self.summaries]
        await self.links.show(links, key_of(self.app, "open_linked_chat"))

    @engine_work(group="chats")
    async def open_linked(self, conversation_id: str | None = None) -> None:
        """The chat a link points to (None: the one the key opens, the newest continuation, else the origin)."""
        if conversation_id is None and (target := self.links.target) is not None:
            conversation_id = target.conversation_id
        if conversation_id is None:
            self.notify("This chat is not linked to another by a summary", severity="warning")
            return
        await self.host.open_chat(conversation_id)
        self.host.composer.focus()
