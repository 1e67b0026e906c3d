"""The terminal UI as people live in it (fixed data, no model): 80x24 fits, typed text reaches the message box,
←/→ after ctrl+r (regenerate), a multi-line message, and a second request while a reply is written."""

import asyncio

import pytest
from fake_engine import FakeEngine
from textual.widgets import Footer, Label, Tree
from textual.widgets._footer import FooterKey
from tui_pilot import chat_screen, screen_of, switcher_text, wait_until

from localchat.tui.app import LocalChatApp
from localchat.tui.screens.branch_tree import BranchTreeScreen
from localchat.tui.screens.chat import ChatScreen
from localchat.tui.screens.help import HelpScreen, KeyTable
from localchat.tui.widgets.message_view import ChatMessage

SMALL = (80, 24)


def app_with(engine: FakeEngine, tmp_path) -> LocalChatApp:
    return LocalChatApp(client=engine, config_file=tmp_path / "tui.toml")


async def opened(pilot) -> ChatScreen:
    screen = await chat_screen(pilot)
    await wait_until(pilot, lambda: len(screen.view.views) == 4)
    return screen


def footer_keys(screen) -> dict[str, FooterKey]:
    return {key.action: key for key in screen.query_one(Footer).query(FooterKey)}


def inside(widget, size=SMALL) -> bool:
    region = widget.region
    return region.width > 0 and region.height > 0 and region.right <= size[0] and region.bottom <= size[1]


@pytest.mark.asyncio
async def test_at_80x24_the_footer_help_and_branch_outline_fit(tmp_path):
    async with app_with(FakeEngine(), tmp_path).run_test(size=SMALL) as pilot:
        screen = await opened(pilot)
        for focus in (screen.composer, screen.view.views[-1]):  # the message box's keys, then a message's too
            focus.focus()
            await pilot.pause()
            keys = footer_keys(screen)
            assert "help" in keys and inside(keys["help"]), f"F1 Help cut with {focus} focused"
            assert all(inside(key) for key in keys.values() if key.region.width), "a footer key is cut"

        await pilot.press("f1")
        help_screen = await screen_of(pilot, HelpScreen)
        await pilot.pause()
        assert all(inside(label) for label in help_screen.query(Label)), "a line of the help is clipped"
        table = help_screen.query_one(KeyTable)
        await pilot.press("end")
        assert table.cursor_row == table.row_count - 1
        await pilot.press("home")
        assert table.cursor_row == 0
        await pilot.press("escape")

        await pilot.press("ctrl+t")
        outline = await screen_of(pilot, BranchTreeScreen)
        await pilot.pause()
        tree = outline.query_one(Tree)
        assert inside(tree) and tree.max_scroll_x == 0  # no line runs past the right edge


@pytest.mark.asyncio
async def test_typing_after_opening_a_search_hit_goes_to_the_message_box(tmp_path):
    engine = FakeEngine()
    async with app_with(engine, tmp_path).run_test(size=SMALL) as pilot:
        screen = await opened(pilot)
        await pilot.press("ctrl+f", *"place")
        await wait_until(pilot, lambda: pilot.app.screen.hits)
        await pilot.press("down")  # from the query box to the results
        await pilot.press("enter")
        await wait_until(pilot, lambda: isinstance(pilot.app.screen, ChatScreen) and screen.session.leaf == "m_a1")
        await pilot.press(*"run")  # typed, r must not regenerate (ctrl+r does)
        await pilot.pause()
        assert screen.composer.text == "run" and screen.focused is screen.composer
        assert len(engine.messages["c_sort"]) == 5 and not screen.replies.writing


@pytest.mark.asyncio
async def test_left_and_right_work_after_a_regenerate(tmp_path):
    async with app_with(FakeEngine(), tmp_path).run_test(size=SMALL) as pilot:
        screen = await opened(pilot)
        await pilot.press("up")  # from the message box: the last message
        last = screen.view.views[-1]
        assert screen.focused is last and isinstance(last, ChatMessage)
        await pilot.press("ctrl+r")
        new = await wait_until(pilot, lambda: not screen.replies.writing and screen.view.views[-1].message.id != "m_a3"
                               and screen.view.views[-1])
        assert screen.focused is new and switcher_text(new) == "‹ 2/2 ›"
        await pilot.press("left")
        await wait_until(pilot, lambda: screen.view.views[-1].message.id == "m_a3")
        assert switcher_text(screen.view.views[-1]) == "‹ 1/2 ›"


@pytest.mark.asyncio
async def test_a_message_of_two_lines(tmp_path):
    engine = FakeEngine()
    async with app_with(engine, tmp_path).run_test(size=SMALL) as pilot:
        screen = await opened(pilot)
        await pilot.press(*"first", "ctrl+j", *"second", "shift+enter", *"third")
        assert screen.composer.text == "first\nsecond\nthird"
        await pilot.press("enter")
        await wait_until(pilot, lambda: not screen.replies.writing and screen.view.views[-1].message.role == "assistant"
                         and len(engine.messages["c_sort"]) == 7)
        sent = engine.messages["c_sort"][5]
        assert sent.role == "user" and sent.content == "first\nsecond\nthird" and screen.composer.text == ""


@pytest.mark.asyncio
async def test_a_second_request_while_a_reply_is_written_is_refused(tmp_path):
    engine = FakeEngine()
    engine.hold = asyncio.Event()
    async with app_with(engine, tmp_path).run_test(size=SMALL) as pilot:
        screen = await opened(pilot)
        await pilot.press("up", "ctrl+r", "ctrl+r", "ctrl+r")  # three presses, the first still streaming
        await wait_until(pilot, lambda: screen.replies.generating_in is not None)
        await pilot.press("ctrl+g")
        engine.hold.set()
        await wait_until(pilot, lambda: not screen.replies.writing)
        replies = [m for m in engine.messages["c_sort"] if m.parent_id == "m_u2"]
        assert len(replies) == 2  # the old reply and one new sibling, not three parallel ones
        assert [v.message.role for v in screen.view.views] == ["user", "assistant", "user", "assistant"]
        assert switcher_text(screen.view.views[-1]) == "‹ 2/2 ›"  # shown as siblings
