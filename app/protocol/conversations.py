"""localchat's conversations under /api: conversation trees and their messages, the requests that write replies,
the event stream of a send, edit or regenerate, and search."""

from typing import Annotated, Literal

import msgspec
from msgspec import UNSET, Meta, Struct, UnsetType

from localchat.app.protocol.documents import Document
from localchat.app.protocol.limits import (
    NOT_BLANK,
    FrequencyPenalty,
    MaxTokens,
    MinP,
    NonBlankText,
    PresencePenalty,
    RepetitionPenalty,
    ReplyCount,
    Seed,
    StopStrings,
    Temperature,
    Text,
    ThinkingBudget,
    TopK,
    TopP,
)
from localchat.app.protocol.openai import Tool, ToolCall
from localchat.app.protocol.sampling import SamplingDefaults
from localchat.engine.sampling_limits import LIMITS

MAX_DOCUMENTS = 16  # of a conversation's start, or of one message
DocumentIds = Annotated[list[str], msgspec.Meta(max_length=MAX_DOCUMENTS)]
MAX_INSTRUCTION_CHARS = 1000  # of a fork's variation: a short last turn after the history
Instruction = Annotated[str, msgspec.Meta(max_length=MAX_INSTRUCTION_CHARS, pattern=NOT_BLANK)]


class SamplingSettings(Struct, kw_only=True, forbid_unknown_fields=True):
    """A conversation's sampling settings (a request may override them). A sampling value left out (UNSET) is the
    model's default where a conversation is created (SamplingDefaults) and the conversation's own where a request
    overrides its settings; a stored conversation has every one."""

    temperature: Temperature | UnsetType = UNSET
    top_p: TopP | UnsetType = UNSET
    top_k: TopK | UnsetType = UNSET
    min_p: MinP | UnsetType = UNSET
    repetition_penalty: RepetitionPenalty | UnsetType = UNSET
    presence_penalty: PresencePenalty | UnsetType = UNSET
    frequency_penalty: FrequencyPenalty | UnsetType = UNSET
    max_tokens: MaxTokens = 512
    ignore_eos: bool = False  # go on past the model's end of turn up to max_tokens (benchmarks and tests)
    seed: Seed | None = None
    stop: StopStrings = msgspec.field(default_factory=list)
    json_mode: bool = False  # every reply is a JSON object (grammar-constrained)
    tools: list[Tool] = msgspec.field(default_factory=list)  # functions the model may call (OpenAI's shape)
    tool_choice: Literal["auto", "required", "none"] = "auto"  # "required": every reply is one tool call
    # thinking models (Health.thinking): whether the reply thinks first (the template's enable_thinking), and at
    # most how many tokens it thinks before the engine closes the thinking and the answer follows (None: the
    # server's default, serve.toml's thinking_token_budget; no limit if it has none)
    enable_thinking: bool = True
    thinking_token_budget: ThinkingBudget | None = None
    # what happens when the chat outgrows the model's context (None: the server's default, serve.toml's
    # context_overflow): "stop" refuses, "truncate_middle" keeps the system prompt and the first exchange and leaves
    # out the oldest after it, "rolling_window" leaves out the oldest (app/server/context_budget.py)
    context_overflow: Literal["stop", "truncate_middle", "rolling_window"] | None = None


SAMPLING_FIELDS = ("temperature", "top_p", "top_k", "min_p", "repetition_penalty", "presence_penalty",
                   "frequency_penalty")  # the settings a SamplingSettings may leave UNSET


def filled(settings: SamplingSettings, base: SamplingSettings | SamplingDefaults) -> SamplingSettings:
    """`settings` with each sampling value it leaves out taken from `base`."""
    unset = {name: getattr(base, name) for name in SAMPLING_FIELDS if getattr(settings, name) is UNSET}
    return msgspec.structs.replace(settings, **unset) if unset else settings


