"""Chat titles in the terminal (issue 56): after a chat's first reply the model's title replaces the first message's
words in the chat list and the header, without holding up the message box; F2 renames a chat."""

import asyncio

import pytest
from fake_engine import MODEL_TITLE, FakeEngine
from textual.widgets import Input
from tui_pilot import SMALL_SIZES, branched_chat, reply_written, screen_of, wait_until

from localchat.tui.app import LocalChatApp
from localchat.tui.screens.prompt import PromptScreen

QUESTION = "What is the capital of France?"


def titles(screen) -> list[str]:
    return [item.conversation.title for item in screen.query("ChatItem")]


@pytest.mark.asyncio
@pytest.mark.parametrize("size", SMALL_SIZES)
async def test_the_model_names_a_chat_after_its_first_reply_while_typing_goes_on(tmp_path, size):
    engine = FakeEngine()
    engine.title_hold = asyncio.Event()
    async with LocalChatApp(client=engine, config_file=tmp_path / "tui.toml").run_test(size=size) as pilot:
        screen = await branched_chat(pilot)
        await pilot.press("ctrl+n")
        await wait_until(pilot, lambda: not screen.view.views, what="the new chat")
        screen.composer.text = QUESTION
        await pilot.press("enter")
        await reply_written(pilot, screen)
        # the reply is written and the title is not: the first words name the chat, and the box takes a message
        await wait_until(pilot, lambda: engine.named and titles(screen)[0] == QUESTION, what="the first words")
        assert not screen.replies.writing and screen.sub_title == QUESTION
        await pilot.press("a", "b")
        assert screen.composer.text == "ab"
        engine.title_hold.set()
        await wait_until(pilot, lambda: titles(screen)[0] == MODEL_TITLE, what="the model's title in the list")
        assert screen.sub_title == MODEL_TITLE and screen.composer.text == "ab"
        assert engine.named == [screen.session.conversation.id]


@pytest.mark.asyncio
@pytest.mark.parametrize("size", SMALL_SIZES)
async def test_f2_renames_the_chat_and_a_later_reply_names_nothing(tmp_path, size):
    engine = FakeEngine()
    async with LocalChatApp(client=engine, config_file=tmp_path / "tui.toml").run_test(size=size) as pilot:
        screen = await branched_chat(pilot)
        await pilot.press("f2")
        dialog = await screen_of(pilot, PromptScreen, what="the rename dialog")
        assert dialog.query_one(Input).value == "Sorting in Python"
        dialog.query_one(Input).value = "Lists, sorted"
        await pilot.press("enter")
        await wait_until(pilot, lambda: titles(screen)[0] == "Lists, sorted", what="the new title in the list")
        assert screen.sub_title == "Lists, sorted"
        old = {view.message.id for view in screen.view.views}
        screen.composer.text = "Thanks!"
        await pilot.press("enter")
        await reply_written(pilot, screen, old)
        assert not engine.named  # not the chat's first reply: the model does not name it
