"""A stand-in for EngineClient with fixed data, for snapshots and for tests that need no model: the same
methods, returning fixed Structs (fixed ids, timestamps and stats) so that every screenshot is the same. With
thinking=True it plays a thinking model: a chat whose replies thought, and replies that think before they answer. With
long_chat=True, a model with a context of 8k tokens and a chat near its edge, whose last prompt was cut; chats begin
from a summary of another (summarize), and files become documents (upload_document) that chats and messages carry."""

import asyncio
from collections.abc import AsyncIterator
from pathlib import Path

import msgspec

from localchat.app.client.engine_client import EngineError
from localchat.app.protocol.conversations import (
    ContextUse,
    Conversation,
    ConversationTree,
    DeltaEvent,
    DoneEvent,
    EditedEvent,
    EndThinkingResult,
    Message,
    ReplyStats,
    SamplingSettings,
    SearchHit,
    StartEvent,
    StopResult,
    StreamEvent,
    UserEvent,
    Variation,
    Warmth,
    filled,
)
from localchat.app.protocol.documents import Document, DocumentText
from localchat.app.protocol.limits import Limits
from localchat.app.protocol.models import ModelCatalog, ModelInfo, ModelPull
from localchat.app.protocol.system import Health
from localchat.app.sampling_defaults import UNKNOWN_MODEL
from localchat.app.server.app import engine_limits
from localchat.app.server.store import query_words, search_snippet

T0 = 1_700_000_000.0


def stats(prompt: int, cached: int, completion: int, reasoning: int = 0, thinking_s: float | None = None
          ) -> ReplyStats:
    return ReplyStats(prompt_tokens=prompt, cached_tokens=cached, completion_tokens=completion,
                      time_to_first_token_s=0.12, tokens_per_s=42.5, duration_s=1.5, reasoning_tokens=reasoning,
                      thinking_s=thinking_s)


def message(id: str, parent: str | None, role: str, content: str, at: float, reply_stats=None,
            conversation: str = "c_sort", reasoning: str | None = None, num_tokens: int = 0,
            documents: list[str] = ()) -> Message:
    return Message(id=id, conversation_id=conversation, parent_id=parent, role=role, content=content,
                   reasoning_content=reasoning, created_at=T0 + at, num_tokens=num_tokens,
                   finish_reason="stop" if role == "assistant" else None, model="SmolLM2", stats=reply_stats,
                   documents=list(documents))


SORT_CODE = "Use `sorted()`:\n\n```python\nnumbers = [3, 1, 2]\nprint(sorted(numbers))  # [1, 2, 3]\n```"
REVERSE_CODE = "Pass `reverse=True`:\n\n```python\nprint(sorted(numbers, reverse=True))\n```"

MESSAGES = [
    message("m_u1", None, "user", "How do I sort a list in Python?", 1),
    message("m_a1", "m_u1", "assistant", "Call `list.sort()` to sort it in place.", 2, stats(41, 0, 12)),
    message("m_a2", "m_u1", "assistant", SORT_CODE, 3, stats(41, 32, 30)),
    message("m_u2", "m_a2", "user", "And in reverse?", 4),
    message("m_a3", "m_u2", "assistant", REVERSE_CODE, 5, stats(88, 80, 18)),
]

PULLED = "/hub/models--tiny-org--tiny-GGUF/snapshots/0123/tiny.Q4_K_M.gguf"  # where a pull puts its file
PULL_BYTES, PULL_STEP = 3_000_000, 1_000_000  # a pull's file, and what it gets between two looks at it
MODEL_TITLE = "Capitals of Europe"  # what the model names a chat after its first reply
CONTINUED = "And that is how it ends."  # what a continued reply goes on with
FORK_TEMPERATURE = 0.7  # what the engine forks the embedded model at
FORKED = ["A **red** apple.", "A *green* leaf: calm and fresh.", "Blue, like the sea."]