class Variation(Struct, kw_only=True, forbid_unknown_fields=True, omit_defaults=True):
    """One reply of a fork that differs on purpose: an instruction for it alone ("shorter", "as a table"), placed
    after the whole history as a short last user turn so that every reply of the fork shares the history's KV blocks,
    and sampling values of its own (each left out: the request's, else the conversation's). The reply stores what it
    was asked for. The chat goes on from a reply without its instruction, unless `keep` (then the instruction is a
    turn of the history before the reply, shown as such)."""

    instruction: Instruction | None = None
    keep: bool = False
    temperature: Temperature | None = None
    top_p: TopP | None = None
    top_k: TopK | None = None
    min_p: MinP | None = None
    repetition_penalty: RepetitionPenalty | None = None
    presence_penalty: PresencePenalty | None = None
    frequency_penalty: FrequencyPenalty | None = None
    seed: Seed | None = None


Variations = Annotated[list[Variation], msgspec.Meta(min_length=1, max_length=LIMITS["n"][1])]


class Warmth(Struct, kw_only=True):
    """Where a chat's history is, as the engine reports it (its shown branch, up to its last message): how many of its
    tokens the next reply finds in memory (`resident`), reads from the disk tier (`on_disk`) or computes (`cold`);
    `state` says which costs most, and predicted_s what the history adds to the next first token's wait, from the
    engine's measured prefill and disk read times (None: not measured yet). summary: the same in words, as both UIs
    show it (app/kv_cache_words.py)."""

    state: Literal["resident", "on_disk", "cold"]
    tokens: int
    resident_tokens: int
    on_disk_tokens: int
    cold_tokens: int
    predicted_s: float | None
    pinned: bool  # the engine keeps it warm (the conversation's pin, as the engine holds it now)
    summary: str


class Conversation(Struct, kw_only=True):
    id: str
    title: str
    system_prompt: str
    settings: SamplingSettings
    created_at: float
    updated_at: float  # last activity
    message_count: int = 0
    active_leaf: str | None = None  # the message that ends the branch last shown (a UI sets it)
    model: str | None = None  # the model that wrote its latest reply (None: no reply yet)
    summary_of: str | None = None  # the conversation it was started from, by a summary of it (POST .../summarize)
    documents: list[str] = msgspec.field(default_factory=list)  # the documents it starts with (ids): after the system
    # prompt, before the first message
    pinned: bool = False  # kept warm: its history's KV blocks are evicted last (POST .../pin), across restarts too
    warmth: Warmth | None = None  # in the list (GET /api/conversations): where its history is; None elsewhere, for a
    # chat with nothing in it yet, and where the engine cannot say (a remote one)


class ConversationCreate(Struct, kw_only=True, forbid_unknown_fields=True):
    title: Text | None = None  # None or "": a default title
    system_prompt: Text | None = None  # None: the model's default (ConversationDefaults); "": none
    settings: SamplingSettings | None = None  # None: the model's default
    documents: DocumentIds = msgspec.field(default_factory=list)  # ids from POST /api/documents


class ConversationDefaults(Struct, kw_only=True):
    """What a new conversation gets where its creator leaves the system prompt or the settings out, for the model the
    engine runs (GET /api/conversation-defaults)."""

    system_prompt: str
    settings: SamplingSettings
    small_model: bool  # under a billion weights: quick, and often wrong; a UI may say a larger model can be chosen
    sampling: SamplingDefaults  # where the settings' sampling values come from, and what a fork samples at


class ConversationUpdate(Struct, kw_only=True, forbid_unknown_fields=True):
    title: NonBlankText | UnsetType = UNSET
    system_prompt: Text | UnsetType = UNSET
    settings: SamplingSettings | UnsetType = UNSET
    active_leaf: str | UnsetType = UNSET  # a message of this conversation
    documents: DocumentIds | UnsetType = UNSET  # what it starts with: only while it has no messages (409 after)


