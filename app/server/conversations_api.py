"""localchat's own API under /api: conversations as trees, replies streamed as server-sent events."""

import asyncio
import re
from collections.abc import AsyncIterator, Awaitable
from typing import Annotated, Literal

import msgspec
from litestar import Controller, Request, Response, delete, get, patch, post
from litestar.di import NamedDependency
from litestar.exceptions import HTTPException, ValidationException
from litestar.params import FromPath, FromQuery, JSONBody, QueryParameter
from litestar.response import ServerSentEvent, ServerSentEventMessage
from msgspec import UNSET

from localchat.app.chat_defaults import chat_defaults
from localchat.app.markdown import export_markdown
from localchat.app.protocol.conversations import (
    ContinueReply,
    Conversation,
    ConversationCreate,
    ConversationDefaults,
    ConversationTree,
    ConversationUpdate,
    EditedEvent,
    EditMessage,
    EndThinkingResult,
    Message,
    Regenerate,
    SamplingSettings,
    SearchHit,
    SendMessage,
    StopRequest,
    StopResult,
    StreamEvent,
    SummarizeRequest,
    UserEvent,
    Variation,
    filled,
)
from localchat.app.server.backends import BackendDep, BackendRequestError
from localchat.app.server.chat_titles import DEFAULT_TITLE
from localchat.app.server.config import quoted
from localchat.app.server.conversations import Conversations, Replies, shown_leaf
from localchat.app.server.disconnect import while_connected
from localchat.app.server.openapi import EventStream, MarkdownOrJSON
from localchat.app.server.sampling import reply_sampling
from localchat.app.server.store import Store

StoreDep = NamedDependency[Store]
ConversationsDep = NamedDependency[Conversations]
Id = FromPath[str]


