"""Chat titles: a chat is named by its first message's words at once, and after its first reply the model names it in a
few words (as Open WebUI and ChatGPT do), in the background and never ahead of a reply: the title's request waits until
no other request is in flight, and gives way (is aborted, to be asked again) as soon as one starts. The embedded model
is tiny, so what it writes is cleaned (one line, no quotes or Markdown, at most TITLE_CHARS); where nothing usable is
left, the first words stay. A chat the user renamed keeps its name."""

import asyncio
import logging
import re
import time

import msgspec

from localchat.app.protocol.conversations import Conversation, Message
from localchat.app.server.engine_job import EngineJob
from localchat.app.server.sampling import reply_sampling
from localchat.app.server.store import new_id

DEFAULT_TITLE = "New chat"
TITLE_LENGTH = 60  # of a title taken from the first message's words (or a summary's: conversations.py)
TITLE_CHARS = 48  # of a title the model wrote
TITLE_MAX_TOKENS = 16
TITLE_TRIES = 3  # times a title's request starts again after giving way to a reply
TITLE_REQUEST = "Write a title for this chat in three to six words. Answer with the title only."

log = logging.getLogger("localchat.app")


def first_words_title(content: str) -> str:
    """A chat's title from its first message: its words, cut at TITLE_LENGTH."""
    words = " ".join(content.split())
    if len(words) > TITLE_LENGTH:
        words = words[: TITLE_LENGTH - 1].rstrip() + "…"
    return words or DEFAULT_TITLE


def clean_title(text: str) -> str | None:
    """A title from what the model wrote: its first line (after a preamble such as "Here's a title:"), without
    Markdown, a "Title:" label, quotes or closing punctuation but ? and !, its spaces one each, at most one colon
    ("Rain: A Process"), cut at a word within TITLE_CHARS; None where nothing is left."""
    lines = [line.strip() for line in text.splitlines() if line.strip(" #*_-\"'`")]
    if lines and lines[0].endswith(":"):  # a preamble, and the title after it (if the model got that far)
        lines = lines[1:]
    line = re.sub(r"^[\s#*_>-]*(?:(?:chat\s+)?title\s*:\s*)?", "", lines[0] if lines else "", flags=re.IGNORECASE)
    line = " ".join(line.replace("*", "").replace("`", "").split())
    line = ":".join(line.split(":")[:2])  # "A: B: A: B…", a model that repeats itself
    line = line.strip("\"'“”‘’«» .:;,")
    if len(line) > TITLE_CHARS:
        head = line[:TITLE_CHARS]
        line = (head.rsplit(" ", 1)[0] if " " in head else head[:-1]).rstrip(".:;,- ") + "…"
    return line if any(character.isalnum() for character in line) else None


class GaveWay(Exception):
    """A title's request was aborted for a request that started meanwhile."""


class ChatTitles:
    """The titles being written, one task per chat; `conversations` is the Conversations they are written for."""

    def __init__(self, conversations):
        self.conversations = conversations
        self.tasks: dict[str, asyncio.Task] = {}

    def start(self, conversation_id: str) -> asyncio.Task:
        """Name the chat in the background (once: a chat being named is not named twice at once)."""
        task = self.tasks.get(conversation_id)
        if task is None or task.done():
            task = asyncio.get_running_loop().create_task(self._name(conversation_id))
            self.tasks[conversation_id] = task
            task.add_done_callback(lambda done: self.tasks.pop(conversation_id, None) if self.tasks.get(
                conversation_id) is done else None)
        return task

    async def named(self, conversation_id: str) -> Conversation:
        """The chat once the model has named it (named now if it was not yet and still has its first message's
        words); a client that leaves does not end the naming."""
        task = self.start(conversation_id)
        try:
            await asyncio.shield(task)
        except asyncio.CancelledError:
            if not task.cancelled():  # the client left; the naming goes on
                raise
        return self.conversations.store.get_conversation(conversation_id)

    def stop(self) -> None:
        """End the titles being written (a model switch, the process stopping: their requests, among the active ones,
        are aborted with the others)."""
        for task in list(self.tasks.values()):
            task.cancel()

    async def _name(self, conversation_id: str) -> None:
        store = self.conversations.store
        try:
            conversation = store.get_conversation(conversation_id)
            exchange = self._first_exchange(conversation)
            if exchange is None:
                return
            for _ in range(TITLE_TRIES):
                await self.conversations.active.idle.wait()
                try:
                    title = clean_title(await self._ask(conversation, exchange))
                except GaveWay:
                    continue
                if title:
                    store.rename_conversation(conversation_id, title, only_if=conversation.title)
                return
        except asyncio.CancelledError:
            raise
        except Exception as error:  # a chat deleted meanwhile, the model switched or failed: the first words stay
            log.info("no title for %s: %s", conversation_id, error)

    def _first_exchange(self, conversation: Conversation) -> list[Message] | None:
        """The chat's first message and the reply shown to it, where the chat still has that message's words as its
        title (None: it has none yet, or the user or the model named it)."""
        messages = self.conversations.store.messages(conversation.id)
        first = next((m for m in messages if m.parent_id is None and m.role == "user"), None)
        if first is None or conversation.title != first_words_title(first.content):
            return None
        replies = [m for m in messages if m.parent_id == first.id and m.role == "assistant" and m.content.strip()]
        if not replies:
            return None
        shown = next((m for m in replies if m.id == conversation.active_leaf), replies[0])
        return [first, shown]

    async def _ask(self, conversation: Conversation, exchange: list[Message]) -> str:
        """What the model answers when asked for a title after the exchange; GaveWay where another request starts
        meanwhile (the title's is aborted then and there)."""
        conversations, backend = self.conversations, self.conversations.backend
        backend.check_chat()
        request = Message(id=new_id("m"), conversation_id=conversation.id, parent_id=exchange[-1].id, role="user",
                          content=TITLE_REQUEST, created_at=time.time(), model=backend.model_name)
        settings = msgspec.structs.replace(conversation.settings, temperature=0.0, max_tokens=TITLE_MAX_TOKENS,
                                           json_mode=False, tool_choice="none", enable_thinking=False, stop=[],
                                           context_overflow="truncate_middle")
        sampling = reply_sampling(settings, 1, backend.tool_syntax, None, backend.sampling)
        prompt, _, _ = await asyncio.to_thread(conversations.fitted_prompt, conversation, [*exchange, request],
                                               settings)
        if conversations.active.busy.is_set():
            raise GaveWay
        job = await EngineJob.open(backend, conversations.active, [prompt], sampling.params, gives_way=True)
        reading = asyncio.ensure_future(job.collect())
        started = asyncio.ensure_future(conversations.active.busy.wait())  # a request: the title gives way at once
        try:
            await asyncio.wait([reading, started], return_when=asyncio.FIRST_COMPLETED)
            if not reading.done():
                raise GaveWay
            return "".join(out.text for out in reading.result())
        finally:
            started.cancel()
            reading.cancel()
            await job.close()
