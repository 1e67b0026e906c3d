"""Startup is ordered: the last chat is opened at start unless the user has started on another first. A message sent
the moment the UI appears, while the last chat is still being read, starts a new chat that stays on screen, and the
header names the chat shown (issue 32)."""

import asyncio

import pytest
from fake_engine import FakeEngine
from tui_pilot import SIZES, chat_screen, chats_read, wait_until

from localchat.tui.app import LocalChatApp
from localchat.tui.widgets.empty_chat import EmptyChat


@pytest.mark.asyncio
@pytest.mark.parametrize("size", SIZES)
async def test_a_message_sent_while_the_last_chat_is_read_keeps_its_new_chat(tmp_path, size):
    engine = FakeEngine()
    engine.conversation_hold = asyncio.Event()  # reading a chat waits: the last chat's restore is slow
    async with LocalChatApp(client=engine, config_file=tmp_path / "tui.toml").run_test(size=size) as pilot:
        screen = await chat_screen(pilot)
        await wait_until(pilot, lambda: screen.focused is screen.composer)
        await pilot.press(*"Hello there", "enter")  # at once, while the last chat is still being read
        await wait_until(pilot, lambda: engine.sent, what="the message sent")
        engine.conversation_hold.set()  # the restore's answer arrives after the send
        await wait_until(pilot, lambda: not screen.replies.writing and chats_read(screen),
                         what="the reply and the list")

        new_chat = engine.sent[0][0]
        assert new_chat != "c_sort" and screen.session.conversation.id == new_chat
        assert [view.message.content for view in screen.view.views][0] == "Hello there"
        assert all(view.message.conversation_id == new_chat for view in screen.view.views)
        assert screen.sub_title == engine.conversations[new_chat].title  # not the restored chat's


@pytest.mark.asyncio
async def test_without_a_message_the_last_chat_opens_with_its_title(tmp_path):
    engine = FakeEngine()
    engine.conversation_hold = asyncio.Event()
    async with LocalChatApp(client=engine, config_file=tmp_path / "tui.toml").run_test(size=SIZES[0]) as pilot:
        screen = await chat_screen(pilot)
        await pilot.press(*"Hel")  # typing alone does not start a chat: the last one still opens
        engine.conversation_hold.set()
        await wait_until(pilot, lambda: len(screen.view.views) == 4 and chats_read(screen))
        assert screen.session.conversation.id == "c_sort" and screen.sub_title == "Sorting in Python"
        assert screen.composer.text == "Hel"


@pytest.mark.asyncio
async def test_ctrl_n_while_the_last_chat_is_drawn_shows_the_new_chat(tmp_path):
    """Ctrl+N while the reopened chat (a long one, near its context's edge) is still being drawn: the new chat shows,
    and the restore's late end neither crashes the UI nor draws the old chat's gauge over the new one."""
    engine = FakeEngine(long_chat=True)
    engine.conversation_hold = asyncio.Event()
    async with LocalChatApp(client=engine, config_file=tmp_path / "tui.toml").run_test(size=SIZES[0]) as pilot:
        screen = await chat_screen(pilot)
        drawn, show = asyncio.Event(), screen.view.show

        async def slow_show(tree, path, documents):  # drawing the restored chat's branch takes a while
            await show(tree, path, documents)
            if path:
                await drawn.wait()
        screen.view.show = slow_show
        engine.conversation_hold.set()
        await wait_until(pilot, lambda: screen.session.conversation is not None, what="the last chat opened")
        await pilot.press("ctrl+n")
        drawn.set()
        await wait_until(pilot, lambda: screen.query_one(EmptyChat).display and not screen.view.views,
                         what="the new chat")
        await pilot.pause(0.1)
        assert screen.session.conversation is None and screen.query_one(EmptyChat).display and not screen.view.views
        assert screen.gauge.use is None and screen.sub_title == ""
