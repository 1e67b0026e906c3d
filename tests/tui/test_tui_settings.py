"""The settings dialog (Ctrl+S) at 80x24 and 120x40: its form scrolls inside the dialog's border, every field can be
reached and is then in view inside it, and Save and Cancel stay in view (issue 32)."""

import pytest
from fake_engine import FakeEngine
from textual.widgets import Button, Checkbox, Input, Select, TextArea
from tui_pilot import SIZES, branched_chat, open_settings, wait_until, within

from localchat.tui.app import LocalChatApp

FIELDS = (Input, TextArea, Select, Checkbox)


@pytest.mark.asyncio
@pytest.mark.parametrize("size", SIZES)
async def test_every_field_scrolls_into_view_inside_the_dialog(tmp_path, size):
    app = LocalChatApp(client=FakeEngine(), config_file=tmp_path / "tui.toml")
    app.animation_level = "none"  # a focused field scrolls into view at once
    async with app.run_test(size=size) as pilot:
        await branched_chat(pilot)
        settings = await open_settings(pilot)
        await pilot.pause()
        dialog, form = settings.query_one("#settings"), settings.query_one("#settings-fields")
        assert within(dialog, pilot.app.screen.region)
        inner = dialog.content_region  # inside the border
        fields = [widget for widget in form.query("*") if isinstance(widget, FIELDS) and widget.id]
        assert [field.id for field in fields][-3:] == ["tools", "tool-choice", "context-overflow"]
        assert len(fields) == 16  # the system prompt, 8 numbers, seed, N, stop strings, JSON, tools, choice, overflow
        if size == SIZES[0]:
            assert form.max_scroll_y > 0  # at 80x24 the form is taller than the dialog: it scrolls
        for field in [fields[-1], *fields]:  # the last one first: the farthest scroll
            field.focus()  # it scrolls into view on the next refresh, later under load
            await wait_until(pilot, lambda field=field: within(field, form.content_region), what=f"{field} in view")
            assert within(field, inner)
            for button in settings.query(Button):
                assert within(button, inner), f"{button} is out of view with {field} focused"
