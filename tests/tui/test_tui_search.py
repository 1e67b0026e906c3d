"""Search hits (Ctrl+F): the chat's title and who wrote the message on one line, the snippet under it with the
query's words marked in the theme's accent, bold, and no brackets around them (issue 32). A hit on another branch
than the one its chat was on says so, and Escape goes back (issue 43)."""

import pytest
from fake_engine import FakeEngine
from textual.widgets import OptionList
from tui_pilot import SIZES, branched_chat, screen_lines, shown, wait_until, within

from localchat.tui.app import LocalChatApp
from localchat.tui.screens.search import SearchScreen
from localchat.tui.widgets.branch_notice import BranchNotice


@pytest.mark.asyncio
@pytest.mark.parametrize("size", SIZES)
async def test_a_hit_marks_the_matched_word_in_the_accent(tmp_path, size):
    app = LocalChatApp(client=FakeEngine(), config_file=tmp_path / "tui.toml")
    async with app.run_test(size=size) as pilot:
        await branched_chat(pilot)
        await pilot.press("ctrl+f", *"place")
        search = await wait_until(pilot, lambda: isinstance(app.screen, SearchScreen) and app.screen.hits
                                  and app.screen)
        await pilot.pause()
        hits = search.query_one(OptionList)
        assert hits.option_count == 1 and within(hits, search.query_one("#search").region)
        title, snippet = str(hits.get_option_at_index(0).prompt).split("\n")
        assert title == "Sorting in Python · Assistant"  # the title on its own line, whole
        assert snippet == "Call `list.sort()` to sort it in place."  # the text as written: no [brackets]

        row = next(strip for strip in app.screen._compositor.render_strips() if "sort it in place" in strip.text)
        styles = {segment.text: segment.style for segment in row if segment.text.strip()}
        accent = app.theme_variables["text-accent"].lower()
        assert styles["place"].bold and styles["place"].color.triplet.hex == accent
        around = styles["Call `list.sort()` to sort it in "]
        assert not around.bold and around.color.triplet.hex != accent


@pytest.mark.asyncio
async def test_a_hit_on_another_branch_says_so_and_escape_goes_back(tmp_path):
    """The hit ("place") is in the first reply, m_a1, while the chat shows the branch of the second: the notice says
    which branch the chat is on now, and Escape (or a click on it) goes back to the branch it was on (issue 43)."""
    engine = FakeEngine()
    app = LocalChatApp(client=engine, config_file=tmp_path / "tui.toml")
    async with app.run_test(size=SIZES[0]) as pilot:
        screen = await branched_chat(pilot)
        assert screen.session.leaf == "m_a3"
        await pilot.press("ctrl+f", *"place")
        await wait_until(pilot, lambda: isinstance(app.screen, SearchScreen) and app.screen.hits)
        await pilot.press("down", "enter")
        notice = screen.query_one(BranchNotice)
        await wait_until(pilot, lambda: screen.session.leaf == "m_a1" and notice.display, what="the hit's branch")
        said = shown(notice)
        assert said == "Found on branch 1 of 2, after “How do I sort a list in…” · esc goes back"
        assert notice.region.height == 1  # one line at 80 columns
        await wait_until(pilot, lambda: "esc Back" in screen_lines(pilot)[-1], what="Back in the footer")
        await pilot.press("escape")
        await wait_until(pilot, lambda: screen.session.leaf == "m_a3" and not notice.display, what="back")
        assert engine.conversations["c_sort"].active_leaf == "m_a3"
        await wait_until(pilot, lambda: "Back" not in screen_lines(pilot)[-1], what="Back gone from the footer")


@pytest.mark.asyncio
async def test_a_hit_on_the_branch_shown_needs_no_notice(tmp_path):
    app = LocalChatApp(client=FakeEngine(), config_file=tmp_path / "tui.toml")
    async with app.run_test(size=SIZES[0]) as pilot:
        screen = await branched_chat(pilot)
        await pilot.press("ctrl+f", *"reverse")
        await wait_until(pilot, lambda: isinstance(app.screen, SearchScreen) and app.screen.hits)
        await pilot.press("down", "enter")
        await wait_until(pilot, lambda: app.screen is screen, what="the hit opened")
        await pilot.pause()
        assert screen.session.leaf == "m_a3" and not screen.query_one(BranchNotice).display
