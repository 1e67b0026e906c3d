"""N replies (three) in the picker: side by side where they all fit (120 columns), one whole reply at a time where
they do not (80), with its place and ←/→ to the others; its header shows whole (issue 32)."""

import pytest
from fake_engine import FORK_TEMPERATURE, FORKED, FakeEngine
from textual.widgets import Label
from tui_pilot import SIZES, branched_chat, fork, screen_lines, screen_of, wait_until, within

from localchat.tui.app import LocalChatApp
from localchat.tui.screens.fork_picker import ForkPicker

HEADER = "Pick the reply to go on from: 1-3 or enter. The others stay as branches."


async def three_replies(pilot) -> ForkPicker:
    screen = await branched_chat(pilot)
    screen.view.views[-1].focus()
    await fork(pilot)  # N (3) replies beside the focused (last) one
    picker = await screen_of(pilot, ForkPicker)
    await wait_until(pilot, lambda: not picker.streaming, what="three replies")
    await pilot.pause()
    return picker


def visible_cards(picker: ForkPicker) -> list:
    return [card for card in picker.cards if card.display and card.region.area]


def position(picker: ForkPicker) -> str:
    return str(picker.query_one("#fork-position", Label).render())


@pytest.mark.asyncio
@pytest.mark.parametrize("size", SIZES)
async def test_the_pickers_header_shows_whole_and_says_how_the_replies_were_sampled(tmp_path, size):
    async with LocalChatApp(client=FakeEngine(), config_file=tmp_path / "tui.toml").run_test(size=size) as pilot:
        await three_replies(pilot)
        assert any(HEADER in line for line in screen_lines(pilot))
        assert any(f"3 replies sampled at temperature {FORK_TEMPERATURE:g}" in line for line in screen_lines(pilot))


@pytest.mark.asyncio
async def test_at_80_columns_one_whole_reply_at_a_time(tmp_path):
    async with LocalChatApp(client=FakeEngine(), config_file=tmp_path / "tui.toml").run_test(size=SIZES[0]) as pilot:
        picker = await three_replies(pilot)
        box = picker.query_one("#fork-picker").region
        for at in (1, 2, 3, 3):  # → moves a whole reply, and stops at the last
            (card,) = visible_cards(picker)
            assert card is picker.cards[at - 1] and picker.focused is card and within(card, box)
            assert position(picker) == f"Reply {at} of 3 · ← → the others"
            shown_text = FORKED[at - 1].replace("*", "")  # its Markdown as rendered
            assert any(shown_text in line for line in screen_lines(pilot))  # whole, not scrolled away
            await pilot.press("right")
        await pilot.press("left")
        assert visible_cards(picker) == [picker.cards[1]]
        chosen = picker.cards[1].message.id
        await pilot.press("enter")  # continues from the one shown
        screen = await wait_until(pilot, lambda: not isinstance(pilot.app.screen, ForkPicker) and pilot.app.screen)
        await wait_until(pilot, lambda: screen.view.views[-1].message.id == chosen)


@pytest.mark.asyncio
async def test_at_120_columns_side_by_side(tmp_path):
    async with LocalChatApp(client=FakeEngine(), config_file=tmp_path / "tui.toml").run_test(size=SIZES[1]) as pilot:
        picker = await three_replies(pilot)
        box = picker.query_one("#fork-picker").region
        cards = visible_cards(picker)
        assert cards == picker.cards and all(within(card, box) for card in cards)
        assert all(left.region.right <= right.region.x for left, right in zip(cards, cards[1:], strict=False))
        assert not picker.query_one("#fork-position").display
        await pilot.press("right")
        assert picker.focused is picker.cards[1] and visible_cards(picker) == cards