class ConversationController(Controller):
    path = "/api/conversations"

    @post("/")
    async def create(self, data: JSONBody[ConversationCreate], store: StoreDep, backend: BackendDep) -> Conversation:
        """documents: ids from POST /api/documents, placed after the system prompt (chats that start with the same
        documents share their KV blocks). A system prompt or settings left out: the model's defaults (GET
        /api/conversation-defaults)."""
        defaults = chat_defaults(backend.parameters, backend.sampling)
        settings = _checked(filled(data.settings, defaults.settings) if data.settings else defaults.settings)
        system_prompt = defaults.system_prompt if data.system_prompt is None else data.system_prompt
        store.list_documents(data.documents)  # each one exists (404 otherwise)
        return store.create_conversation(data.title or DEFAULT_TITLE, system_prompt, settings,
                                         documents=data.documents)

    @get("/")
    async def list(self, store: StoreDep, conversations: ConversationsDep) -> list[Conversation]:
        """Newest activity first; the newest 100 each with its warmth: where its history is (resident, on disk, cold)
        and what it adds to the next first token's wait, from the engine's measured rates."""
        return await conversations.warmth.listed(store.list_conversations())

    @get("/{conversation_id:str}")
    async def tree(self, conversation_id: Id, store: StoreDep, conversations: ConversationsDep,
                   token_ids: FromQuery[bool] = False) -> ConversationTree:
        """Every message, and the context the active branch uses of the model's."""
        conversation = store.get_conversation(conversation_id)
        messages = store.messages(conversation_id, token_ids)
        carried = dict.fromkeys([*conversation.documents, *(d for m in messages for d in m.documents)])
        context = await asyncio.to_thread(conversations.context_use, conversation, messages)  # it may tokenize
        return ConversationTree(conversation, messages, context,
                                store.summaries_of(conversation_id), store.list_documents(list(carried)))

    @patch("/{conversation_id:str}")
    async def update(self, conversation_id: Id, data: JSONBody[ConversationUpdate], store: StoreDep,
                     conversations: ConversationsDep) -> Conversation:
        """Rename, set the system prompt or the sampling settings, the branch to show (active_leaf), or, while it has
        no messages, the documents it starts with."""
        before = store.get_conversation(conversation_id)
        if data.settings is not UNSET:  # a sampling value left out keeps the conversation's
            data.settings = _checked(filled(data.settings, before.settings))
        if data.documents is not UNSET:
            if before.message_count:
                raise HTTPException(status_code=409, detail="a conversation's documents are set before its first "
                                                            "message: start a new chat, or attach them to a message")
            store.list_documents(data.documents)  # each one exists (404 otherwise)
        if data.active_leaf is not UNSET:
            store.get_message(conversation_id, data.active_leaf)
            store.set_active_leaf(conversation_id, data.active_leaf)
        store.update_conversation(conversation_id, title=None if data.title is UNSET else data.title,
                                  system_prompt=None if data.system_prompt is UNSET else data.system_prompt,
                                  settings=None if data.settings is UNSET else data.settings,
                                  documents=None if data.documents is UNSET else data.documents)
        after = store.get_conversation(conversation_id)
        if after.system_prompt != before.system_prompt or after.settings.tools != before.settings.tools:
            await conversations.retokenize(after)  # both are written into the prompt's first segment
        await conversations.warmth.refresh(conversation_id)  # a pinned chat's pin follows the branch shown
        return after

    @post("/{conversation_id:str}/pin", status_code=200)
    async def pin(self, conversation_id: Id, store: StoreDep, conversations: ConversationsDep) -> Conversation:
        """Keep the chat warm: its history's KV blocks are evicted last (and read back from disk now), within the pin
        budget that /health reports (409 beyond it); it stays pinned across restarts, following the branch shown."""
        await conversations.warmth.pin(store.get_conversation(conversation_id))
        return store.get_conversation(conversation_id)

    @delete("/{conversation_id:str}/pin", status_code=200)
    async def unpin(self, conversation_id: Id, store: StoreDep, conversations: ConversationsDep) -> Conversation:
        """The chat's blocks go back to the LRU, as the most recently used."""
        store.get_conversation(conversation_id)
        await conversations.warmth.unpin(conversation_id)
        return store.get_conversation(conversation_id)

    @delete("/{conversation_id:str}")
    async def remove(self, conversation_id: Id, store: StoreDep, conversations: ConversationsDep) -> None:
        """Stops its replies first (their streams end cleanly), drops the KV blocks only it used, then deletes it."""
        conversation = store.get_conversation(conversation_id)
        await conversations.stop(conversation_id, wait=True)
        await conversations.warmth.forget(conversation_id)  # its pin
        await conversations.forget(conversation)  # its own cached KV blocks, in memory and on disk
        store.delete_conversation(conversation_id)

    @post("/{conversation_id:str}/messages", status_code=200, operation_class=EventStream)
    async def send(self, conversation_id: Id, data: JSONBody[SendMessage], store: StoreDep,
                   conversations: ConversationsDep) -> ServerSentEvent:
        """A user message under any parent (or a new root), or a tool's result under the message that called it;
        then n replies as sibling branches."""
        conversation = store.get_conversation(conversation_id)
        parent = store.get_message(conversation_id, data.parent_id) if data.parent_id is not None else None
        if data.tool_call_id is not None:
            _check_tool_result(store, parent, data.tool_call_id)
        return await _send(conversations, conversation, data.parent_id, data.content, _replies(data), data.settings,
                           data.tool_call_id, data.reply, data.documents)

    @post("/{conversation_id:str}/messages/{message_id:str}/edit", status_code=200, operation_class=EventStream)
    async def edit(self, conversation_id: Id, message_id: Id, data: JSONBody[EditMessage], store: StoreDep,
                   conversations: ConversationsDep) -> ServerSentEvent:
        """A new user message beside the user message `message_id` (a sibling branch), then its replies; or, for a
        reply, the edited reply beside it (an `edited` event, finish_reason "edited"), to go on from: the next message
        or a continue."""
        conversation = store.get_conversation(conversation_id)
        original = store.get_message(conversation_id, message_id)
        if original.role == "assistant":
            conversations.backend.ensure_ready()
            edited = await conversations.add_edited_reply(conversation, original, data.content)
            return _event_stream(_only(EditedEvent(message=edited)))
        if original.role != "user":
            raise ValidationException(f"message {quoted(message_id)} is a tool's result: it cannot be edited")
        return await _send(conversations, conversation, original.parent_id, data.content, _replies(data),
                           data.settings, documents=original.documents)  # the edited message carries its documents

    @post("/{conversation_id:str}/messages/{message_id:str}/regenerate", status_code=200,
          operation_class=EventStream)
    async def regenerate(self, conversation_id: Id, message_id: Id, data: JSONBody[Regenerate], store: StoreDep,
                         conversations: ConversationsDep) -> ServerSentEvent:
        """n more replies beside the reply `message_id` (or n replies to the user message `message_id`)."""
        conversation = store.get_conversation(conversation_id)
        message = store.get_message(conversation_id, message_id)
        parent = store.get_message(conversation_id, message.parent_id) if message.role == "assistant" else message
        n, variations = _replies(data)
        replies = await _started(conversations.start_replies(conversation, parent, n, data.settings, variations))
        return _event_stream(replies.events())

    @post("/{conversation_id:str}/messages/{message_id:str}/continue", status_code=200, operation_class=EventStream)
    async def continue_reply(self, conversation_id: Id, message_id: Id, data: JSONBody[ContinueReply],
                             store: StoreDep, conversations: ConversationsDep) -> ServerSentEvent:
        """The reply `message_id`, cut at max_tokens, stopped or edited, goes on where it ended: the same message
        grows (its start event says `continued`; its deltas are the new text). Its prompt is the branch and the tokens
        the reply wrote, without an end of turn: the prefix cache serves them (its stats' cached_tokens), and only
        the new tokens are computed."""
        conversation = store.get_conversation(conversation_id)
        reply = store.get_message(conversation_id, message_id)
        replies = await _started(conversations.continue_reply(conversation, reply, data.settings))
        return _event_stream(replies.events())

    @post("/{conversation_id:str}/stop", status_code=200)
    async def stop(self, conversation_id: Id, data: JSONBody[StopRequest], store: StoreDep,
                   conversations: ConversationsDep) -> StopResult:
        """Stop the running generations of the conversation (or the one writing `message_id`); their replies
        are kept as far as they got, marked stopped."""
        store.get_conversation(conversation_id)
        return StopResult(stopped=await conversations.stop(conversation_id, data.message_id))

    @post("/{conversation_id:str}/end-thinking", status_code=200)
    async def end_thinking(self, conversation_id: Id, data: JSONBody[StopRequest], store: StoreDep,
                           conversations: ConversationsDep) -> EndThinkingResult:
        """The running replies of the conversation (or the one writing `message_id`) close their thinking now and go
        on with their answers (a thinking model's: see /health's `thinking`). The stop endpoint ends them whole."""
        store.get_conversation(conversation_id)
        return await conversations.end_thinking(conversation_id, data.message_id)

    @post("/{conversation_id:str}/title", status_code=200)
    async def title(self, conversation_id: Id, store: StoreDep, conversations: ConversationsDep) -> Conversation:
        """The chat, once the model has named it in a few words after its first reply (its title until then: its
        first message's words). The server names a chat by itself once its first reply ends, in the background: a
        title's request waits while replies are written and gives way to one that starts. This answers when that is
        done; a chat without a reply, renamed, or named already is answered as it is."""
        store.get_conversation(conversation_id)
        return await conversations.titles.named(conversation_id)

    @post("/{conversation_id:str}/summarize", status_code=201)
    async def summarize(self, request: Request, conversation_id: Id, data: JSONBody[SummarizeRequest],
                        store: StoreDep, conversations: ConversationsDep) -> Conversation:
        """A fresh start: the model summarizes the branch that ends at `leaf` (default: the one shown), and a new
        conversation begins from that summary (its system prompt ends with it), linked to this one (summary_of; this
        one's tree lists it in summaries). Answers once the summary is written; a client that leaves before ends it
        (nothing is stored)."""
        conversation = store.get_conversation(conversation_id)
        try:
            return await while_connected(request, conversations.summarize(conversation, data.leaf))
        except ValueError as error:
            if isinstance(error, BackendRequestError):
                raise
            raise ValidationException(str(error)) from None

    @get("/{conversation_id:str}/export", operation_class=MarkdownOrJSON)
    async def export(self, conversation_id: Id, store: StoreDep,
                     format: FromQuery[Literal["markdown", "json"]] = "markdown",
                     leaf: FromQuery[str | None] = None) -> Response:
        """Markdown: the branch that ends at `leaf` (default: the active branch, else the newest message).
        JSON: the whole tree."""
        conversation = store.get_conversation(conversation_id)
        name = re.sub(r"[^A-Za-z0-9._-]+", "-", conversation.title).strip("-")[:60] or conversation.id
        if format == "json":
            tree = ConversationTree(conversation, store.messages(conversation_id))
            return Response(msgspec.json.format(msgspec.json.encode(tree)), media_type="application/json",
                            headers={"Content-Disposition": f'attachment; filename="{name}.json"'})
        if leaf is None:
            shown = shown_leaf(conversation, store.messages(conversation_id))
            leaf = shown.id if shown else None
        path = store.path(conversation_id, leaf) if leaf else []
        return Response(export_markdown(conversation, path), media_type="text/markdown",
                        headers={"Content-Disposition": f'attachment; filename="{name}.md"'})


