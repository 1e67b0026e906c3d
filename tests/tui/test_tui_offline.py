"""The terminal UI on fixed data (no model): keymap and theme from the config file, help, command palette,
branch tree, copy, and the engine-error screen with its retry."""

import subprocess
import sys

import httpx
import pytest
from fake_engine import SORT_CODE, FakeEngine
from textual.command import CommandPalette
from textual.widgets import DataTable, Label, Tree
from tui_pilot import chat_screen, screen_lines, switcher_text, wait_until

from localchat.tui.app import LocalChatApp
from localchat.tui.config import TuiConfig
from localchat.tui.message_tree import MessageTree
from localchat.tui.screens.branch_tree import BranchTreeScreen
from localchat.tui.screens.chat import ChatScreen
from localchat.tui.screens.engine_error import EngineErrorScreen
from localchat.tui.screens.help import HelpScreen

SIZE = (120, 36)


def error_shown(app) -> str | None:
    """The engine-error screen's message, once it shows."""
    if isinstance(app.screen, EngineErrorScreen) and (labels := app.screen.query("#error-message")):
        return str(labels.first(Label).visual)
    return None


async def opened(pilot) -> ChatScreen:
    screen = await chat_screen(pilot)
    await wait_until(pilot, lambda: len(screen.view.views) == 4)
    return screen


def test_the_branch_on_screen_follows_the_active_leaf_then_the_newest_child(tmp_path):
    engine = FakeEngine()
    branches = MessageTree(engine.messages["c_sort"])
    assert [m.id for m in branches.path(branches.shown_leaf("m_a2"))] == ["m_u1", "m_a2", "m_u2", "m_a3"]
    assert branches.shown_leaf("m_a1") == "m_a1"
    assert branches.shown_leaf(None) == "m_a3"  # no active leaf: the newest message's branch
    assert branches.siblings("m_a2") == ["m_a1", "m_a2"]


@pytest.mark.asyncio
async def test_keymap_and_theme_come_from_the_config_file(tmp_path):
    config = tmp_path / "tui.toml"
    config.write_text('theme = "nord"\n\n[keymap]\nnew_chat = "ctrl+r"\nhelp = "f9"\n')
    app = LocalChatApp(client=FakeEngine(), config_file=config)
    async with app.run_test(size=SIZE) as pilot:
        screen = await opened(pilot)
        assert app.theme == "nord"
        await pilot.press("ctrl+n")  # remapped away: does nothing
        assert screen.session.conversation is not None
        await pilot.press("ctrl+r")
        await wait_until(pilot, lambda: screen.session.conversation is None and not screen.view.views)

        await pilot.press("f9")
        help_screen = await wait_until(pilot, lambda: isinstance(app.screen, HelpScreen) and app.screen)
        rows = {row[3]: row[1] for row in map(help_screen.query_one(DataTable).get_row_at,
                                               range(help_screen.query_one(DataTable).row_count))}
        assert rows["new_chat"] == "ctrl+r" and rows["regenerate"] == "ctrl+r" and rows["fork"] == "ctrl+g"
        await pilot.press("escape")

        app.theme = "gruvbox"  # chosen in the palette: remembered, the keymap kept
        await wait_until(pilot, lambda: TuiConfig.load(config).theme == "gruvbox")
        assert TuiConfig.load(config).keymap == {"new_chat": "ctrl+r", "help": "f9"}


@pytest.mark.asyncio
async def test_a_broken_config_file_is_reported_not_fatal(tmp_path):
    config = tmp_path / "tui.toml"
    config.write_text("[keymap\n")
    app = LocalChatApp(client=FakeEngine(), config_file=config)
    async with app.run_test(size=SIZE) as pilot:
        await opened(pilot)
        assert any("tui.toml" in n.message for n in app._notifications)


@pytest.mark.asyncio
async def test_the_command_palette_lists_the_chat_actions(tmp_path):
    app = LocalChatApp(client=FakeEngine(), config_file=tmp_path / "tui.toml")
    async with app.run_test(size=SIZE) as pilot:
        screen = await opened(pilot)
        await pilot.press("ctrl+p", *"branches")
        palette = await wait_until(pilot, lambda: isinstance(app.screen, CommandPalette) and app.screen)
        await wait_until(pilot, lambda: palette.query_one("CommandList").option_count > 0)
        await pilot.press("enter")
        tree_screen = await wait_until(pilot, lambda: isinstance(app.screen, BranchTreeScreen) and app.screen)
        assert screen.session.leaf == "m_a3"
        tree = tree_screen.query_one(Tree)
        assert tree.cursor_node.data == "m_a3"  # the branch on screen is where the outline starts
        # the outline indents only where the chat branches: the question, its two replies one level in, under it
        (question,) = tree.root.children
        first_reply, second_reply = question.children
        assert question.data == "m_u1" and str(question.label).startswith("● You:")
        assert first_reply.data == "m_a1" and str(first_reply.label).startswith("○ 1 of 2 · Assistant:")
        assert str(second_reply.label).startswith("● 2 of 2 · Assistant:")  # on the shown path
        tree.move_cursor(first_reply)
        await pilot.press("enter")
        await wait_until(pilot, lambda: screen.view.views[-1].message.id == "m_a1")
        assert switcher_text(screen.view.views[-1]) == "‹ 1/2 ›"
        await wait_until(pilot, lambda: app.client.conversations["c_sort"].active_leaf == "m_a1")


