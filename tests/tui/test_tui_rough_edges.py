"""A newcomer's rough edges in the terminal (issue 56), at 80x24 and 60x20: Tab from the message box selects the
nearest message (the last); F1's binding ids read whole at 80 columns; F3's path field takes a "/" typed first as a
path from the root; Ctrl+U clears the message box (Ctrl+Z brings it back), and the footer and F1 say so."""

import pytest
from fake_engine import FakeEngine
from textual.widgets import DataTable
from tui_pilot import SMALL_SIZES, branched_chat, footer_shows, screen_lines, screen_of, wait_until

from localchat.tui.app import LocalChatApp
from localchat.tui.screens.attach import AttachScreen
from localchat.tui.screens.help import HelpScreen


def app_with(tmp_path) -> LocalChatApp:
    return LocalChatApp(client=FakeEngine(), config_file=tmp_path / "tui.toml")


@pytest.mark.asyncio
@pytest.mark.parametrize("size", SMALL_SIZES)
async def test_tab_from_the_message_box_selects_the_last_message(tmp_path, size):
    async with app_with(tmp_path).run_test(size=size) as pilot:
        screen = await branched_chat(pilot)
        await pilot.press(*"draft")
        await pilot.press("tab")
        await wait_until(pilot, lambda: screen.focused is screen.view.views[-1], what="the last message selected")
        assert screen.composer.text == "draft"  # and the text stays
        await pilot.press("shift+tab")
        await wait_until(pilot, lambda: screen.focused is not screen.view.views[-1], what="the focus moved on")
        screen.composer.focus()
        await pilot.press("shift+tab")  # as Shift+Tab does
        await wait_until(pilot, lambda: screen.focused is screen.view.views[-1], what="the last message again")


@pytest.mark.asyncio
async def test_the_help_shows_each_binding_id_whole_at_80_columns(tmp_path):
    async with app_with(tmp_path).run_test(size=(80, 24)) as pilot:
        await branched_chat(pilot)
        await pilot.press("f1")
        help_screen = await screen_of(pilot, HelpScreen)
        table = help_screen.query_one(DataTable)
        await wait_until(pilot, lambda: table.row_count and table.region.width, what="the keys")
        assert table.virtual_size.width <= table.scrollable_content_region.width  # no column off to the side
        lines = screen_lines(pilot)
        assert any("Binding id" in line for line in lines)
        for key, binding_id in [("ctrl+n", "new_chat"), ("ctrl+f", "search"), ("ctrl+t", "branch_tree")]:
            assert any(key in line and binding_id in line for line in lines), binding_id
        ids = [table.get_row_at(i)[3] for i in range(table.row_count)]
        assert "clear_message" in ids and "continue_reply" in ids


@pytest.mark.asyncio
@pytest.mark.parametrize("size", SMALL_SIZES)
async def test_a_slash_typed_first_in_the_attach_dialog_starts_a_path_from_the_root(tmp_path, size):
    async with app_with(tmp_path).run_test(size=size) as pilot:
        await branched_chat(pilot)
        await pilot.press("f3")
        dialog = await screen_of(pilot, AttachScreen, what="the attach dialog")
        await wait_until(pilot, lambda: dialog.path_input.value == "~/" and dialog.focused is dialog.path_input)
        await pilot.press(*"/tmp/notes.txt")
        assert dialog.path_input.value == "/tmp/notes.txt"  # not ~//tmp/notes.txt
        await pilot.press("escape")
        await pilot.press("f3")
        dialog = await screen_of(pilot, AttachScreen, what="the attach dialog again")
        await wait_until(pilot, lambda: dialog.focused is dialog.path_input)
        await pilot.press(*"Doc", "/")  # a "/" later is a folder's end, as typed
        assert dialog.path_input.value == "~/Doc/"


@pytest.mark.asyncio
@pytest.mark.parametrize("size", SMALL_SIZES)
async def test_ctrl_u_clears_the_message_box_and_the_footer_and_help_say_so(tmp_path, size):
    async with app_with(tmp_path).run_test(size=size) as pilot:
        screen = await branched_chat(pilot)
        assert "^u Clear" not in screen_lines(pilot)[-1]  # nothing to clear
        await pilot.press(*"a long draft", "ctrl+j", *"of two lines")
        line = await footer_shows(pilot, screen, "^u Clear")
        assert line.startswith("^u Clear")
        await pilot.press("ctrl+u")
        assert screen.composer.text == ""
        await wait_until(pilot, lambda: "^u Clear" not in screen_lines(pilot)[-1], what="Clear gone")
        await pilot.press("ctrl+z")  # nothing typed is lost
        assert screen.composer.text == "a long draft\nof two lines"
        await pilot.press("f1")
        table = (await screen_of(pilot, HelpScreen)).query_one(DataTable)
        await wait_until(pilot, lambda: table.row_count)
        rows = [table.get_row_at(i) for i in range(table.row_count)]
        assert ["Message box", "ctrl+u", "Clear the message box", "clear_message"] in rows