class SearchController(Controller):
    path = "/api/search"

    @get("/")
    async def search(self, store: StoreDep, q: Annotated[str, QueryParameter(min_length=1)],
                     limit: Annotated[int, QueryParameter(ge=1, le=500)] = 50) -> list[SearchHit]:
        """Messages matching an FTS5 query over every conversation, best first. Searched on a worker thread: over
        long chats it takes a while, and the event loop goes on streaming the replies meanwhile."""
        if "\x00" in q:
            raise ValidationException("the query contains a NUL character")
        return await asyncio.to_thread(store.search, q, limit)


class ConversationDefaultsController(Controller):
    @get("/api/conversation-defaults")
    async def defaults(self, backend: BackendDep) -> ConversationDefaults:
        """What a new conversation gets where it sets no system prompt or settings, for the model the engine runs:
        a small model (the embedded one) a lower temperature and a short system prompt (app/chat_defaults.py)."""
        return chat_defaults(backend.parameters, backend.sampling)


def _checked(settings: SamplingSettings) -> SamplingSettings:
    """Settings that cannot work are refused where they are set, not at the next reply."""
    try:
        reply_sampling(settings, 1)
    except ValueError as error:
        raise ValidationException(f"settings: {error}") from None
    return settings


def _replies(data: SendMessage | EditMessage | Regenerate) -> tuple[int, list[Variation] | None]:
    """What a request asks for: n replies, or one per variation (n, where given, their number)."""
    if data.variations is None:
        return data.n, None
    if data.n not in (1, len(data.variations)):
        raise ValidationException(f"n is {data.n} but {len(data.variations)} variations were given: leave n out, or "
                                  "give one variation per reply")
    return len(data.variations), data.variations


