"""The chat screen's part that writes replies: a send (the message box's text, with the documents attached), a
regenerate, an edit resent or a reply continued, streamed into the branch on screen, or with N replies into the
picker, one set at a time; Stop and Answer now while they are written; the chat's title, which the model writes after
its first reply. It renders what the session says each event changed; what others must learn it posts up (news.py):
the model that wrote a reply, the model's context a reply's stats say, the chats changed once replies are written."""

from collections.abc import AsyncIterator, Callable
from typing import Protocol

import httpx
from textual import work
from textual.widget import Widget

from localchat.app.client.engine_client import EngineClient, EngineError
from localchat.app.protocol.conversations import Message, StreamEvent, Variation
from localchat.app.protocol.documents import Document
from localchat.tui.chat.host import ChatHost
from localchat.tui.chat.keys import key_of
from localchat.tui.chat.news import ChatsChanged, ContextLimitKnown, ModelNamed
from localchat.tui.chat_session import BranchShown, Failed, RepliesStarted, ReplyFinished, TextAdded, ThinkingAdded
from localchat.tui.engine_work import engine_work
from localchat.tui.screens.fork_dialog import ForkDialog, ForkRequest
from localchat.tui.screens.fork_picker import ForkPicker
from localchat.tui.widgets.document_chips import AttachedDocuments

# start(conversation id, ids of the documents the message carries): a send's, regenerate's or edit's events
Start = Callable[[str, list[str]], AsyncIterator[StreamEvent]]


class Model(Protocol):
    """What of the engine's model (model_control.py) the writer asks."""

    thinks: bool  # its thinking can be ended (Answer now)

    def refuses_chat(self) -> bool:
        """A base model writes no replies (it says so)."""


class ReplyWriter(Widget):
    DEFAULT_CSS = "ReplyWriter { display: none; }"

    def __init__(self, client: EngineClient, host: ChatHost, model: Model, attached: AttachedDocuments):
        """attached: the chips of the documents attached to the next message, which a send carries."""
        super().__init__()
        self.client, self.host, self.model, self.attached = client, host, model, attached
        self.writing = False  # a send, regenerate or edit runs (set before its worker starts)
        self.generating_in: str | None = None  # the chat whose replies are being written
        self.focus_reply = False  # focus the new reply when it starts (a regenerate from a focused message)
        self.picker: ForkPicker | None = None
        self.fork_lines: tuple[str, ...] = ()  # the fork dialog's lines, as last sent (its next opens with them)
        self.keep_instructions = False

    def send(self, n: int, variations: list[Variation] | None = None) -> None:
        """The message box's text, with the documents attached: a chat without messages starts with them, else the
        message carries them. n replies, or one per variation."""
        composer, session = self.host.composer, self.host.session
        text = composer.text.strip()
        if text and self.can_generate():
            composer.clear()
            self.write(lambda conversation_id, documents: self.client.send(
                conversation_id, text, session.leaf, n=n, documents=documents, variations=variations),
                typed=text, documents=self.attached.documents)

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
        if self.model.refuses_chat():
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
        self.host.session.stay()  # a send from the empty chat makes a new one: the last chat is not opened over it
        self.stream(start, typed, list(documents))

    @engine_work(group="generation")
    async def stream(self, start: Start, typed: str | None, documents: list[Document]) -> None:
        host, streamed = self.host, False
        try:
            if documents and not host.session.tree.messages:  # a chat without messages starts with them
                conversation = await host.stored_chat([document.id for document in documents])
                await self.attached.take_off(documents)
                documents = []
            else:
                conversation = await host.stored_chat()
            first_exchange = not any(m.role == "assistant" for m in host.session.tree.messages.values())
            self.generating_in = conversation.id
            self.refresh_bindings()  # Stop shows, ←/→ hide
            async for event in start(conversation.id, [document.id for document in documents]):
                if not streamed:  # the message is stored with its documents
                    streamed = True
                    await self.attached.take_off(documents)
                shown = host.session.conversation
                if shown is not None and shown.id == conversation.id:
                    await self.show_event(event)
            if first_exchange and streamed:  # the chat's first reply: the model names the chat now
                self.name_chat(conversation.id)
        except EngineError:
            composer = host.composer
            if typed and not streamed and not composer.text.strip():  # refused: the text is back to edit
                composer.text = typed
                composer.move_cursor(composer.document.end)
            raise
        finally:
            self.generating_in, self.writing, self.focus_reply = None, False, False
            self.refresh_bindings()
            self.post_message(ChatsChanged())

    @work(group="titles")
    async def name_chat(self, conversation_id: str) -> None:
        """The chat's title once the model has written it after the first reply (in the background: the engine writes
        it after the replies); one it could not write is no news (the first message's words stay)."""
        try:
            named = await self.client.name_chat(conversation_id)
        except (httpx.HTTPError, EngineError):
            return
        self.host.session.update(named)
        self.post_message(ChatsChanged())

    async def show_event(self, event: StreamEvent) -> None:
        """Render what one event of the reply stream changed (the session applies it)."""
        match self.host.session.apply(event):
            case BranchShown():
                await self.host.show_branch()
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
        if started.model:
            self.post_message(ModelNamed(started.model))  # another client may have switched it meanwhile
        if started.retokenized_from:
            self.notify(f"Continuing with {started.model}: the messages written with "
                        f"{', '.join(started.retokenized_from)} were tokenized again for it.", title="Model")
        await self.host.show_branch()
        if started.fork is not None:
            self.picker = ForkPicker(list(started.replies), started.temperature, stop=self.stop,
                                     end_thinking=self.end_thinking if self.model.thinks else None)
            await self.app.push_screen(self.picker, self.pick_reply)
        elif self.focus_reply:
            self.host.view.view_of(started.replies[0].id).focus()
        for reply in started.replies:
            self.writer(reply.id).start_stream(self.end_thinking_key())

    async def show_finished(self, message: Message) -> None:
        if self.picker is not None and self.picker.card_of(message.id) is not None:
            await self.picker.finish(message)
        elif (writer := self.writer(message.id)) is not None:
            await writer.finish(message)
            self.host.view.show_positions(self.host.session.tree)
            self.post_message(ContextLimitKnown(message.stats and message.stats.context_limit))

    def writer(self, message_id: str):
        """Where a reply being written is shown: its card in the N-reply picker, else its message on screen."""
        if self.picker is not None and (card := self.picker.card_of(message_id)) is not None:
            return card
        return self.host.view.view_of(message_id)

    @engine_work(group="branch")
    async def pick_reply(self, message_id: str | None) -> None:
        """The picker closed: continue from the chosen reply (or the first, which the engine made active)."""
        host, replies = self.host, self.picker.replies
        self.picker = None
        host.session.pick(message_id or replies[0].id)
        await host.show_branch()
        host.composer.focus()
        if message_id is not None:
            await self.client.update_conversation(host.session.conversation.id, active_leaf=message_id)

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
        return key_of(self.app, "end_thinking") if self.model.thinks else None
