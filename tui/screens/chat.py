"""The main screen: the chat list, the branch on screen, and the message box. It renders a chat session
(tui/chat_session.py: the open chat, its tree, the branch shown) and routes keys and typed messages to its parts, each
with one job: the engine's model (model_control.py), writing replies (reply_writer.py), attaching documents
(chat_documents.py), the actions on a message (message_actions.py), moving between branches and search hits
(branch_navigation.py), the export (chat_export.py), and long chats (long_chats.py: the context gauge, the cut, the
summary and its links). The typing surface belongs to the user: text typed anywhere goes to the message box."""

import asyncio

import httpx
from textual import events, work
from textual.app import ComposeResult
from textual.binding import Binding
from textual.containers import Horizontal, Vertical
from textual.screen import Screen
from textual.widgets import Input, Static, TextArea

from localchat.app.client.engine_client import EngineClient, EngineError
from localchat.app.protocol.conversations import Conversation, SearchHit
from localchat.app.protocol.documents import Document
from localchat.tui.chat_session import (
    ChatSession,
)
from localchat.tui.engine_work import engine_work
from localchat.tui.screens.branch_navigation import BranchNavigation
from localchat.tui.screens.chat_documents import ChatDocuments
from localchat.tui.screens.chat_export import ChatExport
from localchat.tui.screens.confirm import ConfirmScreen
from localchat.tui.screens.export import ExportChoice
from localchat.tui.screens.long_chats import LongChats
from localchat.tui.screens.message_actions import MessageActions
from localchat.tui.screens.model_control import ModelControl, base_model_notice
from localchat.tui.screens.prompt import PromptScreen
from localchat.tui.screens.reply_writer import ReplyWriter
from localchat.tui.screens.settings_control import SettingsControl
from localchat.tui.widgets.branch_notice import BranchNotice
from localchat.tui.widgets.branch_switcher import BranchSwitcher
from localchat.tui.widgets.chat_links import ChatLinks
from localchat.tui.widgets.chat_list import ChatList
from localchat.tui.widgets.composer import Composer, is_typing
from localchat.tui.widgets.context_gauge import ChatHeader, ContextGauge
from localchat.tui.widgets.conversation_view import ConversationView
from localchat.tui.widgets.document_chips import AttachedChip, AttachedDocuments, DocumentChips
from localchat.tui.widgets.empty_chat import EmptyChat
from localchat.tui.widgets.key_footer import KeyFooter
from localchat.tui.widgets.message_view import ChatMessage
from localchat.tui.widgets.sidebar import Sidebar
from localchat.tui.widgets.thinking_block import END_THINKING_KEY, ThinkingBlock


