"""The terminal UI against a real engine process on the embedded model: writing, stopping, regenerating,
editing, forking N replies, switching branches."""

import asyncio

import pytest
from tui_pilot import (
    chat_screen,
    chats_read,
    fork,
    note_text,
    reply_written,
    screen_of,
    stats_text,
    switcher_text,
    wait_until,
)

from localchat.app.protocol.conversations import SamplingSettings, StartEvent
from localchat.app.server.conversations import WIDEN_TEMPERATURE
from localchat.tui.app import LocalChatApp
from localchat.tui.reply_text import shown_markdown
from localchat.tui.screens.edit_message import EditMessageScreen
from localchat.tui.screens.fork_picker import ForkPicker
from localchat.tui.widgets.chat_list import ChatList
from localchat.tui.widgets.message_view import MessageView

pytestmark = pytest.mark.slow  # a real engine process: left out of `./dev test --fast`

SIZE = (120, 40)
GREEDY = SamplingSettings(temperature=0.0, max_tokens=24)
VARIED = SamplingSettings(temperature=1.2, max_tokens=10)  # so that sibling replies differ


def app_for(client, tmp_path) -> LocalChatApp:
    return LocalChatApp(client=client, config_file=tmp_path / "tui.toml")


async def type_and_send(pilot, text: str, key: str = "enter") -> None:
    await pilot.press(*text, key)


def ids(screen) -> set[str]:
    return {view.message.id for view in screen.view.views}


@pytest.mark.asyncio
async def test_a_reply_streams_as_markdown_and_is_stored(client, tmp_path, monkeypatch):
    shown_while_streaming = []  # the reply's Markdown after each piece of text arrived
    original_write = MessageView.write

    async def write(view, text):
        await original_write(view, text)
        await asyncio.sleep(0.01)  # let the stream render
        shown_while_streaming.append((view.has_class("-streaming"), view.body.source))

    monkeypatch.setattr(MessageView, "write", write)
    conversation = await client.create_conversation(settings=GREEDY)
    async with app_for(client, tmp_path).run_test(size=SIZE) as pilot:
        screen = await chat_screen(pilot, conversation.id)
        await type_and_send(pilot, "Tell me about cats.")
        reply = await reply_written(pilot, screen)

        tree = await client.conversation(conversation.id)
        user, stored = tree.messages
        assert [v.message.role for v in screen.view.views] == ["user", "assistant"]
        assert user.content == "Tell me about cats." and stored.parent_id == user.id
        assert reply.body.source == shown_markdown(stored) != ""
        growing = [source for streaming, source in shown_while_streaming if streaming]
        assert len(growing) > 3 and all(stored.content.startswith(source) for source in growing)
        assert 0 < len(growing[0]) < len(growing[-1])  # shown as it was written
        assert stats_text(reply) == f"{stored.stats.tokens_per_s:.1f} tok/s · {stored.stats.cached_tokens} cached"
        reply.details = True  # enter on it: all its stats
        assert f"prompt {stored.stats.prompt_tokens}" in stats_text(reply)
        assert not reply.has_class("-streaming") and note_text(reply) in ("", "cut at max tokens · ^d continues")
        chats = screen.query_one(ChatList)
        named = (await client.name_chat(conversation.id)).title  # its first message's words, or the model's title
        await wait_until(pilot, lambda: chats.children and chats.children[0].conversation.id == conversation.id
                         and chats.children[0].conversation.title == named and screen.sub_title == named,
                         what="the chat named, at the top of the list")


