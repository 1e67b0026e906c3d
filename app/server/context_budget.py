"""A conversation's context as a budget: what a reply's prompt may hold of the model's length, and what happens at
the edge (the conversation's context_overflow policy):

- stop: a prompt that leaves the reply too little room is refused, with the numbers;
- truncate_middle: the system prompt and the first exchange stay, the exchanges after it are left out, oldest first;
- rolling_window: the oldest exchanges are left out.

An exchange is a user message and what answered it (replies, tool calls and their results), up to the next user
message; the message being replied to always stays. A cut leaves out enough to bring the prompt down to half the
context, so that several turns follow before the next one; and each reply keeps where its cut began
(ReplyStats.first_kept_id), which the next turn starts from: its prompt extends the last one, and the prefix cache
serves it again instead of the whole history being computed anew at every turn.

Ollama's API keeps no history: its clients send the whole chat each time, and it is fitted as Ollama fits it
(fewest_left_out): the fewest oldest messages are left out for the prompt to fit its num_ctx."""

from collections.abc import Awaitable, Callable
from dataclasses import dataclass

from localchat.app.protocol.conversations import Message

POLICIES = ("stop", "truncate_middle", "rolling_window")
DEFAULT_POLICY = "truncate_middle"  # keeps the system prompt and the task the first exchange set, as LM Studio can
REPLY_ROOM_SHARE = 4  # a reply needs room for its max_tokens, at most a quarter of the context
CUT_TO_SHARE = 2  # a cut brings the prompt down to half the context


class ContextFull(ValueError):
    """A prompt that does not fit the model's context (with room for the reply); the message names the numbers."""


@dataclass(frozen=True)
class Cut:
    """What a reply's prompt leaves out of its branch: the messages from `start` (an index in the branch) to
    `first_kept`, not included; none when they are equal."""

    start: int
    first_kept: int

    @property
    def num_messages(self) -> int:
        return self.first_kept - self.start


def reply_room(max_tokens: int, limit: int) -> int:
    """The tokens a reply's prompt leaves free for it."""
    return max(1, min(max_tokens, limit // REPLY_ROOM_SHARE))


def choose_cut(path: list[Message], policy: str, limit: int, room: int, prompt_size: Callable[[Cut], int]) -> Cut:
    """The cut of the branch `path` (its last message the one replied to) whose prompt fits the context with `room`
    for the reply: none if the whole branch fits, else the one the last reply's began with if it still fits, else one
    that brings the prompt down to half the context (or as near as leaving every droppable exchange out can).
    prompt_size(cut) is the prompt's length in tokens with that cut. ContextFull where nothing fits, or the policy is
    stop."""
    start = _head_end(path) if policy == "truncate_middle" else 0
    none = Cut(start, start)
    size = prompt_size(none)
    if size + room <= limit:
        return none
    if policy == "stop":
        raise ContextFull(f"this chat holds {size:,} tokens and its reply needs room for {room:,} more: the model's "
                          f"context holds {limit:,} (context_overflow is \"stop\"). Start a new chat from a summary, "
                          f"or let earlier messages be left out (truncate_middle or rolling_window)")
    starts = [i for i in range(start + 1, len(path)) if path[i].role == "user"]  # where an exchange begins
    earlier = _earlier_cut(path)
    if earlier in starts:
        starts = starts[starts.index(earlier):]
        cut = Cut(start, earlier)
        size = prompt_size(cut)
        if size + room <= limit:
            return cut
    target = limit // CUT_TO_SHARE
    for first_kept in starts:
        cut = Cut(start, first_kept)
        size = prompt_size(cut)
        if size <= target or (first_kept == starts[-1] and size + room <= limit):
            return cut
    raise ContextFull(f"the message and what it needs of this chat hold {size:,} tokens, with room for a reply of "
                      f"{room:,}: more than the model's context of {limit:,}, even with every earlier exchange left "
                      f"out. Send a shorter message, or start a new chat")


def _head_end(path: list[Message]) -> int:
    """The end of the first exchange: the index of the second user message (the branch's length if there is none)."""
    users = [i for i, message in enumerate(path) if message.role == "user"]
    return users[1] if len(users) > 1 else len(path)


def _earlier_cut(path: list[Message]) -> int | None:
    """Where the last reply in the branch began its cut (an index in the branch), if it had one."""
    index = {message.id: i for i, message in enumerate(path)}
    for message in reversed(path):
        if message.role == "assistant" and message.stats is not None:
            return index.get(message.stats.first_kept_id)
    return None


async def fewest_left_out(droppable: int, limit: int, prompt_without: Callable[[int], Awaitable[list[int]]]
                          ) -> list[int]:
    """Ollama's policy (its num_ctx, for its clients' chats, which it keeps no history of): the prompt without the
    fewest of the `droppable` messages it may leave out, oldest first, for it to fit in `limit` with a token to spare,
    found by halving (a few renderings, not one a message). prompt_without(count) is the prompt without the `count`
    oldest of them. ContextFull where even leaving them all out does not fit."""
    prompt = await prompt_without(0)
    if len(prompt) < limit:
        return prompt
    low, high = 1, droppable  # the fewest to leave out is in [low, high] once `best` (high's) fits
    best = await prompt_without(high) if high else prompt
    if len(best) >= limit:
        raise ContextFull(f"the last message and the system messages take {len(best)} tokens: more than fit in a "
                          f"context of {limit} tokens")
    while low < high:
        middle = (low + high) // 2
        candidate = await prompt_without(middle)
        if len(candidate) < limit:
            high, best = middle, candidate
        else:
            low = middle + 1
    return best