class ChatScreen(Screen):
    # the footer shows a few keys, which must fit 80 columns with a message's keys and those shown only while a reply
    # is written (Stop, Answer now); F1 lists every key
    BINDINGS = [
        Binding("f1", "help", "Help", id="help"),
        Binding("ctrl+n", "new_chat", "New", id="new_chat", tooltip="New chat"),  # short labels: 80 columns
        Binding("ctrl+f", "search", "Search", id="search"),
        Binding("ctrl+g", "fork", "Fork", id="fork", tooltip="Fork: N replies at once, to pick one"),
        Binding("ctrl+t", "branch_tree", "Branches", id="branch_tree", show=False),
        Binding("escape", "stop", "Stop", id="stop"),  # shown while a reply is written
        Binding("escape", "back_from_hit", "Back", id="back_from_hit",  # while a search hit is on another branch
                tooltip="Back from a search hit's branch"),
        Binding(END_THINKING_KEY, "end_thinking", "Answer now", id="end_thinking"),  # shown while a reply thinks
        Binding("ctrl+s", "settings", "Settings", id="settings", show=False),
        Binding("f2", "rename", "Rename", id="rename", show=False),
        Binding("f8", "delete_chat", "Delete chat", id="delete_chat", show=False),
        Binding("ctrl+o", "export", "Export", id="export", show=False),
        Binding("ctrl+b", "toggle_sidebar", "Chats", id="toggle_sidebar", tooltip="Show or hide the chat list"),
        Binding("f4", "switch_model", "Switch model", id="switch_model", show=False),
        Binding("f5", "summarize", "New chat from a summary of this one", id="summarize", show=False),
        Binding("ctrl+l", "open_linked_chat", "Open the linked chat (summary)", id="open_linked_chat", show=False),
        Binding("f3", "attach_document", "Attach a document", id="attach_document", show=False),
        Binding("f9", "pin", "Pin or unpin this chat (kept warm: its next reply never waits for its history)",
                id="pin", show=False),
    ]

    def __init__(self, client: EngineClient):
        super().__init__()
        self.client = client
        self.session = ChatSession()  # the open chat and the branch on screen
        # the last chat is still to be opened (at start): True until it is, or until the user starts on another one
        # (sends from the empty chat, opens or creates one), which it must not replace
        self.restoring = True
        # one render of the branch at a time (show_branch): a chat opened (the last one, at start) while the user
        # starts a new one; the second would remove the messages the first is still mounting
        self.drawing = asyncio.Lock()
        self.documents: dict[str, Document] = {}  # the documents the open chat and its messages carry, by id
        self.message_actions = MessageActions(self)
        self.branches = BranchNavigation(self)
        self.chat_export = ChatExport(self)

    def compose(self) -> ComposeResult:
        yield ChatHeader(icon="◆")
        with Horizontal():
            with Sidebar(id="sidebar"):
                yield ChatList(id="chats")
            with Vertical(id="main"):
                yield ChatLinks(id="chat-links")
                yield BranchNotice(id="branch-notice", markup=False)
                yield DocumentChips(id="chat-documents")
                yield EmptyChat(id="empty-chat")
                yield ConversationView(id="conversation")
                yield Static(id="base-model-note", markup=False)
                yield AttachedDocuments(id="attached")
                # short enough for 80 columns beside the chat list; the keys for a new line are in the help (F1)
                yield Composer(placeholder="Message (enter sends, f1: keys)", id="composer")
        yield KeyFooter(compact=True, show_command_palette=False)  # Ctrl+P is in the help (F1)
        yield ModelControl(self.client)
        yield ReplyWriter(self.client)
        yield ChatDocuments(self.client)
        yield SettingsControl(self.client)
        yield LongChats(self.client)

    @property
    def view(self) -> ConversationView:
        return self.query_one(ConversationView)

    @property
    def composer(self) -> Composer:
        return self.query_one("#composer", Composer)

    def on_key(self, event: events.Key) -> None:
        """The typing surface belongs to the user: text typed while a message, the chat list or a chip is focused goes
        to the message box, and so do Backspace and Delete (a key bound there acts only with a modifier; Delete on a
        focused chip, which is shown selected, takes it off). Textual checks bindings after the key has bubbled up to
        here."""
        focused = self.focused
        if isinstance(focused, Input | TextArea) or not is_typing(event):
            return
        if event.key == "delete" and isinstance(focused, AttachedChip):
            return
        self.composer.take_typing(event)

    def on_resize(self, event: events.Resize) -> None:
        self.query_one(Sidebar).fit(event.size.width)

    def on_mount(self) -> None:
        self.query_one(Sidebar).fit(self.size.width)
        self.composer.focus()
        self.load_chats(open_newest=True)

    # --- the model ---

    @property
    def model_control(self) -> ModelControl:
        return self.query_one(ModelControl)

    @property
    def thinks(self) -> bool:
        return self.model_control.thinks

    def on_model_control_known(self, event: ModelControl.Known) -> None:
        """The engine's model: in the title; with its health, in the new chat's hint, and a base model (no chat
        template, which only continues text) in the note above the message box."""
        self.title = f"localchat · {event.model}" if event.model else "localchat"
        if (health := event.health) is None:
            return
        self.query_one(EmptyChat).show(health.model, self.key_of("settings"),
                                       self.key_of("switch_model") if health.backend == "embedded" else None)
        can_chat = self.model_control.can_chat
        note = self.query_one("#base-model-note", Static)
        note.update("" if can_chat else base_model_notice(health.model))
        note.display = not can_chat

    def action_switch_model(self) -> None:
        self.model_control.ask_to_switch(self.writing)

    def note_other_model(self) -> None:
        self.model_control.note_other_model(self.session.conversation and self.session.conversation.model)

    # --- long chats (long_chats.py) ---

    @property
    def long_chats(self) -> LongChats:
        return self.query_one(LongChats)

    @property
    def gauge(self) -> ContextGauge:
        return self.long_chats.gauge

    def action_summarize(self) -> None:
        self.long_chats.ask_summary()

    def on_context_gauge_summary_asked(self, event: ContextGauge.SummaryAsked) -> None:
        self.long_chats.ask_summary()

    def action_open_linked_chat(self) -> None:
        self.long_chats.open_linked()

    def on_chat_links_opened(self, event: ChatLinks.Opened) -> None:
        self.long_chats.open_chat(event.conversation_id)

    # --- documents (chat_documents.py) ---

    @property
    def chat_documents(self) -> ChatDocuments:
        return self.query_one(ChatDocuments)

    @property
    def attached(self) -> AttachedDocuments:
        """The documents attached to the next message (or the new chat), above the message box."""
        return self.query_one(AttachedDocuments)

    def action_attach_document(self) -> None:
        self.chat_documents.attach()

    def on_chat_documents_attached(self, event: ChatDocuments.Attached) -> None:
        self.documents[event.document.id] = event.document

    async def on_attached_documents_detached(self, event: AttachedDocuments.Detached) -> None:
        await self.chat_documents.detach([event.document])
        self.composer.focus()

    # --- chats ---

    @engine_work(group="chats")
    async def load_chats(self, open_newest: bool = False) -> None:
        """The chat list; open_newest: then the newest chat (the last one, at start), unless the user has started on
        another one meanwhile."""
        conversations = await self.client.list_conversations()
        self.long_chats.chat_titles = {conversation.id: conversation.title for conversation in conversations}
        shown = self.session.conversation  # the one shown now, after the wait: another may have opened meanwhile
        if shown is not None:  # its title and settings as stored (the first message names a chat)
            self.session.conversation = next((c for c in conversations if c.id == shown.id), shown)
            self.show_title()
        await self.query_one(ChatList).show(conversations, shown and shown.id)
        await self.long_chats.show_links()
        if open_newest and conversations and self.restoring:
            await self.open(conversations[0].id, restoring=True)
        elif open_newest and self.session.conversation is None:
            await self.show_branch()  # no chat to reopen (a first start): a new one, which says what to do
        if open_newest:
            self.restoring = False

    async def open(self, conversation_id: str, message_id: str | None = None, restoring: bool = False) -> None:
        """A chat, on the branch through `message_id` (then remembered as its active one), else on its shown one.
        restoring: the last chat, opened at start, which is not opened once the user has started on another."""
        if not restoring:
            self.restoring = False
        self.branches.forget_back()
        tree = await self.client.conversation(conversation_id)
        if restoring and not self.restoring:
            return
        self.restoring = False
        self.session.open(tree, message_id)
        self.show_title()
        self.long_chats.summaries = tree.summaries
        self.documents = {document.id: document for document in [*self.attached.documents, *tree.documents]}
        if tree.context is not None:
            self.long_chats.context_limit = tree.context.limit
        await self.show_chat()
        self.note_other_model()
        if message_id is not None:
            await self.client.update_conversation(conversation_id, active_leaf=self.session.leaf)

    def show_title(self) -> None:
        """The header names the chat shown (none for a new chat, until its first message)."""
        self.sub_title = self.session.conversation.title if self.session.conversation else ""

    async def show_chat(self) -> None:
        """Render the open chat: its links, its documents, the branch shown."""
        await self.long_chats.show_links()
        conversation = self.session.conversation
        await self.query_one("#chat-documents", DocumentChips).show(
            [self.documents[i] for i in conversation.documents if i in self.documents] if conversation else [])
        await self.show_branch()

    async def show_branch(self) -> None:
        """Render the session's branch, and what it uses of the model's context. One render at a time, each of the
        session as it is when its turn comes: the last one shows the chat opened last (a chat reopened at start and a
        new chat begun while it is drawn)."""
        async with self.drawing:
            conversation, path = self.session.conversation, self.session.path()
            await self.view.show(self.session.tree, path, self.documents)
            self.query_one(EmptyChat).display = not path
            await self.long_chats.show_context(conversation, path)

    @engine_work(group="chats")
    async def on_chat_list_opened(self, event: ChatList.Opened) -> None:
        await self.open(event.conversation.id)
        self.composer.focus()

    def action_new_chat(self) -> None:
        """An empty chat; it is created with its first message."""
        self.restoring = False
        self.branches.forget_back()
        self.session.new_chat()
        self.show_title()
        self.long_chats.summaries = []
        self.run_worker(self.show_chat())
        self.query_one(ChatList).index = None
        self.composer.focus()

    @work(group="titles")
    async def name_chat(self, conversation_id: str) -> None:
        """The chat's title once the model has written it after the first reply (in the background: the engine writes
        it after the replies); one it could not write is no news (the first message's words stay)."""
        try:
            named = await self.client.name_chat(conversation_id)
        except (httpx.HTTPError, EngineError):
            return
        if self.session.conversation is not None and self.session.conversation.id == conversation_id:
            self.session.conversation = named
            self.show_title()
        self.load_chats()

    def action_rename(self) -> None:
        if self.session.conversation is not None:
            self.app.push_screen(PromptScreen("Rename the chat", self.session.conversation.title), self.rename)

    @engine_work()
    async def rename(self, title: str | None) -> None:
        if title:
            self.session.conversation = await self.client.rename(self.session.conversation.id, title.strip())
            self.show_title()
            self.load_chats()

    def action_delete_chat(self) -> None:
        if (conversation := self.session.conversation) is not None:
            self.app.push_screen(ConfirmScreen(f"Delete “{conversation.title}” and all its branches?",
                                               yes="Delete"), self.delete_chat)

    @engine_work()
    async def delete_chat(self, confirmed: bool) -> None:
        if confirmed:
            conversation = self.session.conversation
            await self.client.delete_conversation(conversation.id)
            self.notify(f"Deleted “{conversation.title}”")
            self.action_new_chat()
            self.load_chats()

    def action_search(self) -> None:
        self.branches.search()

    @engine_work(group="chats")
    async def open_hit(self, hit: SearchHit | None) -> None:
        await self.branches.open_hit(hit)

    @engine_work(group="chats")
    async def on_branch_notice_back_asked(self, event: BranchNotice.BackAsked) -> None:
        await self.branches.go_back()

    def action_back_from_hit(self) -> None:
        self.on_branch_notice_back_asked(BranchNotice.BackAsked())

    def action_toggle_sidebar(self) -> None:
        self.query_one(Sidebar).toggle()

    def action_help(self) -> None:
        from localchat.tui.screens.help import HelpScreen

        self.app.push_screen(HelpScreen(self.app.help_groups(), self.app.keymap, str(self.app.config_path)))

    # --- the branch on screen ---

    @property
    def target(self) -> ChatMessage | None:
        return self.message_actions.target

    def action_focus_message(self, delta: int) -> None:
        self.message_actions.focus_message(delta)

    def on_composer_to_messages(self, event: Composer.ToMessages) -> None:
        """↑ or Tab from the message box: the last message, the nearest (in an empty chat Tab goes on to the next
        part of the screen)."""
        if self.view.views:
            self.message_actions.focus_message(-1)
        else:
            self.focus_next()

    def on_branch_switcher_switched(self, event: BranchSwitcher.Switched) -> None:
        view = next(view for view in event.switcher.ancestors if isinstance(view, ChatMessage))
        self.switch_branch(view.message.id, event.delta)

    def action_switch_branch(self, delta: int) -> None:
        if self.target is not None:
            self.switch_branch(self.target.message.id, delta)

    @engine_work(group="branch")
    async def switch_branch(self, message_id: str, delta: int) -> None:
        await self.branches.switch(message_id, delta)

    def action_branch_tree(self) -> None:
        self.branches.show_tree()

    @engine_work(group="branch")
    async def pick_branch(self, message_id: str | None) -> None:
        await self.branches.pick(message_id)

    def action_copy_message(self) -> None:
        self.message_actions.copy()

    def action_copy_code(self) -> None:
        self.message_actions.copy_code()

    def action_export(self) -> None:
        self.chat_export.ask()

    @engine_work()
    async def export(self, choice: ExportChoice | None) -> None:
        await self.chat_export.write(choice)

    def action_settings(self) -> None:
        self.query_one(SettingsControl).edit()

    def on_settings_control_saved(self, event: SettingsControl.Saved) -> None:
        if self.session.conversation is not None and self.session.conversation.id == event.conversation.id:
            self.session.conversation = event.conversation

    async def create_chat(self, documents: list[str] = ()) -> Conversation:
        """documents: the ids of those it starts with."""
        self.restoring = False
        self.session.new_chat(await self.client.create_conversation(documents=documents))
        self.show_title()
        await self.show_chat()
        conversation = self.session.conversation
        await self.query_one(ChatList).show(await self.client.list_conversations(), conversation.id)
        return conversation

    async def start_with(self, conversation: Conversation | None, documents: list[str]) -> Conversation:
        """A chat without messages (None: a new one) that starts with `documents` too."""
        if conversation is None:
            return await self.create_chat(documents)
        self.session.conversation = await self.client.update_conversation(
            conversation.id, documents=[*conversation.documents, *documents])
        await self.show_chat()
        return self.session.conversation

    # --- writing replies (reply_writer.py) ---

    @property
    def reply_writer(self) -> ReplyWriter:
        return self.query_one(ReplyWriter)

    @property
    def writing(self) -> bool:
        return self.reply_writer.writing

    @property
    def generating_in(self) -> str | None:
        """The chat whose replies are being written (None: none is)."""
        return self.reply_writer.generating_in

    def on_reply_writer_writing(self, event: ReplyWriter.Writing) -> None:
        self.refresh_bindings()
        if event.conversation_id is None:
            self.load_chats()

    def on_message_box_submitted(self, event: Composer.Submitted) -> None:
        self.reply_writer.send(n=1)

    def action_fork(self) -> None:
        """N replies, as the fork dialog asks (each with its own instruction, or none): beside the focused message,
        else to the text in the message box, else beside the last reply."""
        conversation = self.session.conversation
        settings = self.query_one(SettingsControl)
        n = settings.n_of(conversation and conversation.id)
        to_text = not isinstance(self.focused, ChatMessage) and (self.composer.text.strip() or self.target is None)
        if not to_text and self.target is None:
            return
        beside = None if to_text else self.target.message.id
        self.reply_writer.fork(n, beside, focus_reply=isinstance(self.focused, ChatMessage),
                               chosen=lambda n: settings.keep_n(conversation and conversation.id, n))

    def action_pin(self) -> None:
        self.pin_chat()

    @engine_work()
    async def pin_chat(self) -> None:
        """Pin the open chat (its history's KV blocks are evicted last, within the pin budget), or unpin it."""
        conversation = self.session.conversation
        if conversation is None:
            self.notify("Write a message first: a new chat has nothing to keep warm", severity="warning")
            return
        try:
            changed = await (self.client.unpin if conversation.pinned else self.client.pin)(conversation.id)
        except EngineError as error:
            self.notify(str(error), title="Not pinned", severity="warning")
            return
        self.session.conversation = changed
        self.notify("Pinned: this chat stays warm" if changed.pinned else "Unpinned: this chat ages as the others")
        self.load_chats()

    def action_regenerate(self) -> None:
        self.regenerate(1)

    def regenerate(self, n: int) -> None:
        if self.target is not None:
            self.reply_writer.regenerate(self.target.message.id, n, focus_reply=isinstance(self.focused, ChatMessage))

    def action_edit(self) -> None:
        self.message_actions.edit()

    def action_continue_reply(self) -> None:
        self.message_actions.continue_reply()

    def action_stop(self) -> None:
        self.reply_writer.stop()

    def action_end_thinking(self) -> None:
        self.reply_writer.end_thinking()

    def check_action(self, action: str, parameters: tuple) -> bool | None:
        """Keys shown and working only while they do something (the footer leaves out the keys it has no room for):
        Stop and Answer now while replies are written; a message's keys as message_actions says (Continue on a reply
        cut short; ←/→ where it has siblings; none of those while a reply is written); Back while a search hit is on
        another branch; Branches and Export once the chat has messages."""
        if action == "end_thinking":  # while a reply on screen thinks (else the key is free for others)
            return self.thinks and any(view.thinking for view in self.view.views)
        if action == "stop":
            return self.generating_in is not None
        if action in ("regenerate", "edit", "switch_branch", "continue_reply"):
            return self.message_actions.available(action, parameters)
        if action == "back_from_hit":
            return self.branches.back_to is not None and self.generating_in is None
        if action in ("branch_tree", "export"):
            return bool(self.session.tree.messages)
        return True

    def on_thinking_block_streaming(self, event: ThinkingBlock.Streaming) -> None:
        self.refresh_bindings()

    def key_of(self, binding_id: str) -> str:
        """The (first) key of one of the screen's or a message's bindings, as the footer writes it, remapped or not."""
        binding = next(binding for binding in [*self.BINDINGS, *ChatMessage.BINDINGS] if binding.id == binding_id)
        keys = self.app.keymap.get(binding_id, binding.key)
        return self.app.get_key_display(Binding(keys.split(",")[0], binding.action))