@pytest.mark.asyncio
async def test_escape_stops_a_reply_and_keeps_it_marked_stopped(client, tmp_path):
    until_the_escape = SamplingSettings(temperature=0.0, max_tokens=3000, ignore_eos=True)  # on any machine
    conversation = await client.create_conversation(settings=until_the_escape)
    async with app_for(client, tmp_path).run_test(size=SIZE) as pilot:
        screen = await chat_screen(pilot, conversation.id)
        await type_and_send(pilot, "Write a very long story about a dragon.")
        await wait_until(pilot, lambda: any(len(v.body.source) > 20 for v in screen.view.views
                                            if v.has_class("-streaming")), what="some text")
        await pilot.press("escape")
        reply = await reply_written(pilot, screen)

        stored = (await client.conversation(conversation.id)).messages[-1]
        assert stored.stopped and stored.finish_reason == "abort"
        assert 0 < stored.stats.completion_tokens < 3000
        assert note_text(reply) == "stopped · ^d continues" and reply.body.source == shown_markdown(stored)


@pytest.mark.asyncio
async def test_regenerate_adds_a_sibling_and_left_shows_the_old_reply(client, tmp_path):
    conversation = await client.create_conversation(settings=VARIED)
    async with app_for(client, tmp_path).run_test(size=SIZE) as pilot:
        screen = await chat_screen(pilot, conversation.id)
        await type_and_send(pilot, "Say something.")
        first = await reply_written(pilot, screen)
        old = first.message
        await pilot.press("shift+tab")  # from the message box to the last message
        assert screen.focused is first
        await pilot.press("ctrl+r")
        second = await reply_written(pilot, screen, old={old.id})
        assert switcher_text(second) == "‹ 2/2 ›"
        assert switcher_text(screen.view.views[0]) == ""  # the user message has no siblings

        second.focus()
        await pilot.press("left")
        back = await wait_until(pilot, lambda: screen.view.views[-1].message.id == old.id and screen.view.views[-1])
        assert switcher_text(back) == "‹ 1/2 ›" and back.body.source == shown_markdown(old)
        await wait_until(pilot, lambda: screen.workers is not None and not any(
            w.group == "branch" and w.is_running for w in screen.workers))
        tree = await client.conversation(conversation.id)
        replies = [m for m in tree.messages if m.role == "assistant"]
        assert [m.id for m in replies] == [old.id, second.message.id]
        assert tree.conversation.active_leaf == old.id


@pytest.mark.asyncio
async def test_edit_and_resend_makes_a_sibling_branch(client, tmp_path):
    conversation = await client.create_conversation(settings=GREEDY)
    async with app_for(client, tmp_path).run_test(size=SIZE) as pilot:
        screen = await chat_screen(pilot, conversation.id)
        await type_and_send(pilot, "What is two plus two?")
        first = await reply_written(pilot, screen)
        await pilot.press("shift+tab", "shift+tab")  # the user message
        original = screen.focused.message
        assert original.role == "user"
        await pilot.press("ctrl+e")
        dialog = await screen_of(pilot, EditMessageScreen)
        dialog.box.text = "What is three plus three?"
        await pilot.press("enter")
        reply = await reply_written(pilot, screen, old={first.message.id})

        user = screen.view.views[0]
        assert user.body.source == "What is three plus three?" and switcher_text(user) == "‹ 2/2 ›"
        tree = await client.conversation(conversation.id)
        roots = [m for m in tree.messages if m.parent_id is None]
        assert [m.content for m in roots] == ["What is two plus two?", "What is three plus three?"]
        assert reply.message.parent_id == roots[1].id and tree.conversation.active_leaf == reply.message.id


