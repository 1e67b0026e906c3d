"""The typing surface belongs to the user (issue 43): a sentence typed while any kind of widget on the chat screen is
focused (the message box, your message, a reply, the chat list, a document chip) reaches the message box exactly, and
sets nothing off (no regenerate, edit, fork, copy or dialog). A message's actions need a modifier: ctrl+r
regenerates, ctrl+e edits. Backspace and Delete edit the message box wherever the focus is, except Delete on a chip,
which is shown selected: it takes the document off."""

import pytest
from fake_engine import T0, FakeEngine
from textual.widgets import ListView
from tui_pilot import branched_chat, screen_of, wait_until

from localchat.app.protocol.documents import Document
from localchat.tui.app import LocalChatApp
from localchat.tui.screens.chat import ChatScreen
from localchat.tui.screens.edit_message import EditMessageScreen
from localchat.tui.widgets.document_chips import AttachedChip

SIZE = (120, 40)  # wide enough for the chat list beside the chat (at 80 columns ctrl+b shows it)
# every letter of the alphabet, both cases, the words of the issue, and the keys that were a message's actions
SENTENCE = "Fresh recap of every word: The quick brown fox jumps over the lazy dog, CTRYEF rectify."
KEYS = {" ": "space", ":": "colon", ",": "comma", ".": "full_stop"}
DOCUMENT = Document(id="d_1", name="notes.txt", media_type="text/plain", chars=120, tokens=30, created_at=T0)


def app_with(engine: FakeEngine, tmp_path) -> LocalChatApp:
    return LocalChatApp(client=engine, config_file=tmp_path / "tui.toml")


async def type_text(pilot, text: str) -> None:
    await pilot.press(*(KEYS.get(character, character) for character in text))


def focus_user_message(screen: ChatScreen) -> None:
    screen.view.views[0].focus()


def focus_reply(screen: ChatScreen) -> None:
    screen.view.views[-1].focus()


def focus_chat_list(screen: ChatScreen) -> None:
    screen.query_one(ListView).focus()


def focus_chip(screen: ChatScreen) -> None:
    screen.query_one(AttachedChip).focus()


def focus_message_box(screen: ChatScreen) -> None:
    screen.composer.focus()


@pytest.mark.asyncio
@pytest.mark.parametrize("focus", [focus_message_box, focus_user_message, focus_reply, focus_chat_list, focus_chip])
async def test_a_sentence_typed_anywhere_reaches_the_message_box_exactly(tmp_path, focus):
    engine = FakeEngine()
    async with app_with(engine, tmp_path).run_test(size=SIZE) as pilot:
        screen = await branched_chat(pilot)
        await screen.attached.show([DOCUMENT])
        before = [view.message.id for view in screen.view.views]
        focus(screen)
        await pilot.pause()
        await type_text(pilot, SENTENCE)
        await pilot.pause()
        assert screen.composer.text == SENTENCE
        assert screen.focused is screen.composer
        assert pilot.app.screen is screen  # no dialog opened
        assert [view.message.id for view in screen.view.views] == before  # nothing regenerated, forked or edited
        assert not engine.sent and not engine.regenerated and not engine.edited
        assert screen.attached.documents == [DOCUMENT]  # nor the document taken off


@pytest.mark.asyncio
async def test_up_then_typing_goes_on_in_the_message_box(tmp_path):
    """↑ on the message box's first line focuses the last message; a letter typed then goes back to the box, at the
    cursor, after what was there."""
    async with app_with(FakeEngine(), tmp_path).run_test(size=SIZE) as pilot:
        screen = await branched_chat(pilot)
        await type_text(pilot, "Fresh ")
        await pilot.press("up")
        assert screen.focused is screen.view.views[-1]
        await type_text(pilot, "recap of every word")
        assert screen.composer.text == "Fresh recap of every word" and screen.focused is screen.composer


@pytest.mark.asyncio
async def test_backspace_after_tab_edits_the_message_box(tmp_path):
    async with app_with(FakeEngine(), tmp_path).run_test(size=SIZE) as pilot:
        screen = await branched_chat(pilot)
        await type_text(pilot, "hello")
        await pilot.press("tab")
        assert screen.focused is not screen.composer
        await pilot.press("backspace")
        assert screen.composer.text == "hell" and screen.focused is screen.composer
        await pilot.press("home", "shift+tab", "delete")  # Delete too, at the cursor
        assert screen.composer.text == "ell"


@pytest.mark.asyncio
async def test_backspace_on_a_chip_edits_the_message_box_and_delete_takes_it_off(tmp_path):
    async with app_with(FakeEngine(), tmp_path).run_test(size=SIZE) as pilot:
        screen = await branched_chat(pilot)
        await screen.attached.show([DOCUMENT])
        await type_text(pilot, "notes")
        await pilot.press("shift+tab")  # from the message box to the chip above it
        assert isinstance(screen.focused, AttachedChip)
        await pilot.press("backspace")
        assert screen.composer.text == "note" and screen.attached.documents == [DOCUMENT]
        await pilot.press("shift+tab")
        assert isinstance(screen.focused, AttachedChip)
        await pilot.press("delete")
        await wait_until(pilot, lambda: not screen.attached.documents, what="the document taken off")
        assert screen.composer.text == "note"


@pytest.mark.asyncio
async def test_a_messages_actions_need_a_modifier(tmp_path):
    """ctrl+r regenerates the focused reply; ctrl+e edits your focused message (a reply cannot be edited)."""
    engine = FakeEngine()
    async with app_with(engine, tmp_path).run_test(size=SIZE) as pilot:
        screen = await branched_chat(pilot)
        focus_reply(screen)
        await pilot.press("ctrl+r")
        await wait_until(pilot, lambda: engine.regenerated == ["m_a3"] and not screen.replies.writing,
                         what="a regenerate")
        focus_user_message(screen)
        await pilot.press("ctrl+e")
        assert isinstance(await screen_of(pilot, EditMessageScreen), EditMessageScreen)
