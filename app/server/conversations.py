"""Conversation trees: building a branch's prompt from its messages' exact token ids, and generating n
sibling replies as one stream of events.

Every user and assistant message stores the token ids it contributed (chat_template.py). The prompt for a
reply under user message u is: the system prompt's segment + the segments along the root..u path + the
generation prompt. Turn k's prompt and reply are therefore a token-exact prefix of turn k + 1's prompt, and
the engine's prefix cache serves them. A thinking model's template renders a reply differently once the chat goes
on (it drops the reply's thinking): its prompt is the template's rendering of the whole branch, and the prefix cache
serves it up to where that rendering changed. With a remote backend the prompt is the branch as chat messages.
"""

import asyncio
import dataclasses
import functools
import logging
import time
from collections.abc import AsyncIterator, Iterator
from dataclasses import dataclass, field

import msgspec

from localchat.app.protocol.conversations import (
    ContextUse,
    Conversation,
    DeltaEvent,
    DoneEvent,
    EndThinkingResult,
    ErrorEvent,
    Message,
    ReplyStats,
    SamplingSettings,
    StartEvent,
    StreamEvent,
    Variation,
    branch_tokens,
    continuable,
    filled,
)
from localchat.app.server.active_requests import ActiveRequest, ActiveRequests
from localchat.app.server.backends import Backend, BackendRequestError, Update, failure_message
from localchat.app.server.chat_template import ChatTemplate
from localchat.app.server.chat_titles import DEFAULT_TITLE, TITLE_LENGTH, ChatTitles, first_words_title
from localchat.app.server.chat_warmth import ChatWarmth
from localchat.app.server.context_budget import DEFAULT_POLICY, Cut, choose_cut, reply_room
from localchat.app.server.engine_job import EngineJob
from localchat.app.server.sampling import Sampling, reply_sampling
from localchat.app.server.store import Store, StoreError, new_id
from localchat.app.server.template_messages import TemplateMessage, branch_messages, kept_instruction
from localchat.app.server.tool_calls import finish_reason, template_chat, template_tools
from localchat.app.server.variations import (
    VariationRequest,
    instruction_message,
    shared_history,
    variation_settings,
)
from localchat.engine.frontend.outputs import CompletionOutput
from localchat.engine.sampling_limits import LIMITS
from localchat.engine.sampling_params import SamplingParams

SAVE_INTERVAL_S = 1.0  # a streaming reply's text is saved this often
STOP_WAIT_S = 10.0  # how long a delete waits for its stopped replies to be saved
# a fork's reply identical to a sibling's is sampled again (with the next seeds, and wider each time: widened()) at
# most this often, then kept
MAX_RESAMPLES = 3
WIDEN_TEMPERATURE = 0.3  # what each time it is sampled again adds to its temperature (up to the engine's limit)
MAX_DRAFT_SOURCES = 8  # earlier replies to the same message (regenerate, edit) that a new reply may draft from
# a fresh start from a summary (summarize): what the model is asked, at most how long it writes, and how the new
# conversation's system prompt and title say where it comes from
SUMMARY_REQUEST = ("Write a summary of our conversation so far for whoever continues it: every fact, name, number, "
                   "decision and open question it needs, in a few short paragraphs.")
SUMMARY_MAX_TOKENS = 512
SUMMARY_HEADING = "A summary of an earlier conversation, which this one continues:\n\n"
SUMMARY_TITLE = "Summary: "

log = logging.getLogger("localchat.app")


def shown_leaf(conversation: Conversation, messages: list[Message]) -> Message | None:
    """The message that ends the branch shown: the active leaf, else the newest message (None: no messages)."""
    by_id = {m.id: m for m in messages}
    return by_id.get(conversation.active_leaf) or (messages[-1] if messages else None)


def _path_to(message: Message, by_id: dict[str, Message]) -> list[Message]:
    """The branch from the root down to message, from a conversation's messages by id."""
    path = [message]
    while path[0].parent_id is not None:
        path.insert(0, by_id[path[0].parent_id])
    return path


