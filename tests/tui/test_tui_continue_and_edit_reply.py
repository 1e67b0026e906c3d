"""A reply cut short goes on with Ctrl+D (continue), and Ctrl+E on a reply edits it into a branch to go on from
(issue 56), at 80x24 and 60x20."""

import msgspec
import pytest
from fake_engine import CONTINUED, FakeEngine
from tui_pilot import SMALL_SIZES, branched_chat, footer_shows, note_text, screen_of, stats_text, wait_until

from localchat.tui.app import LocalChatApp
from localchat.tui.screens.edit_message import EditMessageScreen


def app_with(engine: FakeEngine, tmp_path) -> LocalChatApp:
    return LocalChatApp(client=engine, config_file=tmp_path / "tui.toml")


def cut_last_reply(engine: FakeEngine) -> None:
    """The branched chat's last reply, m_a3, as cut at max tokens."""
    messages = engine.messages["c_sort"]
    messages[-1] = msgspec.structs.replace(messages[-1], finish_reason="length")


@pytest.mark.asyncio
@pytest.mark.parametrize("size", SMALL_SIZES)
async def test_ctrl_d_continues_a_reply_cut_at_max_tokens_in_place(tmp_path, size):
    engine = FakeEngine()
    cut_last_reply(engine)
    async with app_with(engine, tmp_path).run_test(size=size) as pilot:
        screen = await branched_chat(pilot)
        last = screen.view.views[-1]
        before = last.message.content
        assert note_text(last) == "cut at max tokens · ^d continues"
        await pilot.press("up")  # the last message selected
        assert screen.focused is last
        await footer_shows(pilot, screen, "^d Continue")
        await pilot.press("ctrl+d")
        await wait_until(pilot, lambda: engine.continued and not screen.replies.writing
                         and last.message.stats.cached_tokens != 80, what="the reply continued")
        assert engine.continued == ["m_a3"]
        assert [view.message.id for view in screen.view.views] == ["m_u1", "m_a2", "m_u2", "m_a3"]
        assert screen.view.views[-1] is last and last.message.content == f"{before} {CONTINUED}"
        assert last.body.source == last.message.content and note_text(last) == ""
        prompt = 88 + 18  # the cut reply's prompt and its tokens: all from the cache but the last
        assert stats_text(last) == f"42.5 tok/s · {prompt - 1} cached"


@pytest.mark.asyncio
@pytest.mark.parametrize("size", SMALL_SIZES)
async def test_ctrl_e_on_a_reply_saves_the_edit_as_a_branch_to_go_on_from(tmp_path, size):
    engine = FakeEngine()
    async with app_with(engine, tmp_path).run_test(size=size) as pilot:
        screen = await branched_chat(pilot)
        reply = screen.view.views[1]  # m_a2, the second of two replies
        reply.focus()
        await footer_shows(pilot, screen, "^e Edit")
        await pilot.press("ctrl+e")
        dialog = await screen_of(pilot, EditMessageScreen, what="the edit dialog")
        assert dialog.box.text == reply.message.content
        dialog.box.text = "Use `sorted()`, which returns a new list."
        await pilot.press("enter")
        await wait_until(pilot, lambda: engine.edited and not screen.replies.writing and len(screen.view.views) == 2,
                         what="the edited reply shown")
        assert engine.edited == [("m_a2", "Use `sorted()`, which returns a new list.")]
        edited = engine.messages["c_sort"][-1]
        views = screen.view.views
        assert [view.message.id for view in views] == ["m_u1", edited.id]  # the edited reply ends the branch
        assert views[1].message.content == edited.content and edited.finish_reason == "edited"
        assert screen.session.tree.siblings(edited.id) == ["m_a1", "m_a2", edited.id]
        assert note_text(views[1]) == "edited · ^d continues"
