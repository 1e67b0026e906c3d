"""Export (Ctrl+O) says where the file went, the full path, every time, and where it will go before (the home folder
where there is no Downloads or Documents folder); Tab then Enter exports; a cancel says nothing was written
(issue 32)."""

from pathlib import Path

import platformdirs
import pytest
from fake_engine import FakeEngine
from textual.widgets import Label
from tui_pilot import SIZES, branched_chat, screen_of, wait_until

from localchat.tui.app import LocalChatApp
from localchat.tui.screens.export import ExportScreen


@pytest.fixture
def no_downloads_folder(tmp_path, monkeypatch) -> Path:
    """A home folder without Downloads or Documents in it."""
    home = tmp_path / "home"
    home.mkdir()
    monkeypatch.setattr(Path, "home", lambda: home)
    monkeypatch.setattr(platformdirs, "user_downloads_path", lambda: home / "Downloads")
    monkeypatch.setattr(platformdirs, "user_documents_path", lambda: home / "Documents")
    return home


def notifications(app) -> list[str]:
    return [notification.message for notification in app._notifications]


async def export_dialog(pilot) -> ExportScreen:
    await pilot.press("ctrl+o")
    return await screen_of(pilot, ExportScreen)


@pytest.mark.asyncio
@pytest.mark.parametrize("size", SIZES)
async def test_tab_then_enter_exports_and_says_the_full_path(tmp_path, no_downloads_folder, size):
    app = LocalChatApp(client=FakeEngine(), config_file=tmp_path / "tui.toml")
    async with app.run_test(size=size) as pilot:
        await branched_chat(pilot)
        dialog = await export_dialog(pilot)
        note = str(dialog.query_one("#export-folder", Label).render())
        assert note == f"No Downloads or Documents folder: the file goes to your home folder, {no_downloads_folder}."
        await pilot.press("tab")  # from the path to the first button: Export
        assert dialog.focused.id == "export"
        await pilot.press("enter")
        written = no_downloads_folder / "Sorting-in-Python.md"
        await wait_until(pilot, written.exists, what="the file")
        assert written.read_text().startswith("# Sorting in Python")
        await wait_until(pilot, lambda: f"Exported to {written}" in notifications(app), what="where it went")


@pytest.mark.asyncio
@pytest.mark.parametrize("keys", [("escape",), ("tab", "tab", "enter")], ids=["escape", "cancel-button"])
async def test_a_cancel_says_nothing_was_written(tmp_path, no_downloads_folder, keys):
    app = LocalChatApp(client=FakeEngine(), config_file=tmp_path / "tui.toml")
    async with app.run_test(size=SIZES[0]) as pilot:
        await branched_chat(pilot)
        await export_dialog(pilot)
        await pilot.press(*keys)
        await wait_until(pilot, lambda: "Export cancelled: nothing was written" in notifications(app))
        assert not isinstance(app.screen, ExportScreen) and not any(no_downloads_folder.iterdir())
