"""Editing one of your messages (issue 43): ctrl+e on it opens the dialog with the cursor at the end of its text; End
and typing work as in the message box, Enter sends (a new branch beside the old message), Shift+Enter or Ctrl+J starts
a new line, Escape cancels; the dialog names those keys."""

import pytest
from fake_engine import FakeEngine
from textual.widgets import Label
from tui_pilot import SIZES, branched_chat, screen_of, switcher_text, wait_until

from localchat.tui.app import LocalChatApp
from localchat.tui.screens.chat import ChatScreen
from localchat.tui.screens.edit_message import KEYS, EditMessageScreen

QUESTION = "How do I sort a list in Python?"  # the fake chat's first message


def app_with(engine: FakeEngine, tmp_path) -> LocalChatApp:
    return LocalChatApp(client=engine, config_file=tmp_path / "tui.toml")


async def edit_first_message(pilot) -> tuple[ChatScreen, EditMessageScreen]:
    screen = await branched_chat(pilot)
    screen.view.views[0].focus()
    await pilot.press("ctrl+e")
    return screen, await screen_of(pilot, EditMessageScreen, what="the edit dialog")


@pytest.mark.asyncio
@pytest.mark.parametrize("size", SIZES)
async def test_edit_starts_at_the_end_and_enter_sends(tmp_path, size):
    engine = FakeEngine()
    async with app_with(engine, tmp_path).run_test(size=size) as pilot:
        screen, dialog = await edit_first_message(pilot)
        assert dialog.box.text == QUESTION and dialog.box.cursor_location == dialog.box.document.end
        assert str(dialog.query_one("#edit-keys", Label).render()) == KEYS.format("sends")
        assert dialog.query_one("#edit-keys").region.width > 0  # shown
        await pilot.press("home", "end", "space", "b", "y", "ctrl+j", "k", "e", "y")
        assert dialog.box.text == f"{QUESTION} by\nkey"
        await pilot.press("enter")
        await wait_until(pilot, lambda: pilot.app.screen is screen and not screen.replies.writing, what="the edit sent")
        assert screen.focused is screen.composer
        assert engine.edited == [("m_u1", f"{QUESTION} by\nkey")]
        assert switcher_text(screen.view.views[0]) == "‹ 2/2 ›"  # beside the old message


@pytest.mark.asyncio
async def test_escape_cancels_an_edit(tmp_path):
    engine = FakeEngine()
    async with app_with(engine, tmp_path).run_test(size=SIZES[0]) as pilot:
        screen, dialog = await edit_first_message(pilot)
        await pilot.press("x", "escape")
        await wait_until(pilot, lambda: pilot.app.screen is screen, what="the dialog closed")
        assert not engine.edited and not screen.replies.writing


@pytest.mark.asyncio
async def test_an_unchanged_message_is_not_sent_again(tmp_path):
    engine = FakeEngine()
    async with app_with(engine, tmp_path).run_test(size=SIZES[0]) as pilot:
        _, dialog = await edit_first_message(pilot)
        await pilot.press("enter")
        await pilot.pause()
        assert pilot.app.screen is dialog and not engine.edited