class Conversations:
    def __init__(self, store: Store, backend: Backend, active: ActiveRequests,
                 thinking_token_budget: int | None = None, context_overflow: str = DEFAULT_POLICY):
        """thinking_token_budget and context_overflow: the server's defaults (serve.toml), for conversations that set
        none."""
        self.store, self.backend, self.active = store, backend, active
        self.thinking_token_budget, self.context_overflow = thinking_token_budget, context_overflow
        self.titles = ChatTitles(self)
        self.warmth = ChatWarmth(self)  # where each chat's history is, and the pins that keep chats warm

    # --- the branch as a chat and as token ids (pure: run off the event loop, see to_thread) ---

    def chat(self, conversation: Conversation, path: list[Message]) -> list[dict]:
        """The branch as the chat template takes it: the conversation's tools (its settings') shape how its tool
        calls and results are written (tool_calls.template_chat)."""
        messages = branch_messages(conversation, path, self.document_texts)
        return template_chat(messages, conversation.settings.tools, self.backend.tool_syntax)[0]

    def document_texts(self, ids: list[str]) -> list[tuple[str, str]]:
        """(name, text) of each of these documents."""
        return [(document.name, text) for document, text in map(self.store.document, ids)]

    def template(self, conversation: Conversation) -> ChatTemplate:
        """The backend's chat template (renders_templates), rendering the conversation's tools where the template
        renders tools, and a thinking model's with the conversation's enable_thinking."""
        tools = template_tools(conversation.settings.tools, self.backend.tool_syntax)
        template = self.backend.template
        variables = {"enable_thinking": conversation.settings.enable_thinking} if template.thinks else None
        return template.with_options(tools, variables)

    @property
    def renders_now(self) -> bool:
        """Whether prompts are rendered here now: the backend renders templates, and its model (loaded) chats."""
        return self.backend.renders_templates and self.backend.can_chat

    def message_token_ids(self, conversation: Conversation, path: list[Message], message: Message) -> list[int]:
        """The segment of a user or tool message written after `path` (none where prompts are chat messages)."""
        if not self.backend.renders_templates:
            return []
        chat = self.chat(conversation, [*path, message])
        return self.template(conversation).segment(chat[:-1], chat[-1])

    def prompt(self, conversation: Conversation, path: list[Message], cut: Cut | None = None
               ) -> tuple[list[int] | list[dict[str, str]], list[tuple[str, list[int]]]]:
        """The prompt for a reply after `path` (which ends with the message replied to), leaving out the messages
        `cut` names, and the segments it had to render again (messages stored without token ids), for the store.
        The first message after a cut is rendered again where it follows what it follows now."""
        chat = self.chat(conversation, path)
        if not self.backend.renders_templates:
            return chat, []
        return self._rendered(path, chat, *self._start(conversation, path, chat), cut)

    def _start(self, conversation: Conversation, path: list[Message], chat: list[dict]
               ) -> tuple[ChatTemplate, list[int]]:
        """The conversation's template, and the ids of the chat's system message (its documents with it), rendered
        once for every cut tried (a thinking template renders the whole chat instead: none)."""
        template = self.template(conversation)
        has_system = len(chat) > sum(1 + bool(kept_instruction(m)) for m in path)
        return template, template.segment([], chat[0]) if has_system and not template.thinks else []

    def _rendered(self, path: list[Message], chat: list[dict], template: ChatTemplate, system_ids: list[int],
                  cut: Cut | None, header: bool = True) -> tuple[list[int], list[tuple[str, list[int]]]]:
        """prompt()'s work, from the branch as the template takes it (chat) and its system message's ids; without the
        generation prompt (header False): the branch's history as the next turn starts with it."""
        turns, at = [], len(chat) - sum(1 + bool(kept_instruction(m)) for m in path)
        system = chat[:at]
        for message in path:
            width = 1 + bool(kept_instruction(message))
            turns.append(chat[at : at + width])
            at += width
        kept = [i for i in range(len(path)) if cut is None or not cut.start <= i < cut.first_kept]
        if template.thinks:
            branch = system + [turn for i in kept for turn in turns[i]]
            return template.prompt(branch) if header else template.history(branch), []
        ids, history, repaired = list(system_ids), list(system), []
        for i in kept:
            message = path[i]
            segment = message.token_ids
            after_cut = cut is not None and cut.num_messages > 0 and i == cut.first_kept
            if after_cut or not segment or message.model != self.backend.model_name:  # or another model's
                segment = self._segment(template, history, message, turns[i])
                if not after_cut and message.model in (None, self.backend.model_name):
                    repaired.append((message.id, segment))
            history += turns[i]
            ids += segment
        return ids + (template.generation_prompt(history) if header else []), repaired

    @staticmethod
    def _segment(template: ChatTemplate, history: list[dict], message: Message, turns: list[dict]) -> list[int]:
        """The ids a message adds after `history`, rendered (a kept instruction's turn first)."""
        ids = template.segment(history, turns[0]) if len(turns) > 1 else []
        history = history + turns[:-1]
        if message.role == "assistant" and not message.tool_calls:
            return ids + template.assistant_segment(history, message.content, template.encode(message.content))
        return ids + template.segment(history, turns[-1])

    def history_tokens(self, conversation: Conversation, path: list[Message]) -> list[int]:
        """The branch's tokens as the next turn after it starts with them (its prompt without the generation prompt):
        what the prefix cache can serve of the chat, for its warmth and its pin. Empty where prompts are chat
        messages (a remote engine's), or where there is nothing yet."""
        if not self.renders_now:
            return []
        chat = self.chat(conversation, path)
        if not chat:
            return []
        return self._rendered(path, chat, *self._start(conversation, path, chat), None, header=False)[0]

    def fitted_prompt(self, conversation: Conversation, path: list[Message], settings: SamplingSettings
                      ) -> tuple[list[int] | list[dict[str, str]], list[tuple[str, list[int]]], "Fit | None"]:
        """prompt(), cut to fit the model's context by the conversation's context_overflow policy
        (context_budget.py): with the fit it made (None where the engine is another server's, which refuses a prompt
        too long itself). ContextFull where it cannot fit. The branch (its documents read) and its system message are
        rendered once, whatever the cuts tried."""
        limit = self.backend.max_model_len
        if not self.backend.renders_templates or limit is None:
            return *self.prompt(conversation, path), None
        chat = self.chat(conversation, path)
        start = self._start(conversation, path, chat)
        prompts: dict[Cut, tuple] = {}

        def size(cut: Cut) -> int:
            if cut not in prompts:
                prompts[cut] = self._rendered(path, chat, *start, cut)
            return len(prompts[cut][0])

        policy = settings.context_overflow or self.context_overflow
        cut = choose_cut(path, policy, limit, reply_room(settings.max_tokens, limit), size)
        ids, repaired = prompts[cut]
        dropped = size(Cut(cut.start, cut.start)) - len(ids)
        first_kept = path[cut.first_kept].id if cut.num_messages else None
        return ids, repaired, Fit(limit, cut.num_messages, dropped, first_kept)

    def context_use(self, conversation: Conversation, messages: list[Message]) -> ContextUse | None:
        """The context the active branch (else the newest message's) uses: its last reply's prompt and reply, and the
        messages after it (their stored token ids); before the first message, what its system prompt and documents
        take; None for a conversation with none of these."""
        leaf = shown_leaf(conversation, messages)
        if leaf is None:  # before its first message: what its system prompt and documents hold
            return self._start_use(conversation)
        tokens = branch_tokens(_path_to(leaf, {m.id: m for m in messages}))
        return ContextUse(tokens=tokens, limit=self.backend.max_model_len)

    def _start_use(self, conversation: Conversation) -> ContextUse | None:
        """The context a conversation's system prompt and documents take (None for one without either)."""
        if not (conversation.system_prompt or conversation.documents):
            return None
        if self.renders_now:
            chat = self.chat(conversation, [])
            tokens = len(self.template(conversation).segment([], chat[0])) if chat else 0
        else:  # a remote engine's tokenizer is its own: the documents' counts, where they were made
            tokens = sum(d.tokens for d in self.store.list_documents(conversation.documents))
        return ContextUse(tokens=tokens, limit=self.backend.max_model_len)

    def token_sequences(self, conversation: Conversation) -> list[list[int]]:
        """The tokens of each branch (root to leaf) as the engine saw them: every prompt and reply of the
        conversation is a prefix of one of these."""
        messages = self.store.messages(conversation.id, with_tokens=True)
        by_id, parents = {m.id: m for m in messages}, {m.parent_id for m in messages}
        return [self.prompt(conversation, _path_to(leaf, by_id))[0] for leaf in messages if leaf.id not in parents]

    async def forget(self, conversation: Conversation) -> None:
        """Before a conversation is deleted: drop the cached KV blocks that only it used (none with a remote server's
        own cache, nor with a base model: no chat of it is cached, and its prompts cannot be rendered)."""
        await self._forget(lambda: self.token_sequences(conversation), conversation.id)

    async def forget_text(self, system_text: str) -> None:
        """Drop the cached KV blocks of a chat that starts with this system message (a deleted document's) that no
        conversation shares."""
        def start() -> list[list[int]]:
            try:
                chat, _ = template_chat([TemplateMessage("system", system_text)], None, self.backend.tool_syntax)
                return [self.backend.template.segment([], chat[0])]
            except Exception:  # a template that renders no chat of a system message alone: the blocks age out
                return []
        await self._forget(start)

    async def _forget(self, dropped, deleted: str | None = None) -> None:
        """Drop the blocks of the token sequences dropped() gives that no conversation (but `deleted`) shares."""
        if not self.renders_now:
            return

        def sequences():
            others = [c for c in self.store.list_conversations() if c.id != deleted]
            return dropped(), [s for c in others for s in self.token_sequences(c)]
        dropped_sequences, kept = await asyncio.to_thread(sequences)
        await self.backend.forget(dropped_sequences, kept)

    def user_segments(self, conversation: Conversation, messages: list[Message]) -> list[tuple[str, list[int]]]:
        """Every user message's segment again (after a system prompt change: a template may render the first
        one differently, e.g. with its default system prompt). Assistant segments keep their generated ids."""
        by_id = {m.id: m for m in messages}
        updates = []
        for message in messages:
            if message.role == "assistant":
                continue
            if not self.renders_now or message.model != self.backend.model_name:
                updates.append((message.id, []))  # prompt() renders it again when it is next needed
                continue
            path = _path_to(message, by_id)[:-1]
            updates.append((message.id, self.message_token_ids(conversation, path, message)))
        return updates

    # --- writing ---

    async def retokenize(self, conversation: Conversation) -> None:
        messages = self.store.messages(conversation.id, with_tokens=True)
        updates = await asyncio.to_thread(self.user_segments, conversation, messages)
        if updates:
            self.store.set_token_ids(updates)

    async def add_user_message(self, conversation: Conversation, parent_id: str | None, content: str,
                               tool_call_id: str | None = None, documents: list[str] = ()) -> Message:
        """A user message (carrying these documents before its text), or (with tool_call_id) the result of one of
        the parent's tool calls."""
        self.backend.check_chat()
        self.backend.check_text_size(len(content))
        self.store.list_documents(list(documents))  # each one exists (a StoreError: 404)
        path = self.store.path(conversation.id, parent_id) if parent_id else []
        message = Message(id=new_id("m"), conversation_id=conversation.id, parent_id=parent_id,
                          role="tool" if tool_call_id else "user", content=content, created_at=time.time(),
                          model=self.backend.model_name, tool_call_id=tool_call_id, documents=list(documents))
        token_ids = await asyncio.to_thread(self.message_token_ids, conversation, path, message)
        self.store.add_message(message, token_ids)
        if conversation.message_count == 0 and conversation.title == DEFAULT_TITLE:
            self.store.update_conversation(conversation.id, title=first_words_title(content))
        return message

    async def add_edited_reply(self, conversation: Conversation, original: Message, content: str) -> Message:
        """`content` as a reply beside the reply `original` (an edit of a reply), the branch shown now: written by the
        user (finish_reason "edited"), nothing is generated. Its token ids are the template's rendering of the text
        with the whole closing, as a reply cut short has them: the next message's prompt holds them, and the prefix
        cache serves that prompt up to where the text changed; a continue goes on from the text."""
        self.backend.check_chat()
        self.backend.check_text_size(len(content))
        path = self.store.path(conversation.id, original.parent_id)
        message = Message(id=new_id("m"), conversation_id=conversation.id, parent_id=original.parent_id,
                          role="assistant", content=content, created_at=time.time(), finish_reason="edited",
                          model=self.backend.model_name)
        token_ids = await asyncio.to_thread(self.edited_reply_token_ids, conversation, path, content)
        self.store.add_message(message, token_ids)
        self.store.set_active_leaf(conversation.id, message.id)
        return message

    def edited_reply_token_ids(self, conversation: Conversation, path: list[Message], content: str) -> list[int]:
        """The segment of a reply the user wrote after `path` (none where prompts are chat messages)."""
        if not self.backend.renders_templates:
            return []
        template = self.template(conversation)
        return template.assistant_segment(self.chat(conversation, path), content, template.encode(content))

    async def start_replies(self, conversation: Conversation, parent: Message, n: int,
                            override: SamplingSettings | None = None,
                            variations: list[Variation] | None = None) -> "Replies":
        """Validate and start n replies to `parent` with the conversation's settings (`override`: this request's,
        each sampling value it leaves out the conversation's), or one reply per variation, each varying on purpose
        (variations.py); raises ValueError, BackendRequestError or BackendNotReady before anything streams. The
        replies are stored at once (empty, unfinished) and saved as they grow."""
        n = len(variations) if variations else n
        settings = fork_settings(conversation.settings, override, n, self.backend.sampling.fork_temperature)
        sampling = reply_sampling(settings, n, self.backend.tool_syntax, self.thinking_token_budget,
                                  self.backend.sampling)
        self.backend.check_chat()
        path = self.store.path(conversation.id, parent.id)
        prompt, repaired, fit = await asyncio.to_thread(self.fitted_prompt, conversation, path, settings)
        if repaired:
            self.store.set_token_ids(repaired)
        replies = Replies(self, conversation, path, parent, sampling, fit, prompt, variations=variations)
        if variations:
            replies.requests, replies.shared = await asyncio.to_thread(self._plan_variations, replies, settings)
        beside = self.store.replies_beside(conversation.id, parent, MAX_DRAFT_SOURCES)
        await replies.open(beside)
        try:
            replies.store_started()
        except StoreError:  # the conversation was deleted meanwhile: its 404, and nothing left running
            await replies.job.close()
            raise
        self.store.set_active_leaf(conversation.id, replies.message_ids[0])  # the newest branch is shown
        return replies

    async def continue_reply(self, conversation: Conversation, reply: Message,
                             override: SamplingSettings | None = None) -> "Replies":
        """The reply (cut at max_tokens, stopped, interrupted or edited) goes on where it ended, in the same message:
        its prompt is its parent's, then the ids it wrote without an end of turn, so the prefix cache serves the reply
        so far and only the new tokens are computed. Raises as start_replies does."""
        if not continuable(reply):
            raise ValueError(f"message {reply.id} is not a reply cut at max tokens, stopped or edited: only those can "
                             "be continued (regenerate writes a new one)")
        if self.active.matching(conversation.id, reply.id):
            raise BackendRequestError(f"reply {reply.id} is being written: it can be continued once it ends", 409)
        if not self.backend.renders_templates:
            raise BackendRequestError("continuing a reply needs the embedded engine: a remote server renders its "
                                      "prompts itself")
        settings = fork_settings(conversation.settings, override, 1, self.backend.sampling.fork_temperature)
        sampling = reply_sampling(settings, 1, self.backend.tool_syntax, self.thinking_token_budget,
                                  self.backend.sampling)
        self.backend.check_chat()
        *path, reply = self.store.path(conversation.id, reply.id)  # with its token ids
        prompt, repaired, fit, generated = await asyncio.to_thread(self.continued_prompt, conversation, path, reply,
                                                                   settings)
        if repaired:
            self.store.set_token_ids(repaired)
        replies = Replies(self, conversation, path, path[-1], sampling, fit, prompt, continued=(reply, generated))
        await replies.open()
        self.store.reopen_message(reply.id)
        self.store.set_active_leaf(conversation.id, reply.id)
        return replies

    def continued_prompt(self, conversation: Conversation, path: list[Message], reply: Message,
                         settings: SamplingSettings) -> tuple[list[int], list[tuple[str, list[int]]], "Fit | None",
                                                              list[int]]:
        """The prompt that continues `reply` after `path` (which ends with its parent): the parent's prompt, cut to
        fit with room for the reply so far and max_tokens more, then the ids the reply wrote (its text tokenized
        where they are not stored: another model's, or an interrupted reply's); with the segments rendered again, the
        fit, and those ids."""
        template = self.template(conversation)
        stored = reply.token_ids if reply.model == self.backend.model_name else None
        generated = (stored and template.generated_ids(self.chat(conversation, path), reply.content, stored)
                     or template.encode(reply.content))
        room = msgspec.structs.replace(settings, max_tokens=len(generated) + settings.max_tokens)
        ids, repaired, fit = self.fitted_prompt(conversation, path, room)
        if fit is not None and len(ids) + len(generated) >= fit.limit:
            raise ValueError(f"the reply fills the model's context of {fit.limit:,} tokens: it cannot go on")
        return ids + generated, repaired, fit, generated

    def _plan_variations(self, replies: "Replies", settings: SamplingSettings
                         ) -> tuple[list[VariationRequest], list[int]]:
        """Each variation's prompt (the history, then its instruction), sampling and fit; and the history they all
        start with, which their job computes first (empty where prompts are chat messages: a remote engine's own
        prefix cache shares it)."""
        conversation, path, parent = replies.conversation, replies.path, replies.parent
        requests = []
        for i, variation in enumerate(replies.variations):
            own = variation_settings(settings, variation, i)
            sampling = reply_sampling(own, 1, self.backend.tool_syntax, self.thinking_token_budget,
                                      self.backend.sampling)
            branch = path + ([instruction_message(conversation, parent, variation.instruction)]
                             if variation.instruction else [])
            prompt, _, fit = self.fitted_prompt(conversation, branch, own)
            requests.append(VariationRequest(prompt, sampling, fit))
        history = self.history_tokens(conversation, path)
        return requests, history and shared_history(history, [r.prompt for r in requests])

    async def summarize(self, conversation: Conversation, leaf_id: str | None) -> Conversation:
        """A new conversation that starts from the model's summary of a branch (default: the one shown): the summary
        closes its system prompt, and it links to this one (summary_of). The branch is cut to fit the context as
        its replies would be, by truncate_middle where the conversation's policy is to stop."""
        self.backend.check_chat()
        leaf = (self.store.get_message(conversation.id, leaf_id) if leaf_id is not None
                else shown_leaf(conversation, self.store.messages(conversation.id)))
        if leaf is None:
            raise ValueError("the conversation has no messages to summarize")
        request = Message(id=new_id("m"), conversation_id=conversation.id, parent_id=leaf.id, role="user",
                          content=SUMMARY_REQUEST, created_at=time.time(), model=self.backend.model_name)
        path = [*self.store.path(conversation.id, leaf.id), request]
        settings = msgspec.structs.replace(
            conversation.settings, max_tokens=SUMMARY_MAX_TOKENS, json_mode=False, tool_choice="none",
            context_overflow="truncate_middle" if conversation.settings.context_overflow == "stop"
            else conversation.settings.context_overflow)
        sampling = reply_sampling(settings, 1, self.backend.tool_syntax, self.thinking_token_budget)
        prompt, _, _ = await asyncio.to_thread(self.fitted_prompt, conversation, path, settings)
        job = await EngineJob.open(self.backend, self.active, [prompt], sampling.params,
                                   conversation_id=conversation.id)
        summary = "".join(out.text for out in await job.collect())
        if not summary.strip():
            raise BackendRequestError("the model wrote an empty summary: try again, or with another model", 502)
        system = "\n\n".join(part for part in (conversation.system_prompt, SUMMARY_HEADING + summary.strip()) if part)
        title = f"{SUMMARY_TITLE}{conversation.title}"[:TITLE_LENGTH]
        return self.store.create_conversation(title, system, conversation.settings, summary_of=conversation.id)

    async def stop(self, conversation_id: str, message_id: str | None = None, wait: bool = False) -> list[str]:
        """Abort the conversation's requests (or the one writing message_id); with wait, return once their
        replies are saved."""
        matching = self.active.matching(conversation_id, message_id)
        await self._abort(matching, wait)
        return list(dict.fromkeys(message_id for r in matching.values() for message_id in r.message_ids))

    async def end_thinking(self, conversation_id: str, message_id: str | None = None) -> EndThinkingResult:
        """The conversation's running replies (or the one writing message_id) close their thinking now and go on
        with their answers."""
        ended = []
        for request_id, request in self.active.matching(conversation_id, message_id).items():
            if await self.backend.end_thinking(request_id):
                ended += request.message_ids
        return EndThinkingResult(ended=list(dict.fromkeys(ended)))

    async def stop_all(self, wait: bool = False) -> None:
        """Abort every request, /v1 ones and a title's included (before the model is switched, or the process
        stops)."""
        self.titles.stop()
        await self._abort(dict(self.active.requests), wait)

    async def _abort(self, requests: dict[str, ActiveRequest], wait: bool) -> None:
        for request_id in requests:
            await self.backend.abort(request_id)
        if wait and requests:
            await asyncio.wait([asyncio.create_task(r.done.wait()) for r in requests.values()], timeout=STOP_WAIT_S)


