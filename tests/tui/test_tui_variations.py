"""Forks that vary on purpose and chats whose warmth you see and keep, in the terminal: the fork dialog (ctrl+g) with
a line per reply and presets, the picker that shows each reply under what it was asked, the chat list's warmth, and
F9 that pins the open chat (issue 57)."""

import pytest
from fake_engine import FakeEngine
from textual.widgets import Checkbox, Input
from tui_pilot import SMALL_SIZES, branched_chat, fork, screen_lines, screen_of, wait_until, within

from localchat.app.protocol.conversations import Variation
from localchat.tui.app import LocalChatApp
from localchat.tui.config import DEFAULT_FORK_PRESETS, TuiConfig
from localchat.tui.screens.fork_dialog import ForkDialog
from localchat.tui.screens.fork_picker import ForkPicker

WIDE = (120, 40)  # the chat list shows beside the chat


def app_with(engine: FakeEngine, tmp_path) -> LocalChatApp:
    return LocalChatApp(client=engine, config_file=tmp_path / "tui.toml")


@pytest.mark.asyncio
@pytest.mark.parametrize("size", SMALL_SIZES)
async def test_the_fork_dialog_takes_a_line_per_reply_and_the_picker_shows_each_under_it(tmp_path, size):
    engine = FakeEngine()
    async with app_with(engine, tmp_path).run_test(size=size) as pilot:
        screen = await branched_chat(pilot)
        screen.view.views[-1].focus()
        await pilot.press("ctrl+g")
        dialog = await screen_of(pilot, ForkDialog, what="the fork dialog")
        await wait_until(pilot, lambda: len(dialog.line_inputs) == 3, what="a line per reply")
        box = dialog.query_one("#fork-dialog").region
        for part in (*dialog.line_inputs, dialog.query_one("#fork-keep"), dialog.query_one("#fork"),
                     *dialog.query(".preset")):
            assert within(part, box) and within(part, pilot.app.screen.region), part  # all of it on screen
        await pilot.press(*"Shorter.", "down")  # the first line typed; the second left as asked
        dialog.line_inputs[2].value = "In French."
        await pilot.press("enter")
        picker = await screen_of(pilot, ForkPicker, what="the picker")
        await wait_until(pilot, lambda: not picker.streaming, what="three replies")
        (n, variations), = engine.forks
        assert n == 3 and variations == [Variation(instruction="Shorter."), Variation(), Variation(
            instruction="In French.")]
        assert [card.title for card in picker.cards] == ["Reply 1 · Shorter.", "Reply 2 · as the others",
                                                        "Reply 3 · In French."]
        assert str(picker.query_one("#fork-sampling").render()) == \
            "Each asked its own way; the one picked goes on without its instruction"
        await pilot.press("3")
        await wait_until(pilot, lambda: not isinstance(pilot.app.screen, ForkPicker), what="the picker closed")
        assert screen.view.views[-1].title == "Assistant · asked: In French."


@pytest.mark.asyncio
async def test_a_preset_fills_the_lines_and_the_lines_shown_can_be_saved_as_one(tmp_path):
    engine = FakeEngine()
    async with app_with(engine, tmp_path).run_test(size=SMALL_SIZES[0]) as pilot:
        screen = await branched_chat(pilot)
        screen.composer.focus()
        await pilot.press(*"Tell me about tea")
        await pilot.press("ctrl+g")
        dialog = await screen_of(pilot, ForkDialog, what="the fork dialog")
        await wait_until(pilot, lambda: dialog.line_inputs, what="the lines")
        preset = next(iter(DEFAULT_FORK_PRESETS))
        await pilot.click(next(b for b in dialog.query(".preset") if b.name == preset))
        await wait_until(pilot, lambda: [b.value for b in dialog.line_inputs] == DEFAULT_FORK_PRESETS[preset],
                         what="the preset's lines")
        dialog.line_inputs[2].value = "As a table."
        dialog.query_one("#fork-n", Input).value = "4"
        await wait_until(pilot, lambda: len(dialog.line_inputs) == 4, what="a fourth line")
        assert [b.value for b in dialog.line_inputs] == ["Shorter.", "Longer.", "As a table.", ""]
        dialog.line_inputs[3].value = "In French."
        await pilot.click("#save-preset")
        name = "shorter / longer / as a table / in french"
        assert TuiConfig.load(tmp_path / "tui.toml").fork_presets[name] == ["Shorter.", "Longer.", "As a table.",
                                                                            "In French."]
        await wait_until(pilot, lambda: any(b.name == name for b in dialog.query(".preset")), what="its button")
        dialog.query_one("#fork-keep", Checkbox).value = True
        await pilot.click("#fork")
        await screen_of(pilot, ForkPicker, what="the picker")
        (_, variations), = engine.forks
        assert [v.instruction for v in variations] == ["Shorter.", "Longer.", "As a table.", "In French."]
        assert all(v.keep for v in variations) and engine.sent[-1][1] == "Tell me about tea"
        await wait_until(pilot, lambda: not screen.replies.writing, what="the replies written")  # not quit mid-stream


@pytest.mark.asyncio
async def test_a_fork_with_no_line_is_a_plain_fork(tmp_path):
    engine = FakeEngine()
    async with app_with(engine, tmp_path).run_test(size=SMALL_SIZES[0]) as pilot:
        screen = await branched_chat(pilot)
        screen.view.views[-1].focus()
        await fork(pilot)
        picker = await screen_of(pilot, ForkPicker, what="the picker")
        assert engine.forks == [(3, None)] and picker.cards[0].title == "Reply 1"


@pytest.mark.asyncio
async def test_the_chat_list_shows_each_chats_warmth_and_f9_pins_the_open_chat(tmp_path):
    engine = FakeEngine()
    async with app_with(engine, tmp_path).run_test(size=WIDE) as pilot:
        screen = await branched_chat(pilot)
        lines = "\n".join(screen_lines(pilot))
        for shown in ("● warm · instant", "◐ on disk · about 0.4 s", "○ cold · about 4 s"):
            assert shown in lines
        await pilot.press("f9")
        await wait_until(pilot, lambda: any("● warm · instant · ◆ pinned" in line for line in screen_lines(pilot)),
                         what="the chat shown pinned")
        assert engine.pins == [("c_sort", True)] and screen.session.conversation.pinned
        await pilot.press("f9")
        await wait_until(pilot, lambda: not any("◆ pinned" in line for line in screen_lines(pilot)),
                         what="the chat unpinned")
        engine.pin_refusal = "pinning this chat needs 3,100 tokens of the pin budget ...; unpin another chat first"
        await pilot.press("f9")
        await wait_until(pilot, lambda: any("unpin another chat first" in n.message for n in pilot.app._notifications),
                         what="the refusal said")
        assert not screen.session.conversation.pinned
