"""A chat as a UI holds it, without the UI: the open conversation, its message tree, the branch shown, and a
reducer of the reply stream (`apply`) that changes them one event at a time and answers what changed, which the
screen renders and nothing more. webui/static/chat_session.js is its twin, with the same names; one file of scenarios
(tests/tui/chat_session_scenarios.json) drives the tests of both."""

import time
from dataclasses import dataclass

import msgspec

from localchat.app.protocol.conversations import (
    Conversation,
    ConversationTree,
    DeltaEvent,
    DoneEvent,
    EditedEvent,
    ErrorEvent,
    Message,
    StartEvent,
    StreamEvent,
    UserEvent,
)
from localchat.tui.message_tree import MessageTree


@dataclass(frozen=True)
class Fork:
    """N replies to one message, shown side by side until one is picked to continue from."""

    parent_id: str
    ids: tuple[str, ...]


# --- what an event changed ---


@dataclass(frozen=True)
class BranchShown:
    """A message was stored (the user's, sent or edited; or an edited reply) and the shown branch now ends at it."""

    leaf: str


@dataclass(frozen=True)
class RepliesStarted:
    """Replies began under a message: empty ones are in the tree (or a stored one goes on, its text kept), the first
    ends the shown branch."""

    replies: tuple[Message, ...]  # in reply order
    fork: Fork | None  # several: shown side by side until one is picked
    model: str | None  # the model writing them
    retokenized_from: tuple[str, ...]  # the other models whose messages were tokenized again for it
    temperature: float | None = None  # what they sample at (a fork's: the model's fork temperature at least)


@dataclass(frozen=True)
class TextAdded:
    """A reply grew by `text` (the tree holds all of it so far)."""

    message_id: str
    text: str


@dataclass(frozen=True)
class ThinkingAdded:
    """A reply thought `reasoning` more (a thinking model's, before its answer): `reasoning_tokens` so far. `text`: the
    answer's first text, where the same event began it (the tree holds all of both so far)."""

    message_id: str
    reasoning: str
    reasoning_tokens: int
    text: str


@dataclass(frozen=True)
class ReplyFinished:
    """A reply was stored: its text as saved, how it ended, its stats."""

    message: Message
    shown: bool  # it ends the shown branch


@dataclass(frozen=True)
class Failed:
    """The engine failed; the replies it was writing stay as far as they got."""

    message: str


Change = BranchShown | RepliesStarted | TextAdded | ThinkingAdded | ReplyFinished | Failed


class ChatSession:
    """The open chat (None: a new one, created with its first message), its messages, and the branch on screen: the
    one that ends at `leaf`, or while `fork` is set, the one that ends at the fork's parent, with its replies apart."""

    def __init__(self) -> None:
        self.conversation: Conversation | None = None
        self.tree = MessageTree()
        self.leaf: str | None = None
        self.fork: Fork | None = None
        # the last chat is still to be opened (at start): True until it is, or until the user begins on another one
        # (sends from the empty chat, opens or begins one), which it must not replace
        self.restoring = True

    def stay(self) -> None:
        """The user began on the chat shown, or on another: the last chat, opened at start, no longer replaces it."""
        self.restoring = False

    def update(self, conversation: Conversation) -> None:
        """The open chat as stored now (renamed, named by the model, pinned, its settings saved); the same chat's
        messages and branch stay. Another chat than the open one changes nothing."""
        if self.conversation is not None and self.conversation.id == conversation.id:
            self.conversation = conversation

    # --- which branch is shown ---

    def open(self, tree: ConversationTree, message_id: str | None = None) -> None:
        """A stored chat, on the branch through `message_id` (to its newest end), else on the one it last showed."""
        self.conversation, self.tree = tree.conversation, MessageTree.of(tree)
        active = tree.conversation.active_leaf
        self.show(self.tree.newest_leaf(message_id) if message_id else self.tree.shown_leaf(active))

    def new_chat(self, conversation: Conversation | None = None) -> None:
        """An empty chat: just created, or None until its first message creates it."""
        self.conversation, self.tree = conversation, MessageTree()
        self.show(None)

    def show(self, leaf: str | None) -> None:
        """Show the branch that ends at `leaf` (a fork's replies no longer side by side)."""
        self.leaf, self.fork = leaf, None

    def pick(self, message_id: str) -> None:
        """Show the branch through `message_id`, down its newest replies."""
        self.show(self.tree.newest_leaf(message_id))

    def step_sibling(self, message_id: str, step: int) -> str | None:
        """Show the branch of the sibling `step` places from `message_id` (-1: the one before); that sibling, or None
        where there is none (nothing changes)."""
        siblings = self.tree.siblings(message_id)
        at = siblings.index(message_id) + step
        if not 0 <= at < len(siblings):
            return None
        self.pick(siblings[at])
        return siblings[at]

    def path(self) -> list[Message]:
        """The messages on screen, root first: to the leaf, or to the fork's parent (its replies are shown apart)."""
        return self.tree.path(self.fork.parent_id if self.fork is not None else self.leaf)

    # --- the reply stream ---

    def apply(self, event: StreamEvent) -> Change | None:
        """Apply one event of a send, edit, regenerate or continue; what changed, or None (a reply this chat does not
        have)."""
        match event:
            case UserEvent(message=message) | EditedEvent(message=message):
                return self.stored_message(message)
            case StartEvent():
                return self.started(event)
            case DeltaEvent():
                return self.text_added(event)
            case DoneEvent(message=message):
                self.tree.add(message)
                return ReplyFinished(message, shown=message.id == self.leaf)
            case ErrorEvent(message=message):
                return Failed(message)
        return None

    def stored_message(self, message: Message) -> BranchShown:
        self.tree.add(message)
        self.show(message.id)
        return BranchShown(message.id)

    def started(self, event: StartEvent) -> RepliesStarted:
        """1. an empty reply per id, in the tree (a continued one: the stored reply, being written again); 2. the
        first ends the shown branch; 3. several are a fork."""
        if event.continued and (stored := self.tree.messages.get(event.message_ids[0])) is not None:
            replies = (msgspec.structs.replace(stored, finish_reason=None, stopped=False, stats=None),)
        else:
            variations = event.variations or [None] * len(event.message_ids)  # a fork that varies: each reply's
            replies = tuple(Message(id=i, conversation_id=self.conversation.id, parent_id=event.parent_id,
                                    role="assistant", content="", created_at=time.time(), variation=variation)
                            for i, variation in zip(event.message_ids, variations))
        for reply in replies:
            self.tree.add(reply)
        self.show(replies[0].id)
        if len(replies) > 1:
            self.fork = Fork(event.parent_id, tuple(event.message_ids))
        return RepliesStarted(replies, self.fork, event.model, tuple(event.retokenized_from), event.temperature)

    def text_added(self, event: DeltaEvent) -> TextAdded | ThinkingAdded | None:
        reply = self.tree.messages.get(event.message_id)
        if reply is None:  # the chat was opened again meanwhile: the reply shows once it is stored
            return None
        # a new Message, not the one a view may hold: a view shows the text as it streams, the tree keeps it
        reasoning = (reply.reasoning_content or "") + event.reasoning
        self.tree.add(msgspec.structs.replace(reply, content=reply.content + event.text,
                                              reasoning_content=reasoning or None))
        if event.reasoning:
            return ThinkingAdded(event.message_id, event.reasoning, event.reasoning_tokens, event.text)
        return TextAdded(event.message_id, event.text)
