"""Conversation trees: building a branch's prompt from its messages' exact token ids, and generating n
sibling replies as one stream of events.

Every user and assistant message stores the token ids it contributed (chat_template.py). The prompt for a
reply under user message u is: the system prompt's segment + the segments along the root..u path + the
generation prompt. Turn k's prompt and reply are therefore a token-exact prefix of turn k + 1's prompt, and
the engine's prefix cache serves them. With a remote backend the prompt is the branch as chat messages.
"""

import time
import uuid
from collections.abc import AsyncIterator
from dataclasses import dataclass, field

from localchat.app.backends import Backend, Update
from localchat.app.protocol import (
    MAX_N, DeltaEvent, DoneEvent, ErrorEvent, Message, ReplyStats, SamplingSettings, StartEvent, StreamEvent,
    Conversation,
)
from localchat.app.store import Store, new_id
from localchat.engine.sampling_params import SamplingParams

DEFAULT_TITLE = "New chat"
TITLE_LENGTH = 60


def sampling_params(settings: SamplingSettings, n: int) -> SamplingParams:
    """Raises ValueError on a value out of range."""
    if not 1 <= n <= MAX_N:
        raise ValueError(f"n must be in [1, {MAX_N}], got {n}")
    return SamplingParams(n=n, temperature=settings.temperature, top_p=settings.top_p, top_k=settings.top_k,
                          min_p=settings.min_p, repetition_penalty=settings.repetition_penalty,
                          presence_penalty=settings.presence_penalty, frequency_penalty=settings.frequency_penalty,
                          seed=settings.seed, max_tokens=settings.max_tokens, stop=list(settings.stop))


@dataclass
class Running:
    """The requests in flight, so that stop, delete and shutdown can abort them."""

    requests: dict[str, tuple[str | None, list[str]]] = field(default_factory=dict)  # id -> (conversation, msgs)

    def add(self, request_id: str, conversation_id: str | None = None, message_ids: list[str] = ()) -> None:
        self.requests[request_id] = (conversation_id, list(message_ids))

    def remove(self, request_id: str) -> None:
        self.requests.pop(request_id, None)

    def matching(self, conversation_id: str, message_id: str | None = None) -> dict[str, list[str]]:
        return {rid: ids for rid, (cid, ids) in self.requests.items()
                if cid == conversation_id and (message_id is None or message_id in ids)}


class Conversations:
    def __init__(self, store: Store, backend: Backend, running: Running):
        self.store, self.backend, self.running = store, backend, running

    # --- the branch as a chat and as token ids ---

    def chat(self, conversation: Conversation, path: list[Message]) -> list[dict[str, str]]:
        system = [{"role": "system", "content": conversation.system_prompt}] if conversation.system_prompt else []
        return system + [{"role": m.role, "content": m.content} for m in path]

    def user_token_ids(self, conversation: Conversation, path: list[Message], content: str) -> list[int]:
        template = self.backend.template
        if template is None:
            return []
        return template.segment(self.chat(conversation, path), {"role": "user", "content": content})

    def prompt(self, conversation: Conversation, path: list[Message]) -> list[int] | list[dict[str, str]]:
        """The prompt for a reply after `path` (which ends with the message replied to)."""
        chat = self.chat(conversation, path)
        template = self.backend.template
        if template is None:
            return chat
        system = len(chat) - len(path)
        ids = template.segment([], chat[0]) if system else []
        repaired = []
        for i, message in enumerate(path):
            segment = message.token_ids
            if not segment or message.model != self.backend.model_name:  # written by another model or backend
                history = chat[: system + i]
                if message.role == "user":
                    segment = template.segment(history, chat[system + i])
                else:
                    segment = template.assistant_segment(history, message.content, template.encode(message.content))
                if message.model in (None, self.backend.model_name):
                    repaired.append((message.id, segment))
            ids += segment
        if repaired:
            self.store.set_token_ids(repaired)
        return ids + template.generation_prompt(chat)

    def retokenize(self, conversation: Conversation) -> None:
        """After a system prompt change: the user messages' segments again (a template may render the first
        one differently, e.g. with its default system prompt). Assistant segments keep their generated ids."""
        messages = {m.id: m for m in self.store.messages(conversation.id, with_tokens=True)}
        updates = []
        for message in messages.values():
            if message.role != "user":
                continue
            if self.backend.template is None or message.model != self.backend.model_name:
                updates.append((message.id, []))  # prompt() renders it again when it is next needed
                continue
            path, parent = [], message.parent_id
            while parent is not None:
                path.insert(0, messages[parent])
                parent = messages[parent].parent_id
            updates.append((message.id, self.user_token_ids(conversation, path, message.content)))
        if updates:
            self.store.set_token_ids(updates)

    # --- writing ---

    def add_user_message(self, conversation: Conversation, parent_id: str | None, content: str) -> Message:
        path = self.store.path(conversation.id, parent_id) if parent_id else []
        message = Message(id=new_id("m"), conversation_id=conversation.id, parent_id=parent_id, role="user",
                          content=content, created_at=time.time(), model=self.backend.model_name)
        self.store.add_message(message, self.user_token_ids(conversation, path, content))
        if conversation.message_count == 0 and conversation.title == DEFAULT_TITLE:
            title = " ".join(content.split())[:TITLE_LENGTH] or DEFAULT_TITLE
            self.store.update_conversation(conversation.id, title=title)
        return message

    async def start_replies(self, conversation: Conversation, parent: Message, n: int,
                            settings: SamplingSettings) -> "Replies":
        """Validate and start n replies to `parent`; raises ValueError, BackendRequestError or BackendNotReady
        before anything streams."""
        params = sampling_params(settings, n)
        path = self.store.path(conversation.id, parent.id)
        prompt = self.prompt(conversation, path)
        replies = Replies(self, conversation, path, parent, params, uuid.uuid4().hex)
        replies.stream = await self.backend.open(prompt, params, replies.request_id)
        self.running.add(replies.request_id, conversation.id, replies.message_ids)
        self.store.set_active_leaf(conversation.id, replies.message_ids[0])  # the newest branch is shown
        return replies

    async def stop(self, conversation_id: str, message_id: str | None = None) -> list[str]:
        stopped = []
        for request_id, message_ids in self.running.matching(conversation_id, message_id).items():
            await self.backend.abort(request_id)
            stopped += message_ids
        return stopped