def fork_settings(settings: SamplingSettings, override: SamplingSettings | None, n: int,
                  fork_temperature: float) -> SamplingSettings:
    """The settings n replies sample with: the conversation's, overridden by the request's; a fork (n > 1) samples at
    fork_temperature at least, for different replies, unless its request sets a temperature."""
    if override is not None:
        settings = filled(override, settings)
    if n > 1 and (override is None or override.temperature is msgspec.UNSET):
        settings = msgspec.structs.replace(settings, temperature=max(settings.temperature, fork_temperature))
    return settings


def widened(params: SamplingParams, step: int) -> SamplingParams:
    """What a reply sampled again for the `step`th time samples from: hotter by WIDEN_TEMPERATURE a step (to the
    engine's limit), its top_p and min_p moved toward taking every token (1 and 0) by a share of MAX_RESAMPLES a
    step; its top_k, a cut the user set, stays."""
    share = min(1.0, step / MAX_RESAMPLES)
    hotter = min(LIMITS["temperature"][1], params.temperature + WIDEN_TEMPERATURE * step)
    return dataclasses.replace(params, temperature=round(hotter, 3),
                               top_p=round(params.top_p + (1.0 - params.top_p) * share, 3),
                               min_p=round(params.min_p * (1.0 - share), 3))


