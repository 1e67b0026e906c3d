"""A chat reads like one at a newcomer's 80x24 (issue 43): the chat list steps aside (ctrl+b shows it), a reply has
at least 70 columns, its stats are one short line (enter on it shows them all), and the line breaks and indents a
message was written with are kept where it has no code fence."""

import pytest
from fake_engine import FakeEngine
from tui_pilot import SIZES, branched_chat, screen_lines, stats_text, wait_until

from localchat.tui.app import LocalChatApp
from localchat.tui.reply_text import keep_lines
from localchat.tui.widgets.sidebar import Sidebar

NARROW, WIDE = SIZES


def app_with(engine: FakeEngine, tmp_path) -> LocalChatApp:
    return LocalChatApp(client=engine, config_file=tmp_path / "tui.toml")


@pytest.mark.asyncio
async def test_at_80_columns_the_chat_list_steps_aside_and_a_reply_has_70(tmp_path):
    async with app_with(FakeEngine(), tmp_path).run_test(size=NARROW) as pilot:
        screen = await branched_chat(pilot)
        sidebar = screen.query_one(Sidebar)
        assert not sidebar.shown
        await wait_until(pilot, lambda: screen.view.views[-1].body.region.width >= 70, what="a reply 70 wide")
        assert "^b Chats" in screen_lines(pilot)[-1]  # the footer says how to show it
        await pilot.press("ctrl+b")
        await wait_until(pilot, lambda: sidebar.region.width > 0, what="the chat list shown")
        await pilot.press("ctrl+b")
        await wait_until(pilot, lambda: sidebar.region.width == 0, what="the chat list hidden again")


@pytest.mark.asyncio
async def test_a_wide_terminal_shows_the_chat_list(tmp_path):
    async with app_with(FakeEngine(), tmp_path).run_test(size=WIDE) as pilot:
        screen = await branched_chat(pilot)
        assert screen.query_one(Sidebar).shown


@pytest.mark.asyncio
async def test_a_replys_stats_are_one_short_line_and_enter_shows_them_all(tmp_path):
    async with app_with(FakeEngine(), tmp_path).run_test(size=NARROW) as pilot:
        screen = await branched_chat(pilot)
        reply = screen.view.views[-1]
        assert stats_text(reply) == "42.5 tok/s · 80 cached"
        stats = reply.query_one(".message-stats")
        await wait_until(pilot, lambda: stats.region.height == 1, what="the stats laid out")
        reply.focus()
        await pilot.press("enter")
        await wait_until(pilot, lambda: "prompt 88 (80 cached)" in stats_text(reply), what="all the stats")
        assert "first token 0.12 s" in stats_text(reply)
        await pilot.press("enter")
        await wait_until(pilot, lambda: stats_text(reply) == "42.5 tok/s · 80 cached", what="the short line again")


CODE = "Like this:\ndef area(r):\n    return 3.14 * r * r"


@pytest.mark.asyncio
async def test_unfenced_code_keeps_its_lines_and_indents(tmp_path):
    async with app_with(FakeEngine(), tmp_path).run_test(size=NARROW) as pilot:
        screen = await branched_chat(pilot)
        screen.composer.insert(CODE)  # as pasted
        await pilot.press("enter")
        await wait_until(pilot, lambda: any(v.message.content == CODE for v in screen.view.views), what="sent")
        await pilot.pause()
        rows = [line.replace("\u00a0", " ").replace("\u200b", "") for line in screen_lines(pilot)]
        first = next(row for row in rows if "Like this:" in row)
        define = next(row for row in rows if "def area(r):" in row)
        body = next(row for row in rows if "return 3.14 * r * r" in row)
        assert "def" not in first  # a line of its own, not one paragraph
        assert body.index("return") == define.index("def") + 4  # its indent kept


def test_fences_lists_and_indented_code_are_markdowns_own():
    fenced = "```python\nx = 1\n    y = 2\n```"
    assert keep_lines(fenced) == fenced
    listed = "- one\n- two\n  - nested"
    assert keep_lines(listed) == listed
    indented = "Code:\n\n    x = 1\n    y = 2"
    assert keep_lines(indented) == indented
    assert keep_lines("Roses are red\nviolets are blue") == "Roses are red  \nviolets are blue"
    assert keep_lines("if x:\n  y") == "if x:  \n" + "\u00a0\u200b" * 2 + "y"