@dataclass
class Branch:
    message_id: str
    text: str = ""
    token_ids: list[int] = field(default_factory=list)
    num_tokens: int = 0  # a remote server streams text only: then one per delta
    first_token_at: float | None = None
    finish_reason: str | None = None
    saved: bool = False


class Replies:
    """n sibling replies being generated; events() streams them and saves each one as it completes."""

    def __init__(self, conversations: Conversations, conversation: Conversation, path: list[Message],
                 parent: Message, params: SamplingParams, request_id: str):
        self.conversations, self.conversation, self.path, self.parent = conversations, conversation, path, parent
        self.params, self.request_id = params, request_id
        self.branches = [Branch(new_id("m")) for _ in range(params.n)]
        self.stream: AsyncIterator[Update] | None = None
        self.started = time.monotonic()
        self.created_at = time.time()  # siblings are listed by created_at: replies in the order they were asked for
        self.prompt_tokens: int | None = None
        self.cached_tokens = 0

    @property
    def message_ids(self) -> list[str]:
        return [b.message_id for b in self.branches]

    async def events(self) -> AsyncIterator[StreamEvent]:
        yield StartEvent(parent_id=self.parent.id, message_ids=self.message_ids)
        try:
            async for update in self.stream:
                if update.prompt_tokens is not None:
                    self.prompt_tokens, self.cached_tokens = update.prompt_tokens, update.cached_tokens or 0
                for out in update.outputs:
                    branch = self.branches[out.index]
                    if (out.text or out.token_ids) and branch.first_token_at is None:
                        branch.first_token_at = time.monotonic()
                    branch.text += out.text
                    branch.token_ids += out.token_ids
                    branch.num_tokens += len(out.token_ids) or int(bool(out.text))
                    branch.finish_reason = out.finish_reason or branch.finish_reason
                    if out.text:
                        yield DeltaEvent(message_id=branch.message_id, index=out.index, text=out.text)
                if self.prompt_tokens is not None:  # a remote server reports the prompt only at the end
                    for branch in self.branches:
                        if branch.finish_reason and not branch.saved:
                            yield DoneEvent(message=self._save(branch))
        except Exception as error:  # the engine failed: what was written so far is kept, marked stopped
            yield ErrorEvent(message=f"generation failed: {error}")
        finally:
            # a client that went away (or an engine failure): keep each unfinished reply's partial text, then
            # abort the request so that its KV blocks are freed
            unsaved = [self._save(b) for b in self.branches if not b.saved]
            self.conversations.running.remove(self.request_id)
            if unsaved:
                await self.conversations.backend.abort(self.request_id)
        for message in unsaved:
            yield DoneEvent(message=message)

    def _save(self, branch: Branch) -> Message:
        now = time.monotonic()
        finish_reason = branch.finish_reason or "abort"
        num_tokens = branch.num_tokens
        decode_time = now - branch.first_token_at if branch.first_token_at else 0.0
        stats = ReplyStats(
            prompt_tokens=self.prompt_tokens or 0, cached_tokens=self.cached_tokens, completion_tokens=num_tokens,
            time_to_first_token_s=round(branch.first_token_at - self.started, 4) if branch.first_token_at else None,
            tokens_per_s=round((num_tokens - 1) / decode_time, 2) if num_tokens > 1 and decode_time > 0 else None,
            duration_s=round(now - self.started, 4))
        message = Message(id=branch.message_id, conversation_id=self.conversation.id, parent_id=self.parent.id,
                          role="assistant", content=branch.text,
                          created_at=self.created_at + self.message_ids.index(branch.message_id) * 1e-6,
                          finish_reason=finish_reason, stopped=finish_reason == "abort",
                          model=self.conversations.backend.model_name, stats=stats)
        template = self.conversations.backend.template
        token_ids = []
        if template is not None:
            history = self.conversations.chat(self.conversation, self.path)
            token_ids = template.assistant_segment(history, branch.text, branch.token_ids)
        branch.saved = True
        return self.conversations.store.add_message(message, token_ids)

