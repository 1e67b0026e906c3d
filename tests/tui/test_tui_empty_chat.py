"""A new chat, before its first message, says what to do, the model in use and the key that chooses a larger one
(the embedded model is small), in two lines that fit 80x24 beside the chat list (issue 32)."""

import pytest
from fake_engine import FakeEngine
from tui_pilot import SIZES, branched_chat, screen_lines, wait_until, within

from localchat.tui.app import LocalChatApp
from localchat.tui.widgets.empty_chat import EmptyChat

EMBEDDED = "SmolLM2-135M-Instruct"


@pytest.mark.asyncio
@pytest.mark.parametrize("size", SIZES)
async def test_a_new_chat_names_the_model_and_the_key_for_a_larger_one(tmp_path, size):
    engine = FakeEngine()
    engine.model = EMBEDDED
    async with LocalChatApp(client=engine, config_file=tmp_path / "tui.toml").run_test(size=size) as pilot:
        screen = await branched_chat(pilot)
        empty = screen.query_one(EmptyChat)
        assert not empty.display  # a chat with messages shows them
        await pilot.press("ctrl+n")
        await wait_until(pilot, lambda: empty.display and empty.region.area, what="the empty chat's hint")
        lines = screen_lines(pilot)[empty.region.y:empty.region.bottom]
        assert empty.region.height == 2 and within(empty, screen.query_one("#main").region)
        assert "Type a message; enter sends · ^s: settings" in lines[0]
        assert f"Using {EMBEDDED} · f4: a larger GGUF" in lines[1]

        await pilot.press(*"hello", "enter")
        await wait_until(pilot, lambda: len(screen.view.views) == 2 and not screen.replies.writing)
        assert not empty.display


@pytest.mark.asyncio
async def test_a_first_start_without_chats_shows_the_hint(tmp_path):
    engine = FakeEngine()
    engine.conversations.clear(), engine.messages.clear()  # nothing to reopen
    async with LocalChatApp(client=engine, config_file=tmp_path / "tui.toml").run_test(size=SIZES[0]) as pilot:
        empty = pilot.app.screen.query_one(EmptyChat)
        await wait_until(pilot, lambda: empty.display and empty.region.area, what="the hint on a first start")
        assert "Type a message" in screen_lines(pilot)[empty.region.y]


@pytest.mark.asyncio
async def test_the_hint_follows_a_remapped_key(tmp_path):
    config = tmp_path / "tui.toml"
    config.write_text('[keymap]\nswitch_model = "f6"\n')
    async with LocalChatApp(client=FakeEngine(), config_file=config).run_test(size=SIZES[0]) as pilot:
        screen = await branched_chat(pilot)
        await pilot.press("ctrl+n")
        empty = screen.query_one(EmptyChat)
        await wait_until(pilot, lambda: empty.display and empty.region.area)
        assert "Using SmolLM2 · f6: a larger GGUF" in screen_lines(pilot)[empty.region.y + 1]
