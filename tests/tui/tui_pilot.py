"""Helpers for driving the terminal UI in tests: waiting for a condition instead of sleeping, reading what a
widget shows, and what the screen shows at the sizes it must fit."""

import time
from collections.abc import Callable
from typing import TypeVar

from textual.geometry import Region
from textual.pilot import Pilot
from textual.screen import Screen
from textual.widget import Widget
from textual.widgets import Footer, Static
from textual.widgets._footer import FooterLabel, KeyGroup

from localchat.tui.screens.chat import ChatScreen
from localchat.tui.screens.fork_dialog import ForkDialog
from localchat.tui.screens.settings import SettingsScreen
from localchat.tui.widgets.message_view import MessageView

# the sizes every main screen is checked at: a newcomer's 80x24 (tmux), and a roomier terminal
SIZES = [(80, 24), (120, 40)]
SMALL_SIZES = [(80, 24), (60, 20)]  # a newcomer's tmux, and a split pane (issue 56)

S = TypeVar("S", bound=Screen)


async def wait_until(pilot: Pilot, condition: Callable[[], object], timeout: float = 60.0, what: str = ""):
    """Let the app run until condition() is truthy; returns its value."""
    deadline = time.monotonic() + timeout
    while time.monotonic() < deadline:
        if value := condition():
            return value
        await pilot.pause(0.02)
    said = [f"{n.title}: {n.message}" if n.title else n.message for n in pilot.app._notifications]  # (no public list)
    raise TimeoutError(f"timed out waiting for {what or condition} (on {type(pilot.app.screen).__name__}; "
                       f"notifications: {said or 'none'})")


async def screen_of(pilot: Pilot, kind: type[S], what: str = "") -> S:
    """The app's screen, once it is a `kind` (a dialog pushed, a dialog's screen back)."""
    return await wait_until(pilot, lambda: isinstance(pilot.app.screen, kind) and pilot.app.screen, what=what)


async def open_settings(pilot: Pilot) -> SettingsScreen:
    """Ctrl+S on the chat: the settings dialog, once it shows."""
    await pilot.press("ctrl+s")
    return await screen_of(pilot, SettingsScreen, what="the settings dialog")


async def fork(pilot: Pilot, lines: list[str] = ()) -> ForkDialog:
    """Ctrl+G: the fork dialog, once it shows, its lines typed (where given) and sent with Enter; the dialog sent."""
    await pilot.press("ctrl+g")
    dialog = await screen_of(pilot, ForkDialog, what="the fork dialog")
    await wait_until(pilot, lambda: dialog.line_inputs and dialog.focused is dialog.line_inputs[0],
                     what="the dialog's lines")
    for box, line in zip(dialog.line_inputs, lines):
        box.value = line
    await pilot.press("enter")
    return dialog


def shown(widget: Static) -> str:
    """The text a Static shows."""
    return str(widget.visual) if widget.display else ""


def switcher_text(view: MessageView) -> str:
    return shown(view.query_one(".branch-switcher", Static))


def stats_text(view: MessageView) -> str:
    return shown(view.query_one(".message-stats", Static))


def note_text(view: MessageView) -> str:
    return shown(view.query_one(".message-note", Static))


async def chat_screen(pilot: Pilot, conversation_id: str | None = None) -> ChatScreen:
    """The chat screen, once it shows `conversation_id` (or has loaded)."""
    def ready():
        screen = pilot.app.screen
        return isinstance(screen, ChatScreen) and (conversation_id is None or (
            screen.session.conversation is not None and screen.session.conversation.id == conversation_id))
    await wait_until(pilot, ready, what=f"the chat {conversation_id}")
    return pilot.app.screen


async def reply_written(pilot: Pilot, screen: ChatScreen, old: set[str] = frozenset(),
                        timeout: float = 90.0) -> MessageView:
    """The last message, once it is a finished reply that is not one of the `old` messages."""
    def done():
        views = screen.view.views
        return (screen.replies.generating_in is None and views and views[-1].message.role == "assistant"
                and views[-1].message.id not in old and views[-1].message.stats is not None and views[-1])
    return await wait_until(pilot, done, timeout, "the reply")


def thinking_title(view: MessageView) -> str:
    """The line of a reply's thinking ("▶ Thought for 3.4 s"; "" where it has none)."""
    block = view.thinking_block
    return shown(block.query_one(".thinking-title", Static)) if block.display else ""


def thinking_text(view: MessageView) -> str:
    """A reply's thinking as shown once expanded ("" while it is collapsed)."""
    block = view.thinking_block
    return shown(block.query_one(".thinking-text", Static)) if block.display else ""


def screen_lines(pilot: Pilot) -> list[str]:
    """The text of each row of the screen as the terminal would show it (modal screens over the one behind)."""
    return [strip.text for strip in pilot.app.screen._compositor.render_strips()]


def within(widget: Widget, region: Region) -> bool:
    """The widget is drawn (has a size) and wholly inside `region`."""
    return widget.region.area > 0 and region.contains_region(widget.region)


def chats_read(screen: ChatScreen) -> bool:
    """The chat list, and the chat opened with it, are read and shown (none of the screen's "chats" work runs)."""
    return not any(worker.group == "chats" and worker.is_running for worker in screen.workers)


async def branched_chat(pilot: Pilot) -> ChatScreen:
    """The chat screen once it shows the fake engine's branched chat (4 messages) and its chat list (3 chats)."""
    screen = await chat_screen(pilot)
    await wait_until(pilot, lambda: len(screen.view.views) == 4 and len(screen.query("ChatItem")) == 3
                     and chats_read(screen), what="the branched chat")
    return screen


def footer_entries(screen) -> list:
    """The footer's keys shown (those it had no room for are left out whole)."""
    return [entry for entry in screen.query_one(Footer).children if entry.display]


def assert_footer_readable(screen, width: int) -> None:
    """Every entry shown (a key and its label, or a group's keys and their label) is inside the screen, a column
    apart from the next."""
    entries = footer_entries(screen)
    assert entries and all(entry.region.width for entry in entries), "the footer is not laid out"
    assert all(entry.region.right <= width for entry in entries), "a footer key is cut"
    for before, after in zip(entries, entries[1:], strict=False):
        if isinstance(before, KeyGroup) and isinstance(after, FooterLabel):
            continue  # the group's keys and their label are one entry: "← → Branch"
        assert before.region.right < after.region.x, f"{before} runs into {after}"


def footer_readable(screen, width: int) -> bool:
    """assert_footer_readable, as a condition to wait for (the footer fits its keys a frame after it shows them)."""
    try:
        assert_footer_readable(screen, width)
    except AssertionError:
        return False
    return True


async def footer_shows(pilot, screen, *keys: str) -> str:
    """The footer's line, once it shows every one of `keys` ("^r Regenerate") and each of its entries is laid out."""
    def shown():
        line = screen_lines(pilot)[-1]
        entries = footer_entries(screen)
        return (all(key in line for key in keys) and entries and all(entry.region.width for entry in entries)
                and line)
    return await wait_until(pilot, shown, what=f"{keys} in the footer")
