"""The chat screen's footer and message box fit a newcomer's 80x24 and a roomier 120x40: no key's label runs into the
next one's, none is cut, and the message box's placeholder shows whole (issue 32)."""

import asyncio

import pytest
from fake_engine import FakeEngine
from textual.widgets import Footer, Label
from textual.widgets._footer import FooterLabel, KeyGroup
from tui_pilot import SIZES, branched_chat, screen_lines, screen_of, wait_until

from localchat.tui.app import LocalChatApp
from localchat.tui.screens.help import HelpScreen

PLACEHOLDER = "Message (enter sends, f1: keys)"


def app_with(engine: FakeEngine, tmp_path) -> LocalChatApp:
    return LocalChatApp(client=engine, config_file=tmp_path / "tui.toml")


def assert_footer_readable(screen, width: int) -> None:
    """Every entry (a key and its label, or a group's keys and their label) is inside the screen, a column apart
    from the next."""
    entries = [child for child in screen.query_one(Footer).children if child.region.width]
    assert entries and all(entry.region.right <= width for entry in entries), "a footer key is cut"
    for before, after in zip(entries, entries[1:], strict=False):
        if isinstance(before, KeyGroup) and isinstance(after, FooterLabel):
            continue  # the group's keys and their label are one entry: "← → Branch"
        assert before.region.right < after.region.x, f"{before} runs into {after}"


@pytest.mark.asyncio
@pytest.mark.parametrize("size", SIZES)
async def test_the_footer_keeps_its_keys_apart_with_a_message_focused(tmp_path, size):
    async with app_with(FakeEngine(), tmp_path).run_test(size=size) as pilot:
        screen = await branched_chat(pilot)
        assert_footer_readable(screen, size[0])  # the message box focused
        screen.view.views[-1].focus()
        await wait_until(pilot, lambda: "Regenerate" in screen_lines(pilot)[-1], what="a message's keys")
        assert_footer_readable(screen, size[0])
        assert " ← → Branch r Regenerate " in screen_lines(pilot)[-1]


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
        await pilot.press("r")
        await wait_until(pilot, lambda: "Answer now" in screen_lines(pilot)[-1], what="Answer now in the footer")
        footer = screen_lines(pilot)[-1]
        assert "esc Stop" in footer and "r Regenerate" in footer
        assert "Branch" not in footer  # ←/→ do nothing while a reply is written
        assert_footer_readable(screen, size[0])
        engine.hold.set()
        await wait_until(pilot, lambda: not screen.writing)
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