class ReplyStats(Struct, kw_only=True):
    prompt_tokens: int
    cached_tokens: int
    completion_tokens: int
    time_to_first_token_s: float | None
    tokens_per_s: float | None
    duration_s: float
    # speculative decoding: draft tokens scored for this reply, and of them kept (acceptance: their ratio)
    draft_tokens: int = 0
    accepted_draft_tokens: int = 0
    # thinking models: the reply's tokens of reasoning (counted in completion_tokens too), and how long it thought
    reasoning_tokens: int = 0
    thinking_s: float | None = None
    # the context: the tokens the reply and its prompt hold of the model's length (context_limit; None: not known,
    # a remote engine's), and what a cut left out of the branch to fit (none: 0): from the message first_kept_id on,
    # the model saw the branch whole (and the system prompt, and with truncate_middle the first exchange, before)
    context_tokens: int = 0
    context_limit: int | None = None
    dropped_messages: int = 0
    dropped_tokens: int = 0
    first_kept_id: str | None = None
    # how it was sampled: the temperature (a fork's replies sample at the model's fork temperature at least), and how
    # often it was sampled again for being the same as a sibling of its fork; sampled again, it samples wider each
    # time (hotter, top_p and min_p toward taking every token): the temperature, top_p and min_p it had at last
    temperature: float | None = None
    resampled: int = 0
    top_p: float | None = None  # only where it was sampled again
    min_p: float | None = None


CONTINUABLE = ("length", "abort", "interrupted", "edited")  # the finish reasons of a reply that did not end its turn


class Message(Struct, kw_only=True, omit_defaults=True):
    id: str
    conversation_id: str
    parent_id: str | None
    role: Literal["user", "assistant", "tool"]
    content: str  # an assistant's text without its tool calls (its answer); a tool message: the result
    reasoning_content: str | None = None  # an assistant's thinking, apart from its answer (thinking models)
    created_at: float
    num_tokens: int = 0
    # assistant: "stop", "length", "abort" (stopped), "interrupted" (the engine died while writing it), "edited" (its
    # text is the user's, saved by an edit), or None while it is being written (its content is saved every second)
    finish_reason: str | None = None
    stopped: bool = False  # assistant: ended before it finished (stop, disconnect, shutdown, a crash)
    model: str | None = None
    stats: ReplyStats | None = None
    token_ids: list[int] | None = None  # only when asked for (?token_ids=true)
    tool_calls: list[ToolCall] | None = None  # an assistant's calls of the conversation's tools
    tool_call_id: str | None = None  # a tool message: the call whose result it is
    documents: list[str] = msgspec.field(default_factory=list)  # a user message: the documents it carries, before
    # its text
    variation: Variation | None = None  # a fork's reply that varied on purpose: what it was asked for


def continuable(message: Message) -> bool:
    """Whether a continue takes the message: a reply that did not end its turn (CONTINUABLE) and called no tools."""
    return message.role == "assistant" and message.finish_reason in CONTINUABLE and not message.tool_calls


def branch_tokens(path: list[Message]) -> int:
    """The context a branch (root to leaf) uses, as ConversationTree.context counts it: its last reply's prompt and
    reply (stats.context_tokens), and the messages after it (their token ids)."""
    tokens = 0
    for message in reversed(path):
        if message.role == "assistant" and message.stats is not None:
            stats = message.stats
            return tokens + (stats.context_tokens or stats.prompt_tokens + stats.completion_tokens)
        tokens += message.num_tokens
    return tokens


class ContextUse(Struct):
    tokens: int  # of the active branch, as its last reply saw them (its prompt and itself), and any message after it
    limit: int | None  # the model's context (None: not known, a remote engine's)


class ConversationTree(Struct):
    conversation: Conversation
    messages: list[Message]  # every branch; children in the order they were written
    context: ContextUse | None = None  # the active branch's use of the model's context (None: no branch yet)
    summaries: list[str] = msgspec.field(default_factory=list)  # the conversations started from a summary of it
    documents: list[Document] = msgspec.field(default_factory=list)  # every document it or a message of it carries


ParentId = Annotated[str, Meta(description="a message of this conversation (404 if it has none by this id)")]
ToolCallId = Annotated[str, Meta(description="the id of a tool call of the message it answers: the parent, or the "
                                             "assistant message above a parent that is a tool's result (else 400)")]


