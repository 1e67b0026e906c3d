"""The context budget's cut (app/server/context_budget.py) on branches of known sizes: none while the branch fits, the
policies' cuts past the edge (down to half the context, whole exchanges, the message replied to kept), the last
reply's cut kept while it fits (the prompt extends the last one), and the refusals with their numbers."""

import pytest

from localchat.app.protocol.conversations import Message, ReplyStats
from localchat.app.server.context_budget import ContextFull, Cut, choose_cut, fewest_left_out, reply_room

LIMIT = 1000


def branch(*roles: str, size: int = 100, cut_from: str | None = None) -> tuple[list[Message], dict[str, int]]:
    """Messages u0, a1, u2, ... of these roles, each `size` tokens; the last reply's stats name cut_from as where its
    cut began."""
    path = []
    for i, role in enumerate(roles):
        stats = None
        if role == "assistant":
            stats = ReplyStats(prompt_tokens=0, cached_tokens=0, completion_tokens=0, time_to_first_token_s=None,
                               tokens_per_s=None, duration_s=0.0, first_kept_id=cut_from)
        path.append(Message(id=f"{role[0]}{i}", conversation_id="c", parent_id=path[-1].id if path else None,
                            role=role, content="", created_at=float(i), stats=stats))
    return path, {m.id: size for m in path}


def sized(path: list[Message], sizes: dict[str, int], system: int = 50):
    """prompt_size for choose_cut: the system prompt and the messages the cut keeps."""
    return lambda cut: system + sum(sizes[m.id] for i, m in enumerate(path)
                                    if not cut.start <= i < cut.first_kept)


def exchanges(n: int) -> list[str]:
    return ["user", "assistant"] * n + ["user"]


def test_a_branch_that_fits_is_not_cut():
    path, sizes = branch(*exchanges(3))  # 7 messages: 750 tokens with the system prompt
    assert choose_cut(path, "truncate_middle", LIMIT, 250, sized(path, sizes)).num_messages == 0


def test_truncate_middle_keeps_the_first_exchange_and_cuts_to_half_the_context():
    path, sizes = branch(*exchanges(6))  # 13 messages, 1,350 tokens
    cut = choose_cut(path, "truncate_middle", LIMIT, 250, sized(path, sizes))
    assert (cut.start, path[cut.first_kept].role) == (2, "user")  # u0 and a1 stay
    assert sized(path, sizes)(cut) <= LIMIT // 2
    assert sized(path, sizes)(Cut(cut.start, cut.first_kept - 2)) > LIMIT // 2  # no more than needed
    assert cut.first_kept < len(path)  # the message replied to stays


def test_rolling_window_leaves_out_the_oldest():
    path, sizes = branch(*exchanges(6))
    cut = choose_cut(path, "rolling_window", LIMIT, 250, sized(path, sizes))
    assert cut.start == 0 and cut.num_messages % 2 == 0 and path[cut.first_kept].role == "user"
    assert sized(path, sizes)(cut) <= LIMIT // 2


def test_the_next_turn_keeps_the_last_replys_cut_while_it_fits():
    path, sizes = branch(*exchanges(6), cut_from="u8")  # the last reply's prompt began its kept part at u8
    cut = choose_cut(path, "truncate_middle", LIMIT, 250, sized(path, sizes))
    assert path[cut.first_kept].id == "u8"  # the same cut: this prompt extends that one
    grown, grown_sizes = branch(*exchanges(8), cut_from="u8")  # until it no longer fits: a new cut, further on
    cut = choose_cut(grown, "truncate_middle", LIMIT, 250, sized(grown, grown_sizes))
    assert cut.first_kept > 8 and sized(grown, grown_sizes)(cut) <= LIMIT // 2


def test_stop_refuses_with_the_numbers():
    path, sizes = branch(*exchanges(6))
    with pytest.raises(ContextFull, match="1,350 tokens and its reply needs room for 250 more: the model's context "
                                          "holds 1,000"):
        choose_cut(path, "stop", LIMIT, 250, sized(path, sizes))


def test_a_message_too_long_even_alone_is_refused():
    path, sizes = branch(*exchanges(2))
    sizes[path[-1].id] = 900
    with pytest.raises(ContextFull, match="even with every earlier exchange left out"):
        choose_cut(path, "rolling_window", LIMIT, 250, sized(path, sizes))


def test_a_reply_has_room_for_its_max_tokens_up_to_a_quarter_of_the_context():
    assert reply_room(100, LIMIT) == 100
    assert reply_room(4096, LIMIT) == 250


@pytest.mark.asyncio
@pytest.mark.parametrize("droppable, limit, left_out", [(6, 1000, 0), (6, 400, 2), (6, 340, 3), (6, 160, 6),
                                                         (1, 160, 1), (0, 1000, 0)])
async def test_ollamas_fit_leaves_out_the_fewest_oldest_messages(droppable, limit, left_out):
    """Ollama's policy (fewest_left_out): a chat of `droppable` messages of 60 tokens it may leave out and 100 it keeps
    fits `limit` with a token to spare once the fewest oldest are left out, found in a few renderings by halving."""
    rendered = []

    async def prompt_without(count: int) -> list[int]:
        rendered.append(count)
        return [0] * (100 + 60 * (droppable - count))

    prompt = await fewest_left_out(droppable, limit, prompt_without)
    assert len(prompt) == 100 + 60 * (droppable - left_out) < limit
    assert len(rendered) <= 2 + droppable.bit_length()


@pytest.mark.asyncio
async def test_ollamas_fit_refuses_a_chat_whose_kept_messages_alone_are_too_long():
    async def prompt_without(count: int) -> list[int]:
        return [0] * (100 + 60 * (3 - count))

    with pytest.raises(ContextFull, match="the last message and the system messages take 100 tokens: more than fit "
                                          "in a context of 100 tokens"):
        await fewest_left_out(3, 100, prompt_without)
