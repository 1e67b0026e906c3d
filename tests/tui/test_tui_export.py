"""Export (Ctrl+O) says where the file went, the full path, every time, and where it will go before (the home folder
where there is no Downloads or Documents folder); Enter in the path exports; a cancel says nothing was written
(issue 32). The buttons are in the other dialogs' order (Cancel, then Export), and the export holds the chat's
documents, their names and text (issue 43)."""

import json
from pathlib import Path

import msgspec
import platformdirs
import pytest
from fake_engine import FakeEngine
from textual.widgets import Button, Label
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
async def test_enter_exports_and_says_the_full_path(tmp_path, no_downloads_folder, size):
    app = LocalChatApp(client=FakeEngine(), config_file=tmp_path / "tui.toml")
    async with app.run_test(size=size) as pilot:
        await branched_chat(pilot)
        dialog = await export_dialog(pilot)
        note = str(dialog.query_one("#export-folder", Label).render())
        assert note == f"No Downloads or Documents folder: the file goes to your home folder, {no_downloads_folder}."
        buttons = [button.id for button in dialog.query(Button)]
        assert buttons == ["cancel", "export"]  # as in the other dialogs
        await pilot.press("enter")  # in the path
        written = no_downloads_folder / "Sorting-in-Python.md"
        await wait_until(pilot, written.exists, what="the file")
        assert written.read_text().startswith("# Sorting in Python")
        await wait_until(pilot, lambda: f"Exported to {written}" in notifications(app), what="where it went")


@pytest.mark.asyncio
@pytest.mark.parametrize("keys", [("escape",), ("tab", "enter")], ids=["escape", "cancel-button"])  # from the path
async def test_a_cancel_says_nothing_was_written(tmp_path, no_downloads_folder, keys):
    app = LocalChatApp(client=FakeEngine(), config_file=tmp_path / "tui.toml")
    async with app.run_test(size=SIZES[0]) as pilot:
        await branched_chat(pilot)
        await export_dialog(pilot)
        await pilot.press(*keys)
        await wait_until(pilot, lambda: "Export cancelled: nothing was written" in notifications(app))
        assert not isinstance(app.screen, ExportScreen) and not any(no_downloads_folder.iterdir())


@pytest.mark.asyncio
@pytest.mark.parametrize("format", ["markdown", "json"])
async def test_the_export_holds_the_chats_documents(tmp_path, no_downloads_folder, format):
    engine = FakeEngine()
    notes = tmp_path / "notes.txt"
    notes.write_text("The mill stands by the river.\n```\nnot a fence's end\n```\n")
    document = await engine.upload_document(notes)
    engine.conversations["c_sort"] = msgspec.structs.replace(engine.conversations["c_sort"], documents=[document.id])
    app = LocalChatApp(client=engine, config_file=tmp_path / "tui.toml")
    async with app.run_test(size=SIZES[0]) as pilot:
        await branched_chat(pilot)
        dialog = await export_dialog(pilot)
        assert str(dialog.query_one("#export-documents", Label).render()) == (
            "With its document (name and text) at the end.")
        if format == "json":
            await pilot.click("#json")
        await pilot.click("#export")
        written = no_downloads_folder / f"Sorting-in-Python.{'md' if format == 'markdown' else 'json'}"
        await wait_until(pilot, written.exists, what="the file")
        text = written.read_text()
        if format == "markdown":
            assert text.startswith("# Sorting in Python")
            assert text.endswith("## Documents\n\n### notes.txt\n\n````\n" + notes.read_text() + "\n````\n")
        else:
            tree = json.loads(text)
            assert tree["conversation"]["id"] == "c_sort"
            assert tree["document_texts"] == [{"id": document.id, "name": "notes.txt", "text": notes.read_text()}]