def warmth(state: str, tokens: int, resident: int, on_disk: int, predicted_s: float, summary: str) -> Warmth:
    return Warmth(state=state, tokens=tokens, resident_tokens=resident, on_disk_tokens=on_disk,
                  cold_tokens=tokens - resident - on_disk, predicted_s=predicted_s, pinned=False, summary=summary)


# where each chat's history is, as the engine says it in the list (the others: nothing yet)
WARMTH = {"c_sort": warmth("resident", 140, 138, 0, 0.01, "warm · instant"),
          "c_cats": warmth("on_disk", 1200, 0, 1184, 0.4, "on disk · about 0.4 s"),
          "c_rust": warmth("cold", 3100, 0, 0, 4.2, "cold · about 4 s")}

# a thinking model's chat (thinking=True): a question with two replies, each with its own thinking
PRIME_THOUGHTS = ["91 is odd. Try 7: 7 × 13 = 91, so it has divisors.", "Check 3: 9 + 1 = 10, no. Check 7: yes, 13."]
THINKING_MESSAGES = [
    message("m_q1", None, "user", "Is 91 prime?", 21, conversation="c_think"),
    message("m_r1", "m_q1", "assistant", "No: **91 = 7 × 13**.", 22, stats(30, 0, 40, 28, 3.4), "c_think",
            PRIME_THOUGHTS[0]),
    message("m_r2", "m_q1", "assistant", "No, it is 7 times 13.", 23, stats(30, 16, 52, 40, 12.2), "c_think",
            PRIME_THOUGHTS[1]),
]
THOUGHTS = ["Red is bright.", "Green is calm.", "Blue is deep."]  # what new replies think (a thinking model's)

# a long chat (long_chat=True) on a model with a context of 8k: five exchanges of long questions, the last reply's
# prompt cut to fit (truncate_middle: the first exchange stays, the next two are left out), 6.8k of 8k in use
CONTEXT_LIMIT = 8192
LONG_CONTEXT = 7000  # the last reply's prompt and itself
LONG_CUT = ("m_l7", 4)  # (the first message the last reply saw after its cut, the messages left out)


def long_messages() -> list[Message]:
    messages, parent = [], None
    for turn in range(5):
        question, answer = f"m_l{2 * turn + 1}", f"m_l{2 * turn + 2}"
        context = 1500 * (turn + 1) if turn < 4 else LONG_CONTEXT
        cut = {"dropped_messages": LONG_CUT[1], "dropped_tokens": 4600, "first_kept_id": LONG_CUT[0]} if turn == 4 \
            else {}
        reply_stats = msgspec.structs.replace(stats(context - 60, context - 200, 60), context_tokens=context,
                                              context_limit=CONTEXT_LIMIT, **cut)
        messages += [message(question, parent, "user", f"What happened at the mill in year {1900 + turn}?",
                             40 + 2 * turn, conversation="c_long", num_tokens=1400),
                     message(answer, question, "assistant", f"In {1900 + turn} the mill ground wheat.",
                             41 + 2 * turn, reply_stats, "c_long")]
        parent = answer
    return messages


SUMMARY = "We talked about the mill by the river, year by year from 1900."


def conversation(id: str, title: str, at: float, count: int, active_leaf: str | None = None) -> Conversation:
    return Conversation(id=id, title=title, system_prompt="Be brief.",
                        settings=filled(SamplingSettings(temperature=0.7, max_tokens=64), UNKNOWN_MODEL),
                        created_at=T0 + at,
                        updated_at=T0 + at, message_count=count, active_leaf=active_leaf)