@dataclass(frozen=True)
class Fit:
    """How a reply's prompt fits the model's context: its length (`limit`), and what a cut left out of the branch
    (none: 0 messages); first_kept: the first message after the cut."""

    limit: int
    dropped_messages: int
    dropped_tokens: int
    first_kept: str | None


@dataclass
class PartialReply:
    """One reply as it streams."""

    message_id: str
    text: str = ""
    reasoning: str = ""  # a thinking model's thinking
    token_ids: list[int] = field(default_factory=list)
    num_tokens: int = 0  # a remote server streams text only: then one per delta
    first_token_at: float | None = None
    finish_reason: str | None = None
    saved_text: int = 0  # characters already in the store
    done: bool = False  # stored with its finish reason
    draft_tokens: int = 0  # speculative decoding: scored, and kept (the engine's totals)
    accepted_draft_tokens: int = 0
    reasoning_tokens: int = 0
    thinking_ended_at: float | None = None  # when its answer (or its end) followed its thinking
    saved_reasoning: int = 0
    resampled: int = 0  # times it was sampled again for being the same as a sibling
    params: SamplingParams | None = None  # what it was sampled with at last, where not its request's (sampled again)
    prompt_tokens: int | None = None  # of its prompt (a varying fork's replies each have their own), once known
    cached_tokens: int = 0

    def add(self, out: CompletionOutput) -> None:
        now = time.monotonic()
        if (out.text or out.token_ids or out.reasoning) and self.first_token_at is None:
            self.first_token_at = now
        if self.reasoning_tokens and self.thinking_ended_at is None and (out.text or out.finish_reason):
            self.thinking_ended_at = now
        self.reasoning += out.reasoning
        self.reasoning_tokens = out.num_reasoning_tokens or self.reasoning_tokens
        self.text += out.text
        self.token_ids += out.token_ids
        self.num_tokens += len(out.token_ids) or int(bool(out.text))
        self.finish_reason = out.finish_reason or self.finish_reason
        self.draft_tokens, self.accepted_draft_tokens = out.num_draft_tokens, out.num_accepted_tokens