class SendMessage(Struct, kw_only=True, forbid_unknown_fields=True):
    content: Text  # a user message has text; a tool's result may be empty
    parent_id: ParentId | None = None  # None: a new root of the tree
    n: ReplyCount = 1
    settings: SamplingSettings | None = None  # this request only
    # a tool's result instead of a user message: the id of the parent's tool call it answers (the parent is the
    # assistant message that called, or a result sent before this one for another of its calls)
    tool_call_id: ToolCallId | None = None
    reply: bool = True  # False: store the message, write no reply (a first result of several)
    documents: DocumentIds = msgspec.field(default_factory=list)  # ids from POST /api/documents, before its text
    variations: Variations | None = None  # one per reply (n is their number), each with what it varies


class Regenerate(Struct, kw_only=True, forbid_unknown_fields=True):
    n: ReplyCount = 1
    settings: SamplingSettings | None = None
    variations: Variations | None = None


class EditMessage(Struct, kw_only=True, forbid_unknown_fields=True):
    content: NonBlankText
    n: ReplyCount = 1  # replies to an edited user message (an edited reply gets none)
    settings: SamplingSettings | None = None
    variations: Variations | None = None



class ContinueReply(Struct, kw_only=True, forbid_unknown_fields=True):
    settings: SamplingSettings | None = None  # this request only: max_tokens is how many more tokens it may write


class SummarizeRequest(Struct, kw_only=True, forbid_unknown_fields=True):
    leaf: str | None = None  # the branch that ends here (None: the active branch, else the newest message)


class StopRequest(Struct, kw_only=True, forbid_unknown_fields=True):
    message_id: str | None = None  # None: every running generation of the conversation


class StopResult(Struct):
    stopped: list[str]  # assistant message ids that were running


class EndThinkingResult(Struct):
    ended: list[str]  # assistant message ids that were running: each closes its thinking now and answers


class SnippetRun(Struct):
    """A stretch of a search hit's snippet: a word of the query as written in the message (match), or text around
    it."""

    text: str
    match: bool = False


class SearchHit(Struct):
    conversation_id: str
    conversation_title: str
    message_id: str
    role: str
    snippet: list[SnippetRun]  # the part of the message around its first match, … where it is cut


# One event stream per send, edit, regenerate or continue. The SSE `event:` line and the `type` field agree.


class UserEvent(Struct, tag="user", tag_field="type"):
    message: Message  # the stored user message (send and edit)


class EditedEvent(Struct, tag="edited", tag_field="type"):
    message: Message  # the edited reply, stored beside the one it was edited from: the branch to go on from (no
    # reply follows it; a continue or the next message does)


class StartEvent(Struct, tag="start", tag_field="type"):
    parent_id: str
    message_ids: list[str]  # one per branch, in reply order
    model: str | None = None  # the model writing the replies
    # the other models that wrote messages of this branch: their text was tokenized again for `model`
    retokenized_from: list[str] = msgspec.field(default_factory=list)
    temperature: float | None = None  # what the replies sample at (a fork's: the fork temperature at least)
    continued: bool = False  # the stored reply message_ids[0] goes on: its deltas add to its text
    variations: list[Variation] = msgspec.field(default_factory=list)  # a fork that varies: each reply's, in order


class DeltaEvent(Struct, tag="delta", tag_field="type"):
    message_id: str
    index: int
    text: str  # new text of the answer
    reasoning: str = ""  # new text of the thinking (thinking models), which comes before the answer
    reasoning_tokens: int = 0  # the reply's tokens of thinking so far


class DoneEvent(Struct, tag="done", tag_field="type"):
    message: Message  # the stored assistant message, with finish_reason and stats


class ErrorEvent(Struct, tag="error", tag_field="type"):
    message: str


StreamEvent = UserEvent | EditedEvent | StartEvent | DeltaEvent | DoneEvent | ErrorEvent
