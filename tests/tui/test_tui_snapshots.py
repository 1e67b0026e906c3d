"""Screenshots of the main screen with a branched chat, of the N-reply picker, and of a thinking model's chat and a
long chat near the edge of the model's context at 80x24, from fixed data."""

from fake_engine import FakeEngine
from textual.pilot import Pilot
from textual.widgets import Footer
from tui_pilot import wait_until

from localchat.tui.app import LocalChatApp
from localchat.tui.screens.chat import ChatScreen
from localchat.tui.screens.fork_picker import ForkPicker

SIZE = (120, 36)


def app(tmp_path, engine: FakeEngine | None = None) -> LocalChatApp:
    app = LocalChatApp(client=engine or FakeEngine(), config_file=tmp_path / "tui.toml")
    app.animation_level = "none"  # a focused message scrolls into view at once: the same frame every run
    return app


async def branched_chat_shown(pilot: Pilot) -> ChatScreen:
    screen = await wait_until(pilot, lambda: isinstance(pilot.app.screen, ChatScreen) and pilot.app.screen)
    await wait_until(pilot, lambda: len(screen.view.views) == 4 and len(screen.query("ChatItem")) == 3)
    screen.view.views[1].focus()  # the reply with a sibling: its switcher reads ‹ 2/2 ›
    await pilot.pause()
    return screen


def test_main_screen_with_a_branched_chat(snap_compare, tmp_path):
    assert snap_compare(app(tmp_path), terminal_size=SIZE, run_before=branched_chat_shown)


def test_n_reply_picker(snap_compare, tmp_path):
    async def three_replies(pilot: Pilot) -> None:
        screen = await branched_chat_shown(pilot)
        # no chat list behind the picker: it refreshes while the replies stream, and a modal's background is not
        # repainted, so whether its items showed depended on timing
        await pilot.press("ctrl+b")
        # the chat screen's footer, behind the picker, is composed again when the screens change, and under load
        # the screenshot caught it empty or full: it is left out of this picture (test_tui_layout checks it)
        screen.query_one(Footer).display = False
        screen.view.views[-1].focus()
        await pilot.press("f")  # N (3) replies beside the last one
        picker = await wait_until(pilot, lambda: isinstance(pilot.app.screen, ForkPicker) and pilot.app.screen)
        await wait_until(pilot, lambda: not picker.streaming)
        picker.cards[1].focus()
        await pilot.pause()

    assert snap_compare(app(tmp_path), terminal_size=SIZE, run_before=three_replies)


def test_a_thinking_models_chat_at_80x24(snap_compare, tmp_path):
    async def thinking_expanded(pilot: Pilot) -> None:
        screen = await wait_until(pilot, lambda: isinstance(pilot.app.screen, ChatScreen) and pilot.app.screen)
        await wait_until(pilot, lambda: len(screen.view.views) == 2 and screen.view.views[-1].message.id == "m_r1")
        screen.view.views[-1].focus()
        await pilot.press("t")  # the reply's thinking, expanded above its answer
        await pilot.pause()

    assert snap_compare(app(tmp_path, FakeEngine(thinking=True)), terminal_size=(80, 24),
                        run_before=thinking_expanded)


def test_a_long_chat_near_the_edge_of_the_context_at_80x24(snap_compare, tmp_path):
    async def cut_in_view(pilot: Pilot) -> None:
        screen = await wait_until(pilot, lambda: isinstance(pilot.app.screen, ChatScreen) and pilot.app.screen)
        await wait_until(pilot, lambda: len(screen.view.views) == 10 and screen.view.cut_marker
                         and screen.gauge.has_class("-near-limit"))
        pilot.app.clear_notifications()  # the warning's toast: gone after a while, so left out of the picture
        screen.view.cut_marker.scroll_visible(top=True)  # the header's warning, and the divider where the cut is
        await pilot.pause()

    assert snap_compare(app(tmp_path, FakeEngine(long_chat=True)), terminal_size=(80, 24), run_before=cut_in_view)
