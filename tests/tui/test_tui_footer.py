"""The chat screen's footer and message box fit a newcomer's 80x24 and a roomier 120x40: no key's label runs into the
next one's, none is cut, and the message box's placeholder shows whole (issue 32). The footer names the keys of the
focused message: ←/→ where it has siblings (issue 43), Continue on a reply cut short (issue 56).

The footer redraws itself a frame after the focus moves (Textual recomposes it after a refresh, and may do so twice):
a check of its keys waits until it shows them all, laid out (footer_shows), or it reads a half-built footer on a fast
machine (issue 43: the test failed when run alone on a quiet one)."""

import asyncio

import pytest
from fake_engine import FakeEngine
from textual.widgets import DataTable, Footer, Label
from tui_pilot import (
    SIZES,
    assert_footer_readable,
    branched_chat,
    footer_readable,
    footer_shows,
    fork,
    screen_lines,
    screen_of,
    wait_until,
)

from localchat.tui.app import LocalChatApp
from localchat.tui.commands import ChatCommands
from localchat.tui.screens.edit_message import EditMessageScreen
from localchat.tui.screens.fork_picker import ForkPicker
from localchat.tui.screens.help import HelpScreen

PLACEHOLDER = "Message (enter sends, f1: keys)"


def app_with(engine: FakeEngine, tmp_path) -> LocalChatApp:
    return LocalChatApp(client=engine, config_file=tmp_path / "tui.toml")


@pytest.mark.asyncio
@pytest.mark.parametrize("size", SIZES)
async def test_the_footer_keeps_its_keys_apart_with_a_message_focused(tmp_path, size):
    async with app_with(FakeEngine(), tmp_path).run_test(size=size) as pilot:
        screen = await branched_chat(pilot)
        await footer_shows(pilot, screen, "f1 Help")
        assert_footer_readable(screen, size[0])  # the message box focused
        screen.view.views[1].focus()  # a reply with a sibling
        line = await footer_shows(pilot, screen, "^r Regenerate")
        assert_footer_readable(screen, size[0])
        assert " ← → Branch ^r Regenerate ^e Edit " in line and "Continue" not in line  # a reply that ended its turn
        screen.view.views[0].focus()  # your message, without siblings
        await wait_until(pilot, lambda: "Branch" not in screen_lines(pilot)[-1], what="←/→ gone")
        line = await footer_shows(pilot, screen, "^e Edit")
        assert_footer_readable(screen, size[0])
        assert "^r Regenerate ^e Edit" in line


@pytest.mark.asyncio
async def test_an_empty_chat_offers_no_branches_or_export(tmp_path):
    """Branches (ctrl+t) and Export (ctrl+o) do nothing before a chat has a message: their keys are off, and the
    command palette does not list them."""
    async with app_with(FakeEngine(), tmp_path).run_test(size=SIZES[0]) as pilot:
        screen = await branched_chat(pilot)
        await pilot.press("ctrl+n")
        await wait_until(pilot, lambda: not screen.view.views, what="the new chat")
        keys = {binding.binding.action for binding in screen.active_bindings.values()}
        assert "branch_tree" not in keys and "export" not in keys
        assert not {"branch_tree", "export"} & {action for _, action in ChatCommands(screen).commands()}
        await pilot.press("ctrl+o", "ctrl+t")
        assert pilot.app.screen is screen


@pytest.mark.asyncio
@pytest.mark.parametrize("size", SIZES)
async def test_the_footer_fits_while_a_focused_reply_thinks(tmp_path, size):
    """The most keys at once: a message's, Stop and Answer now while the reply regenerated from it thinks."""
    engine = FakeEngine(thinking=True)
    engine.hold = asyncio.Event()
    async with app_with(engine, tmp_path).run_test(size=size) as pilot:
        screen = await wait_until(pilot, lambda: getattr(pilot.app.screen, "view", None) and pilot.app.screen)
        await wait_until(pilot, lambda: len(screen.view.views) == 2)
        screen.view.views[-1].focus()
        await pilot.press("ctrl+r")
        footer = await footer_shows(pilot, screen, "Answer now", "esc Stop")
        assert "Regenerate" not in footer and "Branch" not in footer  # refused while a reply is written
        assert_footer_readable(screen, size[0])
        engine.hold.set()
        await wait_until(pilot, lambda: not screen.replies.writing)
        await wait_until(pilot, lambda: "esc Stop" not in screen_lines(pilot)[-1], what="Stop gone once written")