class Replies:
    """n sibling replies being generated; events() streams them, saves their text every SAVE_INTERVAL_S
    (a crash loses at most that much) and each one whole as it completes."""

    def __init__(self, conversations: Conversations, conversation: Conversation, path: list[Message],
                 parent: Message, sampling: Sampling, fit: Fit | None = None,
                 prompt: list[int] | list[dict] | None = None,
                 continued: tuple[Message, list[int]] | None = None, variations: list[Variation] | None = None):
        """continued: the stored reply that goes on (one, in place of new ones), and the ids it wrote so far;
        variations: one per reply, of a fork that varies on purpose (variations.py)."""
        self.conversations, self.conversation, self.path, self.parent = conversations, conversation, path, parent
        self.store = conversations.store
        self.sampling, self.fit, self.prompt = sampling, fit, prompt
        self.variations = variations or []  # a fork that varies on purpose: one per reply
        self.requests: list[VariationRequest] = []  # then each reply's own prompt, sampling and fit
        self.shared: list[int] = []  # and the history their prompts start with, computed first
        self.repeats: list[PartialReply] = []  # finished the same as a sibling: sampled again once the others end
        self.continued = continued is not None
        if continued is None:
            self.replies = [PartialReply(new_id("m")) for _ in range(sampling.params.n)]
        else:
            reply, generated = continued
            self.replies = [PartialReply(reply.id, text=reply.content, reasoning=reply.reasoning_content or "",
                                         token_ids=list(generated), saved_text=len(reply.content),
                                         saved_reasoning=len(reply.reasoning_content or ""))]
        self.job: EngineJob | None = None  # open(): the engine request that writes them
        self.started = time.monotonic()
        # siblings are listed by created_at: replies in the order they were asked for (a continued one keeps its place)
        self.created_at = continued[0].created_at if continued else time.time()
        self.saved_at = self.started

    @property
    def message_ids(self) -> list[str]:
        return [r.message_id for r in self.replies]

    async def open(self, draft_sources: list[str] = ()) -> None:
        """Start the engine request that writes the replies, or a varying fork's, one per reply after their shared
        history (draft_sources: the replies they replace, to draft from)."""
        prompts, params = [self.prompt], self.sampling.params
        if self.requests:
            prompts, params = [r.prompt for r in self.requests], [r.sampling.params for r in self.requests]
        self.job = await EngineJob.open(self.conversations.backend, self.conversations.active, prompts, params,
                                        conversation_id=self.conversation.id, message_ids=self.message_ids,
                                        draft_sources=draft_sources, prefix=self.shared)

    @functools.cached_property
    def template(self) -> ChatTemplate:
        return self.conversations.template(self.conversation)

    @functools.cached_property
    def history(self) -> list[dict]:
        """The branch replied to, as the template takes it (the same for each of the n replies)."""
        return self.conversations.chat(self.conversation, self.path)

    def variation(self, reply: PartialReply) -> Variation | None:
        return self.variations[self.message_ids.index(reply.message_id)] if self.variations else None

    def store_started(self) -> None:
        """Every reply as an empty, unfinished message: a crash from now on leaves it marked interrupted."""
        for reply in self.replies:
            self.store.add_message(self._message(reply), [])

    async def events(self) -> AsyncIterator[StreamEvent]:
        model = self.conversations.backend.model_name
        others = sorted({m.model for m in self.path if m.model and m.model != model})
        yield StartEvent(parent_id=self.parent.id, message_ids=self.message_ids, model=model, retokenized_from=others,
                         temperature=self.sampling.params.temperature, continued=self.continued,
                         variations=self.variations)
        try:
            async for prompt, update in self.job.updates():
                for event in self._take(prompt, update):
                    yield event
                if self.repeats and all(r.done or r in self.repeats for r in self.replies):
                    for reply in list(self.repeats):  # the others have ended: sampled again, the request still open
                        yield DoneEvent(message=await self._sampled_again(reply))
                if time.monotonic() - self.saved_at >= SAVE_INTERVAL_S:
                    self._save_progress()
        except Exception as error:  # the request or the engine failed: what was written so far is kept, stopped
            log.warning("a reply stream failed: %s", error)
            yield ErrorEvent(message=f"generation failed: {failure_message(error)}")
        finally:
            # a client that went away (or an engine failure): keep each unfinished reply's partial text, then
            # close the job (its request aborted, so that its KV blocks are freed)
            unfinished = [self._finish(r) for r in self.replies if not r.done]
            await self.job.close()
            if self.parent.parent_id is None and not self.continued:  # the chat's first exchange: it can be named
                self.conversations.titles.start(self.conversation.id)
            await self.conversations.warmth.refresh(self.conversation.id)  # a pinned chat's pin follows its branch
        for message in unfinished:
            yield DoneEvent(message=message)

    def _take(self, prompt: int, update: Update) -> Iterator[StreamEvent]:
        """The update of the job's prompt `prompt` into its replies (a varying fork's: each reply its own prompt),
        its text as a delta event each; then a done event for each reply that has finished, once its prompt's size is
        known (a remote server reports it only at the end)."""
        if update.prompt_tokens is not None:
            n = self.job.n
            for reply in self.replies[prompt * n : (prompt + 1) * n]:
                reply.prompt_tokens, reply.cached_tokens = update.prompt_tokens, update.cached_tokens or 0
        for out in update.outputs:
            reply = self.replies[out.index]
            thought = reply.reasoning_tokens
            reply.add(out)
            if out.text or out.reasoning or reply.reasoning_tokens != thought:  # a token of thinking, space or not
                yield DeltaEvent(message_id=reply.message_id, index=out.index, text=out.text, reasoning=out.reasoning,
                                 reasoning_tokens=reply.reasoning_tokens)
        for reply in self.replies:
            if reply.prompt_tokens is not None and reply.finish_reason and not reply.done and reply not in self.repeats:
                if self._repeats_a_sibling(reply):
                    self.repeats.append(reply)
                else:
                    yield DoneEvent(message=self._finish(reply))

    def _repeats_a_sibling(self, reply: PartialReply) -> bool:
        """Whether a fork's sampled reply, just finished, is the same as a sibling that finished before it."""
        params = self.sampling.params
        if params.n == 1 or params.greedy or self.prompt is None or reply.finish_reason not in ("stop", "length") \
                or self.variations:  # replies that differ on purpose are not sampled again
            return False
        return any(other is not reply and (other.done or other in self.repeats) and other.text == reply.text
                   and other.reasoning == reply.reasoning for other in self.replies)

    async def _sampled_again(self, reply: PartialReply) -> Message:
        """A reply that repeats a sibling, sampled again with the seeds after its siblings' (a new random one where
        the request named none) and wider each time (widened) until it differs, at most MAX_RESAMPLES times; stored
        and returned, its stats saying how it was sampled at last. Each sample is a job of its own, beside the
        replies' (open until they are all stored): a stop or a departed client aborts it."""
        params, index = self.sampling.params, self.replies.index(reply)
        self.repeats.remove(reply)
        while reply.resampled < MAX_RESAMPLES and self._repeats_a_sibling(reply):
            again = dataclasses.replace(widened(params, reply.resampled + 1), n=1,
                                        seed=params.seed_for(params.n * (reply.resampled + 1) + index))
            job = await EngineJob.open(self.conversations.backend, self.conversations.active, [self.prompt], again,
                                       conversation_id=self.conversation.id, message_ids=[reply.message_id])
            fresh = PartialReply(reply.message_id, first_token_at=reply.first_token_at, resampled=reply.resampled + 1,
                                 params=again, prompt_tokens=reply.prompt_tokens, cached_tokens=reply.cached_tokens)
            async with job:
                async for _, update in job.updates():
                    for out in update.outputs:
                        fresh.add(out)
                    fresh.first_token_at = reply.first_token_at  # the reply's first token came with the first sample
            self.replies[index] = reply = fresh
        return self._finish(reply)

    def _save_progress(self) -> None:
        grown = [(r.message_id, r.text, r.reasoning or None) for r in self.replies
                 if not r.done and (len(r.text) > r.saved_text or len(r.reasoning) > r.saved_reasoning)]
        if grown:
            self.store.set_partial_content(grown)
            for reply in self.replies:
                reply.saved_text, reply.saved_reasoning = len(reply.text), len(reply.reasoning)
        self.saved_at = time.monotonic()

    def _message(self, reply: PartialReply) -> Message:
        return Message(id=reply.message_id, conversation_id=self.conversation.id, parent_id=self.parent.id,
                       role="assistant", content=reply.text, reasoning_content=reply.reasoning.strip() or None,
                       created_at=self.created_at + self.message_ids.index(reply.message_id) * 1e-6,
                       finish_reason=reply.finish_reason, stopped=reply.finish_reason == "abort",
                       model=self.conversations.backend.model_name, variation=self.variation(reply))

    def _finish(self, reply: PartialReply) -> Message:
        """Store the reply whole: its text, finish reason, stats and token ids."""
        now = time.monotonic()
        reply.finish_reason = reply.finish_reason or "abort"
        num_tokens = reply.num_tokens
        decode_time = now - reply.first_token_at if reply.first_token_at else 0.0
        message = self._message(reply)
        own = self.requests[self.message_ids.index(reply.message_id)] if self.requests else None
        sampling, fit = (own.sampling, own.fit) if own else (self.sampling, self.fit)
        prompt_tokens = reply.prompt_tokens or 0
        message.stats = ReplyStats(
            prompt_tokens=prompt_tokens, cached_tokens=reply.cached_tokens, completion_tokens=num_tokens,
            time_to_first_token_s=round(reply.first_token_at - self.started, 4) if reply.first_token_at else None,
            tokens_per_s=round((num_tokens - 1) / decode_time, 2) if num_tokens > 1 and decode_time > 0 else None,
            duration_s=round(now - self.started, 4), draft_tokens=reply.draft_tokens,
            accepted_draft_tokens=reply.accepted_draft_tokens, reasoning_tokens=reply.reasoning_tokens,
            thinking_s=round((reply.thinking_ended_at or now) - reply.first_token_at, 2)
            if reply.reasoning_tokens and reply.first_token_at else None,
            context_tokens=prompt_tokens + num_tokens, context_limit=fit.limit if fit else None,
            temperature=(reply.params or sampling.params).temperature, resampled=reply.resampled)
        if reply.params is not None:  # sampled again, wider: how
            message.stats.top_p, message.stats.min_p = reply.params.top_p, reply.params.min_p
        if fit is not None and fit.dropped_messages:
            message.stats.dropped_messages, message.stats.dropped_tokens = fit.dropped_messages, fit.dropped_tokens
            message.stats.first_kept_id = fit.first_kept
        token_ids = []
        if self.conversations.renders_now:  # the tokens as generated, tool calls included
            history, kept = self.history, kept_instruction(message)
            if kept:  # the instruction is a turn of the history from now on, before the reply
                turn = {"role": "user", "content": kept}
                token_ids, history = self.template.segment(history, turn), [*history, turn]
            token_ids += self.template.assistant_segment(history, reply.text, reply.token_ids)
        reader = sampling.calls
        content, calls = reader.read(reply.text) if reader else (reply.text, [])
        message.content = content or ""
        if calls:
            message.tool_calls, message.finish_reason = calls, finish_reason(message.finish_reason, calls)
        reply.done = True
        return self.store.finish_message(message, token_ids)