@pytest.mark.asyncio
async def test_fork_three_replies_and_pick_the_second(client, tmp_path):
    conversation = await client.create_conversation(settings=VARIED)
    async with app_for(client, tmp_path).run_test(size=SIZE) as pilot:
        screen = await chat_screen(pilot, conversation.id)
        await pilot.press(*"Name a colour.")
        await fork(pilot)
        picker = await screen_of(pilot, ForkPicker)
        assert len(picker.cards) == 3
        await wait_until(pilot, lambda: not picker.streaming, what="three replies")
        tree = await client.conversation(conversation.id)
        stored = {m.id: m for m in tree.messages if m.role == "assistant"}  # in the order they finished
        assert {card.message.id for card in picker.cards} == set(stored)
        assert all(card.body.source == shown_markdown(stored[card.message.id]) for card in picker.cards)
        second = picker.cards[1].message  # the cards are in reply order
        assert all("tok/s" in stats_text(card) or "tokens" in stats_text(card) for card in picker.cards)

        await pilot.press("2")
        shown = await wait_until(pilot, lambda: not isinstance(pilot.app.screen, ForkPicker)
                                 and screen.view.views[-1].message.id == second.id and screen.view.views[-1])
        assert switcher_text(shown) == "‹ 2/3 ›" and shown.body.source == shown_markdown(second)
        await wait_until(pilot, lambda: not any(w.is_running for w in screen.workers if w.group == "branch"))
        assert (await client.conversation(conversation.id)).conversation.active_leaf == second.id


@pytest.mark.asyncio
async def test_a_fork_in_a_chat_with_the_models_defaults_gives_different_replies(client, tmp_path):
    """The embedded model's chats sample at 0.2, where three replies would often be one; a fork samples hotter and
    the engine samples a repeated reply again."""
    conversation = await client.create_conversation()
    async with app_for(client, tmp_path).run_test(size=SIZE) as pilot:
        await chat_screen(pilot, conversation.id)
        await pilot.press(*"Name a colour.")
        await fork(pilot)
        picker = await screen_of(pilot, ForkPicker)
        await wait_until(pilot, lambda: not picker.streaming, what="three replies")
        replies = [m for m in (await client.conversation(conversation.id)).messages if m.role == "assistant"]
        assert len({m.content for m in replies}) == 3  # a repeat sampled again is hotter by WIDEN_TEMPERATURE a time
        assert all(m.stats.temperature == round(0.7 + WIDEN_TEMPERATURE * m.stats.resampled, 3) for m in replies)
        assert str(picker.query_one("#fork-sampling").render()).startswith("3 replies sampled at temperature 0.7")


@pytest.mark.asyncio
async def test_switching_branch_then_continuing_reuses_the_cached_prefix(client, tmp_path):
    conversation = await client.create_conversation(
        system_prompt="You are a helpful assistant who answers in one short sentence.", settings=VARIED)
    start = [event async for event in client.send(conversation.id, "Hello!", n=2) if isinstance(event, StartEvent)]
    first, second = start[0].message_ids
    siblings = [m.id for m in (await client.conversation(conversation.id)).messages if m.role == "assistant"]
    async with app_for(client, tmp_path).run_test(size=SIZE) as pilot:
        screen = await chat_screen(pilot, conversation.id)
        # the chat is shown whole (chat_screen returns once it is chosen, while its messages may still mount)
        await wait_until(pilot, lambda: chats_read(screen) and len(screen.view.views) == 2, what="the chat shown")
        assert screen.view.views[-1].message.id == first  # the engine made the first reply the active one
        await wait_until(pilot, lambda: screen.focused is screen.composer, what="the message box focused")
        await pilot.press("shift+tab")  # to the last message (a key pressed before it has focus would be lost)
        await wait_until(pilot, lambda: screen.focused is screen.view.views[-1], what="the last message focused")
        await pilot.press("right" if siblings.index(second) > siblings.index(first) else "left")
        await wait_until(pilot, lambda: screen.view.views[-1].message.id == second)
        assert switcher_text(screen.view.views[-1]) == f"‹ {siblings.index(second) + 1}/2 ›"

        await pilot.press("tab")  # back to the message box
        await type_and_send(pilot, "Thanks. And why?")
        reply = await reply_written(pilot, screen, old={first, second})

        tree = await client.conversation(conversation.id)
        stored = {m.id: m for m in tree.messages}[reply.message.id]
        question = {m.id: m for m in tree.messages}[stored.parent_id]
        assert question.parent_id == second  # continued the branch on screen
        assert stored.stats.cached_tokens > 0  # its prompt's prefix came from the KV cache
        assert f"{stored.stats.cached_tokens} cached" in stats_text(reply)