@pytest.mark.asyncio
async def test_copy_a_message_and_its_code_block(tmp_path):
    app = LocalChatApp(client=FakeEngine(), config_file=tmp_path / "tui.toml")
    async with app.run_test(size=SIZE) as pilot:
        screen = await opened(pilot)
        screen.view.views[1].focus()
        await pilot.press("ctrl+c")
        assert app.clipboard == SORT_CODE
        await pilot.press("ctrl+y")
        assert app.clipboard == "numbers = [3, 1, 2]\nprint(sorted(numbers))  # [1, 2, 3]"


@pytest.mark.asyncio
async def test_a_lost_engine_shows_an_error_screen_with_retry(tmp_path):
    engine = FakeEngine()
    app = LocalChatApp(client=engine, config_file=tmp_path / "tui.toml")
    async with app.run_test(size=SIZE) as pilot:
        await opened(pilot)
        engine.fail_with = httpx.ConnectError("connection refused")
        await pilot.press("f8", "y")  # delete the chat: the engine is gone
        assert "connection refused" in await wait_until(pilot, lambda: error_shown(app))
        error = app.screen

        await pilot.press("r")  # still gone: the error again
        await wait_until(pilot, lambda: isinstance(app.screen, EngineErrorScreen) and app.screen is not error)
        engine.fail_with = None
        await pilot.press("r")
        back = await wait_until(pilot, lambda: isinstance(app.screen, ChatScreen) and app.screen)
        await wait_until(pilot, lambda: len(back.view.views) == 4)


@pytest.mark.asyncio
async def test_an_engine_that_cannot_start_is_explained(tmp_path, monkeypatch):
    from localchat.app.client.engine_process import stop_engine
    from support import free_port, make_home

    monkeypatch.setenv("LOCALCHAT_HOME", str(make_home(tmp_path / "home")))
    app = LocalChatApp(serve_args=["--model", str(tmp_path / "missing.gguf"), "--port", str(free_port())],
                       config_file=tmp_path / "tui.toml")
    try:
        async with app.run_test(size=SIZE) as pilot:
            text = await wait_until(pilot, lambda: error_shown(app), 120)
            assert text.startswith("The engine could not start") and "missing.gguf" in text
    finally:
        stop_engine()  # it stays up to report its error: end it


def test_the_tui_imports_no_engine_code():
    """The UI reaches the engine only over HTTP; importing it loads no torch (and starts fast)."""
    code = ("import sys, localchat.tui.app; print(sorted(m for m in sys.modules if m.startswith('localchat.engine')"
            " or m.split('.')[0] in ('torch', 'transformers')))")
    loaded = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True, check=True).stdout
    # localchat.app.paths takes the folder helper from localchat.engine.loading.dirs, and the wire types the sampling
    # limits from localchat.engine.sampling_limits: constants, no torch behind either
    assert eval(loaded) == ["localchat.engine", "localchat.engine.loading", "localchat.engine.loading.dirs",
                            "localchat.engine.sampling_limits"]


@pytest.mark.asyncio
async def test_a_base_model_is_named_above_the_message_box_and_nothing_is_sent(tmp_path):
    engine = FakeEngine()
    engine.model, engine.chat = "gemma-3-270m-Q4_K_M", False
    app = LocalChatApp(client=engine, config_file=tmp_path / "tui.toml")
    async with app.run_test(size=SIZE) as pilot:
        screen = await opened(pilot)
        note = screen.query_one("#base-model-note")
        await wait_until(pilot, lambda: note.display, what="the base model's note")
        expected = ("gemma-3-270m-Q4_K_M is a base model without a chat template: it only continues text; it "
                    "answers /v1/completions")
        assert str(note.visual).startswith(expected)
        assert note.region.bottom <= screen.composer.region.y  # right above the message box

        await pilot.press(*"Hello", "enter")
        await wait_until(pilot, lambda: any(expected in n.message for n in app._notifications), what="the refusal")
        assert screen.composer.text == "Hello"  # kept, not sent
        assert len(engine.messages["c_sort"]) == 5 and screen.replies.generating_in is None


@pytest.mark.asyncio
@pytest.mark.parametrize("size", [(80, 24), (60, 20)])
async def test_an_engine_error_wraps_whole_on_a_small_terminal(tmp_path, size):
    """The issue's message was cut at 80 columns ("...port 8741 on 127"), and the buttons under it were cut too."""
    message = ("The engine could not start: the engine exited (localchat: port 8741 on 127.0.0.1 is in use by "
               "another program; pick one with --port); see /home/someone/.local/state/localchat/engine.log")
    app = LocalChatApp(client=FakeEngine(), config_file=tmp_path / "tui.toml")
    async with app.run_test(size=size) as pilot:
        await opened(pilot)
        app.show_engine_error(message)
        await wait_until(pilot, lambda: error_shown(app))
        await pilot.pause()
        shown_text = " ".join(" ".join(line.strip(" │╭╮╰╯─").split()) for line in screen_lines(pilot))
        assert " ".join(message.split()) in shown_text and "Quit (q) Retry (r)" in shown_text  # its buttons too
