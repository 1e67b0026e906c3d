"""Search hits (Ctrl+F): the chat's title and who wrote the message on one line, the snippet under it with the
query's words marked in the theme's accent, bold, and no brackets around them (issue 32)."""

import pytest
from fake_engine import FakeEngine
from textual.widgets import OptionList
from tui_pilot import SIZES, branched_chat, wait_until, within

from localchat.tui.app import LocalChatApp
from localchat.tui.screens.search import SearchScreen


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
