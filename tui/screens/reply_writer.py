"""The chat screen's part that writes replies: a send (the message box's text, with the documents attached), a
regenerate, an edit resent or a reply continued, streamed into the branch on screen, or with N replies into the
picker, one set at a time; Stop and Answer now while they are written. A controller without a face, mounted in the
chat screen, which renders what the session says each event changed; it tells the screen when writing starts and ends
(Writing)."""

from collections.abc import AsyncIterator, Callable
from dataclasses import dataclass
from typing import TYPE_CHECKING

from textual.message import Message as WidgetMessage
from textual.widget import Widget

from localchat.app.client.engine_client import EngineClient, EngineError
from localchat.app.protocol.conversations import Message, StreamEvent, Variation
from localchat.app.protocol.documents import Document
from localchat.tui.chat_session import BranchShown, Failed, RepliesStarted, ReplyFinished, TextAdded, ThinkingAdded
from localchat.tui.engine_work import engine_work
from localchat.tui.screens.fork_dialog import ForkDialog, ForkRequest
from localchat.tui.screens.fork_picker import ForkPicker

if TYPE_CHECKING:
    from localchat.tui.screens.chat import ChatScreen

# start(conversation id, ids of the documents the message carries): a send's, regenerate's or edit's events
Start = Callable[[str, list[str]], AsyncIterator[StreamEvent]]