async def _started(replies: Awaitable[Replies]) -> Replies:
    """Replies that start, or the 400 of a ValueError (a BackendRequestError keeps its own status)."""
    try:
        return await replies
    except ValueError as error:
        if isinstance(error, BackendRequestError):
            raise
        raise ValidationException(str(error)) from None


def _check_tool_result(store: Store, parent: Message | None, tool_call_id: str) -> None:
    """A tool's result goes under the assistant message whose call it answers, or under an earlier result of
    that message's calls."""
    while parent is not None and parent.role == "tool":
        parent = store.get_message(parent.conversation_id, parent.parent_id)
    calls = parent.tool_calls or [] if parent is not None and parent.role == "assistant" else []
    if tool_call_id not in {call.id for call in calls}:
        raise ValidationException(f"tool_call_id {quoted(tool_call_id)} is not a tool call of the message it answers "
                                  "(parent_id: the assistant message that called, or a result after it)")


async def _send(conversations: Conversations, conversation: Conversation, parent_id: str | None, content: str,
                replies: tuple[int, list[Variation] | None], settings: SamplingSettings | None,
                tool_call_id: str | None = None, reply: bool = True, documents: list[str] = ()) -> ServerSentEvent:
    """replies: their number, and a variation for each (or None: _replies)."""
    if not content.strip() and tool_call_id is None and not documents:
        raise ValidationException("the message is empty")
    conversations.backend.ensure_ready()
    user = await conversations.add_user_message(conversation, parent_id, content, tool_call_id, documents)
    if not reply:
        return _event_stream(_only(UserEvent(message=user)))
    try:
        n, variations = replies
        started = await _started(conversations.start_replies(conversation, user, n, settings, variations))
    except Exception:
        conversations.store.delete_message(conversation.id, user.id)  # nothing was answered: leave no trace
        raise
    return _event_stream(_prepend(UserEvent(message=user), started.events()))


async def _only(event: StreamEvent) -> AsyncIterator[StreamEvent]:
    yield event


async def _prepend(first: StreamEvent, rest: AsyncIterator[StreamEvent]) -> AsyncIterator[StreamEvent]:
    yield first
    async for event in rest:
        yield event


def _event_stream(events: AsyncIterator[StreamEvent]) -> ServerSentEvent:
    async def encode() -> AsyncIterator[ServerSentEventMessage]:
        async for event in events:
            yield ServerSentEventMessage(event=type(event).__struct_config__.tag,
                                         data=msgspec.json.encode(event).decode())

    return ServerSentEvent(encode())

