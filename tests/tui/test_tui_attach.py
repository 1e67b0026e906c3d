"""Attaching documents at 80x24 (issue 43): Tab completes the path as typed, even typed faster than the suggester
answers; an error is said whole, wrapped in the dialog; the chips of several documents with long names all show
(two a row, each cut with …), none clipped."""

import pytest
from fake_engine import FakeEngine
from tui_pilot import branched_chat, screen_of, shown, wait_until

from localchat.tui.app import LocalChatApp
from localchat.tui.screens.attach import AttachScreen
from localchat.tui.widgets.document_chips import AttachedChip

SMALL = (80, 24)


def app_with(engine, tmp_path) -> LocalChatApp:
    return LocalChatApp(client=engine, config_file=tmp_path / "tui.toml")


@pytest.mark.asyncio
async def test_tab_completes_the_path_as_typed_not_a_stale_one(tmp_path):
    folder = tmp_path / "notes"
    folder.mkdir()
    for name in ("mill-history.md", "mill-photos.txt", "river.txt"):
        (folder / name).write_text("The mill.")
    async with app_with(FakeEngine(), tmp_path).run_test(size=SMALL) as pilot:
        await branched_chat(pilot)
        await pilot.press("f3")
        dialog = await screen_of(pilot, AttachScreen)
        dialog.path_input.value = f"{folder}/"
        dialog.path_input.action_end()
        await pilot.press("m", "i", "l", "l", "-", "p", "tab")  # no pause: the suggester may still be on "mill-"
        assert dialog.path_input.value == f"{folder}/mill-photos.txt"
        await pilot.press("ctrl+u", *f"{folder}/r", "tab")
        assert dialog.path_input.value == f"{folder}/river.txt"


@pytest.mark.asyncio
async def test_an_attach_error_is_said_whole(tmp_path):
    name = "a-file-with-a-rather-long-name-that-holds-no-text-at-all.txt"
    (tmp_path / name).write_text("")
    async with app_with(FakeEngine(), tmp_path).run_test(size=SMALL) as pilot:
        await branched_chat(pilot)
        await pilot.press("f3")
        dialog = await screen_of(pilot, AttachScreen)
        dialog.path_input.value = str(tmp_path / name)
        await pilot.press("enter")
        status = dialog.query_one("#attach-status")
        await wait_until(pilot, lambda: shown(status) == f'"{name}" holds no text', what="the engine's refusal")
        await pilot.pause()
        box = dialog.query_one("#attach").region
        assert box.contains_region(status.region) and status.region.height >= 1
        rows = [strip.text for strip in pilot.app.screen._compositor.render_strips()]
        region = status.region
        said = " ".join(row[region.x:region.right] for row in rows[region.y:region.bottom])
        assert " ".join(said.split()) == f'"{name}" holds no text'


@pytest.mark.asyncio
async def test_three_chips_with_long_names_all_show_at_80_columns(tmp_path):
    engine = FakeEngine()
    documents = []
    for i in range(3):
        path = tmp_path / f"quarterly-report-of-the-mill-by-the-river-part-{i + 1}.txt"
        path.write_text("The mill ground wheat. " * 40)
        documents.append(await engine.upload_document(path))
    async with app_with(engine, tmp_path).run_test(size=SMALL) as pilot:
        screen = await branched_chat(pilot)
        await screen.attached.show(documents)
        await pilot.pause()
        chips = list(screen.attached.query(AttachedChip))
        assert len(chips) == 3
        for chip in chips:
            assert chip.region.width > 10 and chip.region.right <= SMALL[0] - 1, f"{chip} clipped"
        assert len({chip.region.y for chip in chips}) == 2  # two a row
