"""Where each chat's history is (its warmth, in the chat list) and the pins that keep chats warm.

A chat's history is its shown branch as token ids (Conversations.history_tokens), kept here per conversation until
the conversation changes, and handed to the engine under the conversation's id: the engine keeps each chat's block
hashes too, so a list of chats costs a few cache lookups each, not a walk over every block. A pin is stored with the
conversation and given to the engine again whenever the chat's branch moves on, and after every model load (a start,
a switch, a reload)."""

import asyncio
import logging
import threading
from collections import OrderedDict
from typing import TYPE_CHECKING

from localchat.app.kv_cache_words import warmth_of
from localchat.app.protocol.conversations import Conversation
from localchat.app.server.backends import BackendNotReady, BackendRequestError
from localchat.app.server.store import StoreError

if TYPE_CHECKING:
    from localchat.app.server.conversations import Conversations

WARMTH_LIST_LIMIT = 100  # the newest chats whose warmth the list carries (older ones: none)
HISTORIES_KEPT = 1024  # chats whose history tokens are kept between lists
PIN_WATCH_S = 0.5  # how often the watcher looks for a model that became ready (to pin the pinned chats again)

log = logging.getLogger("localchat.app")


class ChatWarmth:
    def __init__(self, conversations: "Conversations"):
        self.conversations = conversations
        self._lock = threading.Lock()
        self._histories: OrderedDict[str, tuple[tuple, list[int]]] = OrderedDict()
        self._watcher: asyncio.Task | None = None

    @property
    def backend(self):
        return self.conversations.backend

    def history(self, conversation: Conversation) -> list[int]:
        """The chat's history as token ids (its shown branch; the system prompt and documents alone before its first
        message), kept until the chat changes. Runs off the event loop (it may render and tokenize)."""
        version = (conversation.active_leaf, conversation.updated_at, conversation.message_count,
                   conversation.system_prompt, self.backend.model_name)
        with self._lock:
            kept = self._histories.get(conversation.id)
        if kept is not None and kept[0] == version:
            return kept[1]
        tokens = self.conversations.history_tokens(conversation, self._branch(conversation))
        with self._lock:
            self._histories[conversation.id] = (version, tokens)
            self._histories.move_to_end(conversation.id)
            while len(self._histories) > HISTORIES_KEPT:
                self._histories.popitem(last=False)
        return tokens

    def _branch(self, conversation: Conversation) -> list:
        """The shown branch, root first, with token ids."""
        store = self.conversations.store
        leaf = conversation.active_leaf
        if leaf is None and conversation.message_count:
            leaf = store.messages(conversation.id)[-1].id
        try:
            return store.path(conversation.id, leaf) if leaf else []
        except StoreError:  # the shown leaf is gone: the newest message's branch
            messages = store.messages(conversation.id)
            return store.path(conversation.id, messages[-1].id) if messages else []

    async def listed(self, conversations: list[Conversation]) -> list[Conversation]:
        """The conversations, the newest WARMTH_LIST_LIMIT of them with their warmth (where the engine can say)."""
        if not self.conversations.renders_now:
            return conversations

        def measure() -> None:
            for conversation in conversations[:WARMTH_LIST_LIMIT]:
                tokens = self.history(conversation)
                warmth = self.backend.warmth(conversation.id, tokens) if tokens else None
                conversation.warmth = warmth_of(warmth) if warmth is not None else None

        await asyncio.to_thread(measure)
        return conversations

    async def pin(self, conversation: Conversation) -> None:
        """Keep the chat warm from now on (a 409 over the pin budget, the chat left unpinned). A chat with nothing in
        it yet is pinned once it has."""
        if not self.backend.renders_templates:  # a remote engine's cache is its own: the backend says so
            await self.backend.pin(conversation.id, [])
        tokens = await asyncio.to_thread(self.history, conversation)
        if tokens:
            await self.backend.pin(conversation.id, tokens)
        self.conversations.store.set_pinned(conversation.id, True)

    async def unpin(self, conversation_id: str) -> None:
        self.conversations.store.set_pinned(conversation_id, False)
        await self.backend.unpin(conversation_id)

    async def forget(self, conversation_id: str) -> None:
        """A conversation about to be deleted: its pin goes, and its history here."""
        await self.backend.unpin(conversation_id)
        with self._lock:
            self._histories.pop(conversation_id, None)

    async def refresh(self, conversation_id: str) -> None:
        """A chat's branch moved on (a reply, another branch shown, a new system prompt): a pinned one's pin follows
        it. Over the budget its pin stays as it was (logged)."""
        try:
            conversation = self.conversations.store.get_conversation(conversation_id)
        except StoreError:  # deleted meanwhile
            return
        if conversation.pinned and self.conversations.renders_now:
            await self._pin_again(conversation)

    async def _pin_again(self, conversation: Conversation) -> None:
        tokens = await asyncio.to_thread(self.history, conversation)
        if not tokens:
            return
        try:
            await self.backend.pin(conversation.id, tokens)
        except (BackendRequestError, BackendNotReady) as error:
            log.warning("chat %s stays pinned as it was: %s", conversation.id, error)

    def start_watching(self) -> None:
        """Pin the pinned chats again whenever a model becomes ready, from now until stop_watching() (_watch)."""
        self._watcher = asyncio.get_running_loop().create_task(self._watch())

    def stop_watching(self) -> None:
        if self._watcher is not None:
            self._watcher.cancel()

    async def _watch(self) -> None:
        """For the server's life: each time a model becomes ready (a start, a switch, a reload after keep_alive), pin
        every pinned chat again, the newest first (their blocks on disk are read back into memory)."""
        pinned_for = None
        while True:
            loading = self.backend.loading
            if loading.ready and loading is not pinned_for and self.conversations.renders_now:
                pinned_for = loading
                for conversation in self.conversations.store.pinned_conversations():
                    await self._pin_again(conversation)
            await asyncio.sleep(PIN_WATCH_S)
