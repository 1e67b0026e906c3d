"""The main screen: the chat list, the branch on screen, and the message box. It renders a chat session
(tui/chat_session.py: the open chat, its tree, the branch shown), opens chats, and routes keys and typed messages to
its parts (tui/chat/), each with one job: the engine's model (model_control.py), writing replies (reply_writer.py),
attaching documents (chat_documents.py), the actions on a message (message_actions.py), moving between branches and
search hits (branch_navigation.py), the export (chat_export.py), long chats (long_chats.py: the context gauge, the
cut, the summary and its links), a chat's settings (settings_control.py), and the chat's record (chat_record.py:
rename, pin, delete). Each part is given this screen as a ChatHost (tui/chat/host.py), and tells it what another part
must learn with a typed message (tui/chat/news.py), which the screen hands down. The typing surface belongs to the
user: text typed anywhere goes to the message box."""

import asyncio
from collections.abc import Sequence

from textual import events, on
from textual.app import ComposeResult
from textual.containers import Horizontal, Vertical
from textual.screen import Screen
from textual.widgets import Input, Static, TextArea

from localchat.app.client.engine_client import EngineClient
from localchat.app.protocol.conversations import Conversation
from localchat.tui.chat.branch_navigation import BranchNavigation
from localchat.tui.chat.chat_documents import ChatDocuments
from localchat.tui.chat.chat_export import ChatExport
from localchat.tui.chat.chat_record import ChatRecord
from localchat.tui.chat.keys import CHAT_KEYS, key_of
from localchat.tui.chat.long_chats import LongChats
from localchat.tui.chat.message_actions import MessageActions
from localchat.tui.chat.model_control import ModelControl, base_model_notice
from localchat.tui.chat.news import ChatsChanged, ContextLimitKnown, ModelNamed
from localchat.tui.chat.reply_writer import ReplyWriter
from localchat.tui.chat.settings_control import SettingsControl
from localchat.tui.chat_session import ChatSession
from localchat.tui.engine_work import engine_work
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