@pytest.mark.asyncio
@pytest.mark.parametrize("size", SIZES)
async def test_the_placeholder_shows_whole_and_the_help_names_the_new_line_keys(tmp_path, size):
    async with app_with(FakeEngine(), tmp_path).run_test(size=size) as pilot:
        screen = await branched_chat(pilot)
        assert screen.composer.placeholder == PLACEHOLDER
        assert any(PLACEHOLDER in line for line in screen_lines(pilot))
        await pilot.press("f1")
        help_screen = await screen_of(pilot, HelpScreen)
        lines = [str(label.render()) for label in help_screen.query(Label)]
        assert any("Shift+Enter or Ctrl+J" in line for line in lines)


@pytest.mark.asyncio
@pytest.mark.parametrize("size", SIZES)
async def test_the_most_keys_at_once_fit(tmp_path, size):
    """Your message with a sibling (an edit) focused: ←/→, Regenerate and Edit beside the chat's keys, and at 80
    columns the chat list's key too (issue 43)."""
    engine = FakeEngine()
    async with app_with(engine, tmp_path).run_test(size=size) as pilot:
        screen = await branched_chat(pilot)
        screen.view.views[0].focus()
        await pilot.press("ctrl+e")
        dialog = await screen_of(pilot, EditMessageScreen)
        dialog.box.text = "How do I sort a tuple?"
        await pilot.press("enter")
        await wait_until(pilot, lambda: engine.edited and not screen.replies.writing, what="the edit written")
        screen.view.views[0].focus()
        line = await footer_shows(pilot, screen, "Branch", "^e Edit", "^r Regenerate", "f1 Help")
        assert_footer_readable(screen, size[0])
        assert size[0] > 80 or "^b Chats" in line


@pytest.mark.asyncio
async def test_the_help_gives_its_rows_the_room_at_80x24(tmp_path):
    async with app_with(FakeEngine(), tmp_path).run_test(size=SIZES[0]) as pilot:
        await branched_chat(pilot)
        await pilot.press("f1")
        help_screen = await screen_of(pilot, HelpScreen)
        await pilot.pause()
        table = help_screen.query_one(DataTable)
        assert table.region.height >= 14  # a header and 13 keys at once (it showed 6 in a smaller frame)
        assert all(label.region.right <= SIZES[0][0] and label.region.height for label in help_screen.query(Label))


@pytest.mark.asyncio
async def test_at_60x20_the_footers_leave_out_whole_keys_never_cut_one(tmp_path):
    """Issue 56: with a message selected the footer ended "^g Fork ^b Ch", the fork panel's "esc Stop /"."""
    engine = FakeEngine()
    engine.hold = asyncio.Event()
    async with app_with(engine, tmp_path).run_test(size=(60, 20)) as pilot:
        screen = await branched_chat(pilot)
        for view in screen.view.views:
            view.focus()
            await wait_until(pilot, lambda: screen_lines(pilot)[-1].startswith(("^r", " ←")), what="its keys")
            await wait_until(pilot, lambda: footer_readable(screen, 60), what="the keys fitted")
            line = screen_lines(pilot)[-1]
            assert "f1 Help" in line and not line.rstrip().endswith(("Ch", "^", "Se")), line
        screen.composer.focus()
        await pilot.press(*"Colours?")
        await fork(pilot)  # N replies, side by side: the picker's footer
        picker = await screen_of(pilot, ForkPicker, what="the fork picker")
        footer = picker.query_one(Footer)
        await wait_until(pilot, lambda: footer.children and footer_readable(picker, 60), what="the picker's keys")
        line = screen_lines(pilot)[footer.region.y]  # the picker's own footer, under its replies
        assert "Other reply" in line and ("esc Stop / close" in line or "Stop" not in line), line
        engine.hold.set()