class FakeEngine:
    def __init__(self, thinking: bool = False, long_chat: bool = False):
        self.conversations = {
            "c_sort": conversation("c_sort", "Sorting in Python", 10, len(MESSAGES), "m_a3"),
            "c_cats": conversation("c_cats", "Cats and their habits", 5, 0),
            "c_rust": conversation("c_rust", "Borrow checker questions", 1, 0),
        }
        self.messages = {"c_sort": list(MESSAGES), "c_cats": [], "c_rust": []}
        self.fail_with: Exception | None = None  # raised by every call, to play a lost engine
        self.hold: asyncio.Event | None = None  # when set, replies stream their first words and wait for it
        self.model, self.chat = "SmolLM2", True  # chat False: a base model (no chat template)
        self.thinking = thinking  # a thinking model: its chat "c_think" is the newest, and replies think first
        self.think_until_ended = False  # replies think on (THOUGHTS again and again) until end_thinking()
        self.thinking_ended = asyncio.Event()
        self.end_thinking_calls: list[tuple[str, str | None]] = []
        if thinking:
            self.conversations["c_think"] = conversation("c_think", "Primes", 20, len(THINKING_MESSAGES), "m_r1")
            self.messages["c_think"] = list(THINKING_MESSAGES)
        self.context_limit = CONTEXT_LIMIT if long_chat else None  # None: as a remote engine, not known
        if long_chat:
            self.conversations["c_long"] = conversation("c_long", "The river and the mill", 50, 10, "m_l10")
            self.messages["c_long"] = long_messages()
        self.summary_hold: asyncio.Event | None = None  # when set, a summary is written once it is set
        self.summarize_calls: list[tuple[str, str | None]] = []
        self.refuse_with: EngineError | None = None  # raised by the next sends and regenerates, before any event
        self.documents: dict[str, Document] = {}
        self.document_texts: dict[str, str] = {}  # by document id
        self.sent: list[tuple[str, str, list[str]]] = []  # (conversation, text, documents) of every send
        self.regenerated: list[str] = []  # the message of every regenerate
        self.edited: list[tuple[str, str]] = []  # (message, new text) of every edit
        self.continued: list[str] = []  # the reply of every continue
        self.forks: list[tuple[int, list[Variation] | None]] = []  # (n, variations) of every send and regenerate
        self.pins: list[tuple[str, bool]] = []  # (chat, pinned) of every pin and unpin
        self.pin_refusal: str | None = None  # where set, a pin is refused with it (the budget is full)
        self.named: list[str] = []  # the chat of every name_chat
        self.models_here = [ModelInfo(name="SmolLM2", served_name="SmolLM2", source="embedded", format="gguf",
                                      architecture="llama", quantization="Q4_1", size_bytes=98_000_000,
                                      memory_bytes=95_000_000, supported=True, current=True)]
        self.pulling: ModelPull | None = None  # the last pull, which grows by PULL_STEP at each look
        self.pull_hold: asyncio.Event | None = None  # when set, a pull stays at its first step until it is set
        self.pull_errors: dict[str, str] = {}  # repo -> why its pull fails
        self.title_hold: asyncio.Event | None = None  # when set, a chat is named once it is set (the model is slow)
        self.conversation_hold: asyncio.Event | None = None  # when set, a chat is read once it is set (a slow engine)

    def _check(self) -> None:
        if self.fail_with is not None:
            raise self.fail_with

    async def close(self) -> None:
        pass

    async def health(self) -> Health:
        self._check()
        return Health(status="ready", model=self.model, backend="embedded", pid=1, version="0", chat=self.chat,
                      thinking=self.thinking)

    async def limits(self) -> Limits:
        return engine_limits()

    async def models(self) -> ModelCatalog:
        return ModelCatalog(models=list(self.models_here), current="SmolLM2", switchable=True)

    async def pull_model(self, repo: str, file: str | None = None) -> ModelPull:
        self.pulling = ModelPull(repo=repo, file=file or "tiny.Q4_K_M.gguf", state="downloading",
                                 bytes_total=PULL_BYTES)
        return self.pulling

    async def model_pull(self) -> ModelPull:
        """The pull a step further: PULL_STEP more bytes, then checking, then done (or failed, for pull_errors)."""
        pulled = self.pulling
        if pulled is None:
            raise EngineError(404, "no model has been pulled since the engine started")
        if pulled.repo in self.pull_errors:
            pulled.state, pulled.error = "failed", self.pull_errors[pulled.repo]
        elif pulled.state == "downloading" and (self.pull_hold is None or self.pull_hold.is_set()
                                                or pulled.bytes_done == 0):
            pulled.bytes_done = min(PULL_BYTES, pulled.bytes_done + PULL_STEP)
            pulled.state = "checking" if pulled.bytes_done == PULL_BYTES else "downloading"
        elif pulled.state == "checking":
            pulled.state, pulled.model = "done", PULLED
            self.models_here.append(ModelInfo(name=PULLED, served_name="tiny.Q4_K_M", source="hf-cache",
                                              format="gguf", architecture="llama", quantization="F32",
                                              size_bytes=PULL_BYTES, memory_bytes=None, supported=True,
                                              current=False))
        return msgspec.structs.replace(pulled)

    async def list_conversations(self) -> list[Conversation]:
        """Newest first, each with its warmth (WARMTH, where the chat has one)."""
        self._check()
        listed = sorted(self.conversations.values(), key=lambda c: -c.updated_at)
        return [msgspec.structs.replace(c, warmth=WARMTH.get(c.id)) for c in listed]

    async def pin(self, conversation_id: str) -> Conversation:
        self.pins.append((conversation_id, True))
        if self.pin_refusal is not None:
            raise EngineError(409, self.pin_refusal)
        return await self.update_conversation(conversation_id, pinned=True)

    async def unpin(self, conversation_id: str) -> Conversation:
        self.pins.append((conversation_id, False))
        return await self.update_conversation(conversation_id, pinned=False)

    async def create_conversation(self, title: str | None = None, system_prompt: str = "", settings=None,
                                  documents: list[str] = ()) -> Conversation:
        self._check()
        id = f"c_new{len(self.conversations)}"
        self.conversations[id] = msgspec.structs.replace(conversation(id, title or "New chat", 60, 0),
                                                         system_prompt=system_prompt, documents=list(documents))
        self.messages[id] = []
        return self.conversations[id]

    async def conversation(self, conversation_id: str, token_ids: bool = False) -> ConversationTree:
        self._check()
        if self.conversation_hold is not None:
            await self.conversation_hold.wait()
        chat, messages = self.conversations[conversation_id], list(self.messages[conversation_id])
        used = {i for m in [chat, *messages] for i in m.documents}
        context = ContextUse(LONG_CONTEXT, self.context_limit) if conversation_id == "c_long" else None
        summaries = [c.id for c in self.conversations.values() if c.summary_of == conversation_id]
        return ConversationTree(chat, messages, context, summaries,
                                [self.documents[i] for i in sorted(used) if i in self.documents])

    async def name_chat(self, conversation_id: str) -> Conversation:
        """The chat named MODEL_TITLE (once title_hold is set, where there is one)."""
        self.named.append(conversation_id)
        if self.title_hold is not None:
            await self.title_hold.wait()
        return await self.update_conversation(conversation_id, title=MODEL_TITLE)

    async def summarize(self, conversation_id: str, leaf: str | None = None) -> Conversation:
        self._check()
        self.summarize_calls.append((conversation_id, leaf))
        if self.summary_hold is not None:
            await self.summary_hold.wait()
        origin = self.conversations[conversation_id]
        id = f"c_sum{len(self.summarize_calls)}"
        self.conversations[id] = msgspec.structs.replace(
            conversation(id, f"Summary: {origin.title}", 70, 0), summary_of=conversation_id,
            system_prompt=f"{origin.system_prompt}\n\nA summary of an earlier conversation:\n\n{SUMMARY}")
        self.messages[id] = []
        return self.conversations[id]

    async def upload_document(self, path: str | Path) -> Document:
        self._check()
        path = Path(path)
        text = path.read_text()
        if not text.strip():
            raise EngineError(400, f'"{path.name}" holds no text')
        document = Document(id=f"d_{len(self.documents) + 1}", name=path.name, media_type="text/plain",
                            chars=len(text), tokens=len(text.split()), created_at=T0 + 80)
        self.documents[document.id] = document
        self.document_texts[document.id] = text
        return document

    async def document_text(self, document_id: str) -> DocumentText:
        self._check()
        return DocumentText(document=self.documents[document_id], text=self.document_texts[document_id])

    async def update_conversation(self, conversation_id: str, **fields) -> Conversation:
        self._check()
        updated = msgspec.structs.replace(self.conversations[conversation_id], **fields)
        self.conversations[conversation_id] = updated
        return updated

    async def rename(self, conversation_id: str, title: str) -> Conversation:
        return await self.update_conversation(conversation_id, title=title)

    async def delete_conversation(self, conversation_id: str) -> None:
        self._check()
        del self.conversations[conversation_id], self.messages[conversation_id]

    async def export(self, conversation_id: str, format: str = "markdown", leaf: str | None = None) -> str:
        """Markdown: the title and the branch ending at `leaf`, a message a paragraph; JSON: the whole tree."""
        self._check()
        tree = await self.conversation(conversation_id)
        if format == "json":
            return msgspec.json.encode(tree).decode()
        by_id = {m.id: m for m in tree.messages}
        branch = []
        while leaf is not None:
            branch.insert(0, by_id[leaf])
            leaf = by_id[leaf].parent_id
        return "\n\n".join([f"# {tree.conversation.title}", *(m.content for m in branch)])

    async def search(self, query: str, limit: int = 50) -> list[SearchHit]:
        self._check()
        words = query_words(query)  # the real server's: whole words, its snippets with them marked as matches
        return [SearchHit(conversation_id=cid, conversation_title=self.conversations[cid].title, message_id=m.id,
                          role=m.role, snippet=search_snippet(m.content, words))
                for cid, messages in self.messages.items() for m in messages if words.search(m.content)][:limit]

    async def send(self, conversation_id: str, text: str, parent_id: str | None, n: int = 1, settings=None,
                   documents: list[str] = (), variations: list[Variation] | None = None) -> AsyncIterator[StreamEvent]:
        self.sent.append((conversation_id, text, list(documents)))
        self.forks.append((n, variations))
        if self.refuse_with is not None:
            raise self.refuse_with
        chat = self.conversations[conversation_id]
        if not self.messages[conversation_id] and chat.title == "New chat":  # the first message names it, for now
            self.conversations[conversation_id] = msgspec.structs.replace(chat, title=text)
        user = message(f"m_s{len(self.messages[conversation_id])}", parent_id, "user", text, 30, None,
                       conversation_id, num_tokens=12, documents=documents)
        self.messages[conversation_id].append(user)
        yield UserEvent(message=user)
        async for event in self._replies(conversation_id, user.id, n, variations):
            yield event

    async def stop(self, conversation_id: str, message_id: str | None = None) -> StopResult:
        return StopResult(stopped=[])

    async def end_thinking(self, conversation_id: str, message_id: str | None = None) -> EndThinkingResult:
        self.end_thinking_calls.append((conversation_id, message_id))
        self.thinking_ended.set()
        return EndThinkingResult(ended=[])

    def regenerate(self, conversation_id: str, message_id: str, n: int = 1, settings=None,
                   variations: list[Variation] | None = None) -> AsyncIterator[StreamEvent]:
        self.regenerated.append(message_id)
        self.forks.append((n, variations))
        parent = next(m for m in self.messages[conversation_id] if m.id == message_id)
        parent_id = parent.parent_id if parent.role == "assistant" else parent.id
        return self._replies(conversation_id, parent_id, n, variations)

    async def edit(self, conversation_id: str, message_id: str, content: str, n: int = 1, settings=None,
                   variations: list[Variation] | None = None) -> AsyncIterator[StreamEvent]:
        """A sibling of the user's message `message_id` with the new text, and its replies; or of the reply
        `message_id`, edited (finish_reason "edited"), and nothing after it."""
        self.edited.append((message_id, content))
        old = next(m for m in self.messages[conversation_id] if m.id == message_id)
        if old.role == "assistant":
            reply = msgspec.structs.replace(old, id=f"m_e{len(self.messages[conversation_id])}", content=content,
                                            created_at=T0 + 31, finish_reason="edited", stats=None)
            self.messages[conversation_id].append(reply)
            yield EditedEvent(message=reply)
            return
        user = message(f"m_e{len(self.messages[conversation_id])}", old.parent_id, "user", content, 31, None,
                       conversation_id, num_tokens=12)
        self.messages[conversation_id].append(user)
        yield UserEvent(message=user)
        async for event in self._replies(conversation_id, user.id, n, variations):
            yield event

    async def continue_reply(self, conversation_id: str, message_id: str, settings=None
                             ) -> AsyncIterator[StreamEvent]:
        """The reply goes on with CONTINUED, its earlier tokens all from the cache but the last."""
        self.continued.append(message_id)
        messages = self.messages[conversation_id]
        at, old = next((i, m) for i, m in enumerate(messages) if m.id == message_id)
        yield StartEvent(parent_id=old.parent_id, message_ids=[old.id], continued=True)
        for word in CONTINUED.split(" "):
            yield DeltaEvent(message_id=old.id, index=0, text=" " + word)
            if self.hold is not None:
                await self.hold.wait()
        prompt = old.stats.prompt_tokens + old.stats.completion_tokens
        messages[at] = msgspec.structs.replace(old, content=old.content + " " + CONTINUED, finish_reason="stop",
                                               stats=stats(prompt, prompt - 1, len(CONTINUED.split(" "))))
        yield DoneEvent(message=messages[at])

    async def _replies(self, conversation_id: str, parent_id: str, n: int, variations: list[Variation] | None = None
                       ) -> AsyncIterator[StreamEvent]:
        """n replies (one per variation, where there are variations: each stored with its own)."""
        n = len(variations) if variations else n
        first = len(self.messages[conversation_id])
        ids = [f"m_f{first + i}" for i in range(1, n + 1)]
        yield StartEvent(parent_id=parent_id, message_ids=ids, temperature=FORK_TEMPERATURE if n > 1 else None,
                         variations=variations or [])
        thoughts: dict[str, list[str]] = {id: [] for id in ids}  # a reply's thinking, a token (word) an item
        for i, id in enumerate(ids):
            if self.thinking:
                async for event in self._thoughts(id, i):
                    thoughts[id].append(event.reasoning)
                    yield event
            for word in FORKED[i % len(FORKED)].split(" "):
                yield DeltaEvent(message_id=id, index=i, text=word + " ")
                if self.hold is not None:
                    await self.hold.wait()
        for i, id in enumerate(ids):
            thought = len(thoughts[id])  # tokens, counted in the reply's completion tokens too
            reply_stats = stats(88, 80, 8 + i + thought, thought, 2.5 if self.thinking else None)
            reply = message(id, parent_id, "assistant", FORKED[i % len(FORKED)], 20 + i, reply_stats,
                            conversation_id, "".join(thoughts[id]) or None)
            reply.variation = variations[i] if variations else None
            self.messages[conversation_id].append(reply)
            yield DoneEvent(message=reply)

    async def _thoughts(self, message_id: str, index: int) -> AsyncIterator[DeltaEvent]:
        """A reply's thinking, a word (a token) per event: its THOUGHTS, and with think_until_ended, again and again
        until end_thinking()."""
        words = THOUGHTS[index % len(THOUGHTS)].split(" ")
        count = 0
        while count < len(words) or (self.think_until_ended and not self.thinking_ended.is_set()):
            yield DeltaEvent(message_id=message_id, index=index, text="", reasoning=words[count % len(words)] + " ",
                             reasoning_tokens=count + 1)
            count += 1
            if self.hold is not None:
                await self.hold.wait()
            if self.think_until_ended:
                await asyncio.sleep(0.005)