class ChatScreen(Screen):
    BINDINGS = CHAT_KEYS

    def __init__(self, client: EngineClient):
        super().__init__()
        self.client = client
        self.session = ChatSession()  # the open chat and the branch on screen
        # one render of the branch at a time (show_branch): a chat opened (the last one, at start) while the user
        # starts a new one; the second would remove the messages the first is still mounting
        self.drawing = asyncio.Lock()
        # the widgets the parts draw on
        self.composer = Composer(placeholder="Message (enter sends, f1: keys)", id="composer")  # short: 80 columns
        self.view = ConversationView(id="conversation")
        self.attached = AttachedDocuments(id="attached")  # the documents attached to the next message (or new chat)
        self.gauge = ContextGauge(id="context-gauge")
        self.chat_list = ChatList(id="chats")
        links, notice = ChatLinks(id="chat-links"), BranchNotice(id="branch-notice", markup=False)
        # the parts
        self.model = ModelControl(client, self)
        self.replies = ReplyWriter(client, self, self.model, self.attached)
        self.documents = ChatDocuments(client, self, self.attached)
        self.long_chats = LongChats(client, self, self.gauge, links)
        self.branches = BranchNavigation(client, self, notice)
        self.message_actions = MessageActions(self, self.replies, self.branches)
        self.chat_export = ChatExport(client, self)
        self.settings = SettingsControl(client, self)
        self.record = ChatRecord(client, self)

    def compose(self) -> ComposeResult:
        yield ChatHeader(self.gauge, icon="◆")
        with Horizontal():
            with Sidebar(id="sidebar"):
                yield self.chat_list
            with Vertical(id="main"):
                yield self.long_chats.links
                yield self.branches.notice
                yield DocumentChips(id="chat-documents")
                yield EmptyChat(id="empty-chat")
                yield self.view
                yield Static(id="base-model-note", markup=False)
                yield self.attached
                yield self.composer  # the keys for a new line are in the help (F1)
        yield KeyFooter(compact=True, show_command_palette=False)  # Ctrl+P is in the help (F1)
        yield from (self.model, self.replies, self.documents, self.long_chats, self.branches, self.message_actions,
                    self.chat_export, self.settings, self.record)

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
        self.post_message(ChatsChanged(open_newest=True))

    def check_action(self, action: str, parameters: tuple) -> bool | None:
        """Keys shown and working only while they do something (the footer leaves out the keys it has no room for):
        Stop and Answer now while replies are written; a message's keys as message_actions says (Continue on a reply
        cut short; ←/→ where it has siblings; none of those while a reply is written); Back while a search hit is on
        another branch; Branches and Export once the chat has messages."""
        if action == "end_thinking":  # while a reply on screen thinks (else the key is free for others)
            return self.model.thinks and any(view.thinking for view in self.view.views)
        if action == "stop":
            return self.replies.generating_in is not None
        if action == "message_key":
            return self.message_actions.available(*parameters)
        if action == "back_from_hit":
            return self.branches.back_to is not None and self.replies.generating_in is None
        if action in ("branch_tree", "export"):
            return bool(self.session.tree.messages)
        return True

    # --- the open chat ---

    async def open_chat(self, conversation_id: str, message_id: str | None = None, restoring: bool = False) -> None:
        """A stored chat, on the branch through `message_id` (then remembered as its active one), else on its shown
        one, selected in the chat list. restoring: the last chat, opened at start, which is not opened once the user
        has begun on another."""
        if not restoring:
            self.session.stay()
        self.branches.forget_back()
        tree = await self.client.conversation(conversation_id)
        if restoring and not self.session.restoring:
            return
        self.session.stay()
        self.session.open(tree, message_id)
        self.long_chats.opened(tree)
        self.documents.opened(tree)
        if not restoring:
            self.chat_list.select(conversation_id)
        await self.show_chat()
        self.model.note_other_model()
        if message_id is not None:
            await self.client.update_conversation(conversation_id, active_leaf=self.session.leaf)

    async def stored_chat(self, documents: Sequence[str] = ()) -> Conversation:
        """The open chat as stored: a new one is created (with `documents`, ids, to start with), one without messages
        given `documents` takes them on; shown, and the chat list read again."""
        conversation = self.session.conversation
        if conversation is None:
            self.session.stay()
            self.session.new_chat(await self.client.create_conversation(documents=list(documents)))
        elif documents:
            self.session.update(await self.client.update_conversation(
                conversation.id, documents=[*conversation.documents, *documents]))
        else:
            return conversation
        await self.show_chat()
        self.post_message(ChatsChanged())
        return self.session.conversation

    @on(ChatRecord.Deleted)
    def action_new_chat(self) -> None:
        """An empty chat (ctrl+n, or in place of the chat deleted); it is created with its first message."""
        self.session.stay()
        self.branches.forget_back()
        self.session.new_chat()
        self.long_chats.opened(None)
        self.run_worker(self.show_chat())
        self.chat_list.select(None)
        self.composer.focus()

    async def show_chat(self) -> None:
        """Render the open chat: its title (none for a new chat, until its first message), its links, its documents,
        the branch shown."""
        self.sub_title = self.session.conversation.title if self.session.conversation else ""
        await self.long_chats.show_links()
        await self.query_one("#chat-documents", DocumentChips).show(self.documents.of_chat())
        await self.show_branch()

    async def show_branch(self) -> None:
        """Render the session's branch, and what it uses of the model's context. One render at a time, each of the
        session as it is when its turn comes: the last one shows the chat opened last (a chat reopened at start and a
        new chat begun while it is drawn)."""
        async with self.drawing:
            path = self.session.path()
            await self.view.show(self.session.tree, path, self.documents.known)
            self.query_one(EmptyChat).display = not path
            await self.long_chats.show_context(self.documents.of_chat())

    @engine_work(group="chats")
    async def on_chats_changed(self, changed: ChatsChanged) -> None:
        """The chat list read again; at start (open_newest), then the newest chat (the last one), unless the user has
        begun on another meanwhile."""
        conversations = await self.client.list_conversations()
        self.long_chats.listed(conversations)
        shown = self.session.conversation  # the one shown now, after the wait: another may have opened meanwhile
        if shown is not None:  # its title and settings as stored (the first message names a chat)
            self.session.update(next((c for c in conversations if c.id == shown.id), shown))
            self.sub_title = self.session.conversation.title
        await self.chat_list.show(conversations, shown and shown.id)
        await self.long_chats.show_links()
        if changed.open_newest and conversations and self.session.restoring:
            await self.open_chat(conversations[0].id, restoring=True)
        elif changed.open_newest and self.session.conversation is None:
            await self.show_branch()  # no chat to reopen (a first start): a new one, which says what to do
        if changed.open_newest:
            self.session.stay()

    @engine_work(group="chats")
    async def on_chat_list_opened(self, event: ChatList.Opened) -> None:
        await self.open_chat(event.conversation.id)
        self.composer.focus()

    # --- what the parts tell ---

    def on_model_control_known(self, event: ModelControl.Known) -> None:
        """The engine's model: in the title; with its health, in the new chat's hint, and a base model (no chat
        template, which only continues text) in the note above the message box."""
        self.title = f"localchat · {event.model}" if event.model else "localchat"
        if (health := event.health) is None:
            return
        self.query_one(EmptyChat).show(health.model, key_of(self.app, "settings"),
                                       key_of(self.app, "switch_model") if health.backend == "embedded" else None)
        can_chat = self.model.can_chat
        note = self.query_one("#base-model-note", Static)
        note.update("" if can_chat else base_model_notice(health.model))
        note.display = not can_chat

    def on_model_named(self, event: ModelNamed) -> None:
        self.model.know_name(event.model)

    async def on_context_limit_known(self, event: ContextLimitKnown) -> None:
        self.long_chats.know_limit(event.limit)
        await self.long_chats.show_context(self.documents.of_chat())

    # --- the message box, the messages, the chips ---

    def on_message_box_submitted(self, event: Composer.Submitted) -> None:
        self.replies.send(n=1)

    def on_composer_to_messages(self, event: Composer.ToMessages) -> None:
        """↑ or Tab from the message box: the last message, the nearest (in an empty chat Tab goes on to the next
        part of the screen)."""
        if self.view.views:
            self.message_actions.focus_message(-1)
        else:
            self.focus_next()

    def action_message_key(self, action: str, *parameters) -> None:
        """A message's key (keys.py's MESSAGE_KEYS), on the focused message, else the last one."""
        self.message_actions.act(action, *parameters)

    def on_branch_switcher_switched(self, event: BranchSwitcher.Switched) -> None:
        """A click on ‹ or › of a message: its sibling's branch (not while a reply is written)."""
        view = next(view for view in event.switcher.ancestors if isinstance(view, ChatMessage))
        if self.replies.generating_in is None:
            self.branches.switch(view.message.id, event.delta)

    async def on_attached_documents_detached(self, event: AttachedDocuments.Detached) -> None:
        await self.attached.take_off([event.document])
        self.composer.focus()

    # --- the screen's keys ---

    def action_help(self) -> None:
        from localchat.tui.screens.help import HelpScreen

        self.app.push_screen(HelpScreen(self.app.help_groups(), self.app.keymap, str(self.app.config_path)))

    def action_toggle_sidebar(self) -> None:
        self.query_one(Sidebar).toggle()

    def action_fork(self) -> None:
        """N replies, as the fork dialog asks (each with its own instruction, or none): beside the focused message,
        else to the text in the message box, else beside the last reply."""
        conversation, target = self.session.conversation, self.message_actions.target
        n = self.settings.n_of(conversation and conversation.id)
        to_text = not isinstance(self.focused, ChatMessage) and (self.composer.text.strip() or target is None)
        if not to_text and target is None:
            return
        beside = None if to_text else target.message.id
        self.replies.fork(n, beside, focus_reply=isinstance(self.focused, ChatMessage),
                          chosen=lambda n: self.settings.keep_n(conversation and conversation.id, n))

    def action_stop(self) -> None:
        self.replies.stop()

    def action_end_thinking(self) -> None:
        self.replies.end_thinking()

    def action_search(self) -> None:
        self.branches.search()

    @on(BranchNotice.BackAsked)
    def action_back_from_hit(self) -> None:
        """The key, or a click on the notice: back to the branch the chat was on before the search hit."""
        self.branches.go_back()

    def action_branch_tree(self) -> None:
        self.branches.show_tree()

    @on(ContextGauge.SummaryAsked)
    def action_summarize(self) -> None:
        """The key, or a click on the gauge near the limit: a new chat from a summary of this one."""
        self.long_chats.ask_summary(writing=self.replies.writing)

    @on(ChatLinks.Opened)
    def action_open_linked_chat(self, opened: ChatLinks.Opened | None = None) -> None:
        """The key opens the chat the links point to (the newest continuation, else the origin); a click, that link's
        chat."""
        self.long_chats.open_linked(opened and opened.conversation_id)

    def action_attach_document(self) -> None:
        self.documents.attach()

    def action_switch_model(self) -> None:
        self.model.ask_to_switch(self.replies.writing)

    def action_settings(self) -> None:
        self.settings.edit(thinking=self.model.thinks)

    def action_export(self) -> None:
        self.chat_export.ask()

    def action_rename(self) -> None:
        self.record.ask_rename()

    def action_delete_chat(self) -> None:
        self.record.ask_delete()

    def action_pin(self) -> None:
        self.record.pin()
