"""Pulling a model from the terminal's model list (F4, issue 56): a field takes REPO [FILE], the download's progress
shows, and the list then has the model; a pull that fails says why, at 80x24 and 60x20."""

import asyncio

import pytest
from fake_engine import PULLED, FakeEngine
from textual.widgets import Input, Label, OptionList, ProgressBar
from tui_pilot import SMALL_SIZES, branched_chat, screen_of, wait_until, within

from localchat.tui.app import LocalChatApp
from localchat.tui.screens.models import ModelsScreen


def status(dialog: ModelsScreen) -> str:
    return str(dialog.query_one("#pull-status", Label).render())


async def pull_field(pilot) -> ModelsScreen:
    """F4, then Tab from the model list to the field that pulls one."""
    await pilot.press("f4")
    dialog = await screen_of(pilot, ModelsScreen, what="the model list")
    await wait_until(pilot, lambda: isinstance(dialog.focused, OptionList), what="the list focused")
    await pilot.press("tab")
    await wait_until(pilot, lambda: dialog.focused is dialog.query_one("#model-pull", Input), what="the field")
    return dialog


@pytest.mark.asyncio
@pytest.mark.parametrize("size", SMALL_SIZES)
async def test_a_model_pulled_from_the_model_list_shows_its_progress_and_joins_the_list(tmp_path, size):
    engine = FakeEngine()
    engine.pull_hold = asyncio.Event()
    async with LocalChatApp(client=engine, config_file=tmp_path / "tui.toml").run_test(size=size) as pilot:
        await branched_chat(pilot)
        dialog = await pull_field(pilot)
        await pilot.press(*"tiny-org/tiny-GGUF", "enter")
        await wait_until(pilot, lambda: status(dialog) == "Downloading tiny.Q4_K_M.gguf: 1.0 of 3.0 MB",
                         what="the progress")
        bar = dialog.query_one("#pull-progress", ProgressBar)
        assert bar.display and bar.total == 3_000_000 and bar.progress == 1_000_000
        screen = dialog.screen.region
        for part in ("#model-pull", "#pull-status", "#pull-progress", "#model-list"):
            assert within(dialog.query_one(part), screen), f"{part} is cut at {size}"
        engine.pull_hold.set()
        await wait_until(pilot, lambda: "is here" in status(dialog), what="the pull done")
        options = dialog.query_one(OptionList)
        assert [options.get_option_at_index(i).id for i in range(options.option_count)] == ["SmolLM2", PULLED]
        assert options.highlighted == 1 and dialog.focused is options  # Enter loads it
        assert not bar.display and dialog.query_one("#model-pull", Input).value == ""


@pytest.mark.asyncio
@pytest.mark.parametrize("size", SMALL_SIZES)
async def test_a_pull_that_fails_says_why_and_keeps_what_was_typed(tmp_path, size):
    engine = FakeEngine()
    engine.pull_errors["tiny-org/gated-GGUF"] = "tiny-org/gated-GGUF is gated: accept its conditions"
    async with LocalChatApp(client=engine, config_file=tmp_path / "tui.toml").run_test(size=size) as pilot:
        await branched_chat(pilot)
        dialog = await pull_field(pilot)
        await pilot.press(*"tiny-org/gated-GGUF", "enter")
        await wait_until(pilot, lambda: "Could not pull" in status(dialog), what="the failure")
        assert status(dialog) == "Could not pull tiny-org/gated-GGUF: tiny-org/gated-GGUF is gated: accept its " \
                                 "conditions"
        assert dialog.query_one("#pull-status").has_class("-error")
        assert dialog.query_one("#model-pull", Input).value == "tiny-org/gated-GGUF"
        assert within(dialog.query_one("#pull-status"), dialog.screen.region)
