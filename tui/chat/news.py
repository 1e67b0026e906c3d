"""What a part of the chat screen tells the screen for another part to take in (Textual messages, which bubble up to
the screen; it hands each one down to the part it concerns): the way parts update each other, instead of writing each
other's state."""

from dataclasses import dataclass

from textual.message import Message


@dataclass
class ChatsChanged(Message):
    """The chats as the engine stores them changed (one was created, replied in, named, renamed, pinned, deleted or
    summarized into a new one): the chat list is read again. open_newest (at start): then the newest chat is opened
    (the last one), unless the user has begun on another meanwhile."""

    open_newest: bool = False


@dataclass
class ContextLimitKnown(Message):
    """A reply on screen was stored, with what its stats say of the model's context: how long it is (None: they do
    not say, as a remote engine's). The gauge and the divider where the prompt was cut are shown again: the reply
    changed the branch's use of the context."""

    limit: int | None


@dataclass
class ModelNamed(Message):
    """A reply was written with `model` (another client may have switched the engine's model meanwhile)."""

    model: str