class ReplyWriter(Widget):
    DEFAULT_CSS = "ReplyWriter { display: none; }"

    @dataclass
    class Writing(WidgetMessage):
        """Replies began to be written in a chat (its id), or ended (None): the keys that work change."""

        conversation_id: str | None

    def __init__(self, client: EngineClient):
        super().__init__()
        self.client = client
        self.writing = False  # a send, regenerate or edit runs (set before its worker starts)
        self.generating_in: str | None = None  # the chat whose replies are being written
        self.focus_reply = False  # focus the new reply when it starts (a regenerate from a focused message)
        self.picker: ForkPicker | None = None
        self.fork_lines: tuple[str, ...] = ()  # the fork dialog's lines, as last sent (its next opens with them)
        self.keep_instructions = False

    @property
    def chat(self) -> "ChatScreen":
        return self.screen

    def send(self, n: int, variations: list[Variation] | None = None) -> None:
        """The message box's text, with the documents attached: a chat without messages starts with them, else the
        message carries them. n replies, or one per variation."""
        chat = self.chat
        text = chat.composer.text.strip()
        if text and self.can_generate():
            chat.composer.clear()
            self.write(lambda conversation_id, documents: self.client.send(
                conversation_id, text, chat.session.leaf, n=n, documents=documents, variations=variations),
                typed=text, documents=chat.attached.documents)

    def regenerate(self, message_id: str, n: int, focus_reply: bool, variations: list[Variation] | None = None
                   ) -> None:
        """focus_reply: the new reply takes the focus (regenerated from a focused message: its keys stay at hand)."""
        if self.can_generate():
            self.focus_reply = focus_reply
            self.write(lambda conversation_id, _: self.client.regenerate(conversation_id, message_id, n=n,
                                                                         variations=variations))

    @engine_work()
    async def fork(self, n: int, beside: str | None, focus_reply: bool, chosen: Callable[[int], None]) -> None:
        """The fork dialog, starting at n replies (and the last fork's lines), then its replies: to the message box's
        text, or (beside: a message) beside that message. chosen(n) hears the number the dialog ended with."""
        if not self.can_generate():
            return
        config, most = self.app.config, int((await self.client.limits()).sampling["n"].max)

        def save_preset(name: str, lines: list[str]) -> None:
            config.fork_presets[name] = lines
            self.app.save_config()

        def forked(request: ForkRequest | None) -> None:
            if request is None:
                return
            self.fork_lines, self.keep_instructions = request.lines, request.keep
            chosen(request.n)
            if beside is None:
                self.send(request.n, request.variations)
            else:
                self.regenerate(beside, request.n, focus_reply, request.variations)

        dialog = ForkDialog(n, most, self.fork_lines, dict(config.fork_presets), save_preset, self.keep_instructions)
        self.app.push_screen(dialog, forked)

    def resend(self, message_id: str, content: str) -> None:
        """The message `message_id` edited to `content`: a new branch beside it (yours and its replies, or a reply)."""
        if self.can_generate():
            self.write(lambda conversation_id, _: self.client.edit(conversation_id, message_id, content))

    def continue_reply(self, message_id: str, focus_reply: bool) -> None:
        """The reply `message_id` goes on where it ended, in the same message."""
        if self.can_generate():
            self.focus_reply = focus_reply
            self.write(lambda conversation_id, _: self.client.continue_reply(conversation_id, message_id))

    def can_generate(self) -> bool:
        """One reply (or one set of N) at a time: a key press while one is written is refused, not queued. A base
        model writes none."""
        if self.chat.model_control.refuses_chat():
            return False
        if self.writing:
            self.notify("A reply is being written; esc stops it", severity="warning")
            return False
        return True

    def write(self, start: Start, typed: str | None = None, documents: list[Document] = ()) -> None:
        """Stream the events of start() into the screen. The slot is taken now, before the worker runs: a second key
        press in between is refused (can_generate). typed: the text sent from the message box, put back where the
        engine refuses it; documents: the ones attached to it."""
        self.writing = True
        self.chat.restoring = False  # a send from the empty chat makes a new one: the last chat is not opened over it
        self.stream(start, typed, list(documents))

    @engine_work(group="generation")
    async def stream(self, start: Start, typed: str | None, documents: list[Document]) -> None:
        chat, streamed = self.chat, False
        try:
            conversation = chat.session.conversation
            if documents and chat.chat_documents.starts_chat:  # the chat starts with them
                conversation = await chat.start_with(conversation, [document.id for document in documents])
                await chat.chat_documents.detach(documents)
                documents = []
            conversation = conversation or await chat.create_chat()
            first_exchange = not any(m.role == "assistant" for m in chat.session.tree.messages.values())
            self.generating_in = conversation.id
            self.post_message(self.Writing(conversation.id))  # Stop shows, ←/→ hide
            async for event in start(conversation.id, [document.id for document in documents]):
                if not streamed:  # the message is stored with its documents
                    streamed = True
                    await chat.chat_documents.detach(documents)
                shown = chat.session.conversation
                if shown is not None and shown.id == conversation.id:
                    await self.show_event(event)
            if first_exchange and streamed:  # the chat's first reply: the model names the chat now
                chat.name_chat(conversation.id)
        except EngineError:
            if typed and not streamed and not chat.composer.text.strip():  # refused: the text is back to edit
                chat.composer.text = typed
                chat.composer.move_cursor(chat.composer.document.end)
            raise
        finally:
            self.generating_in, self.writing, self.focus_reply = None, False, False
            self.post_message(self.Writing(None))

    async def show_event(self, event: StreamEvent) -> None:
        """Render what one event of the reply stream changed (the session applies it)."""
        match self.chat.session.apply(event):
            case BranchShown():
                await self.chat.show_branch()
            case RepliesStarted() as started:
                await self.show_replies(started)
            case TextAdded(message_id=message_id, text=text):
                if (writer := self.writer(message_id)) is not None:
                    await writer.write(text)
            case ThinkingAdded(message_id=message_id) as added:
                if (writer := self.writer(message_id)) is not None:
                    writer.think(added.reasoning, added.reasoning_tokens)
                    if added.text:  # the answer began in the same event
                        await writer.write(added.text)
            case ReplyFinished(message=message):
                await self.show_finished(message)
            case Failed(message=message):
                self.notify(message, title="The engine failed", severity="error")

    async def show_replies(self, started: RepliesStarted) -> None:
        """Replies began: one is written in the branch on screen, several in the N-reply picker."""
        chat = self.chat
        if started.model:
            chat.model_control.know_name(started.model)  # another client may have switched it meanwhile
        if started.retokenized_from:
            self.notify(f"Continuing with {started.model}: the messages written with "
                        f"{', '.join(started.retokenized_from)} were tokenized again for it.", title="Model")
        await chat.show_branch()
        if started.fork is not None:
            self.picker = ForkPicker(list(started.replies), started.temperature, stop=self.stop,
                                     end_thinking=self.end_thinking if chat.thinks else None)
            await self.app.push_screen(self.picker, self.pick_reply)
        elif self.focus_reply:
            chat.view.view_of(started.replies[0].id).focus()
        for reply in started.replies:
            self.writer(reply.id).start_stream(self.end_thinking_key())

    async def show_finished(self, message: Message) -> None:
        chat = self.chat
        if self.picker is not None and self.picker.card_of(message.id) is not None:
            await self.picker.finish(message)
        elif (writer := self.writer(message.id)) is not None:
            await writer.finish(message)
            chat.view.show_positions(chat.session.tree)
            if message.stats is not None and message.stats.context_limit is not None:
                chat.long_chats.context_limit = message.stats.context_limit
            await chat.long_chats.show_context(chat.session.conversation, chat.session.path())

    def writer(self, message_id: str):
        """Where a reply being written is shown: its card in the N-reply picker, else its message on screen."""
        if self.picker is not None and (card := self.picker.card_of(message_id)) is not None:
            return card
        return self.chat.view.view_of(message_id)

    @engine_work(group="branch")
    async def pick_reply(self, message_id: str | None) -> None:
        """The picker closed: continue from the chosen reply (or the first, which the engine made active)."""
        chat, replies = self.chat, self.picker.replies
        self.picker = None
        chat.session.pick(message_id or replies[0].id)
        await chat.show_branch()
        chat.composer.focus()
        if message_id is not None:
            await self.client.update_conversation(chat.session.conversation.id, active_leaf=message_id)

    @engine_work()
    async def stop(self) -> None:
        if self.generating_in is not None:
            await self.client.stop(self.generating_in)

    @engine_work()
    async def end_thinking(self) -> None:
        """The replies being written stop thinking and answer now (esc stops them altogether)."""
        if self.generating_in is not None:
            await self.client.end_thinking(self.generating_in)

    def end_thinking_key(self) -> str | None:
        """The key that ends a reply's thinking, as the footer writes it; None where the model does not think."""
        return self.chat.key_of("end_thinking") if self.chat.thinks else None
