"""The branch outline (Ctrl+T) draws replies under the message they answer: five replies to one question are its
children, not its siblings (issue 32)."""

import pytest
from fake_engine import FakeEngine, conversation, message
from textual.widgets import Tree
from tui_pilot import SIZES, chat_screen, chats_read, screen_of, wait_until, within

from localchat.tui.app import LocalChatApp
from localchat.tui.screens.branch_tree import BranchTreeScreen

REPLIES = [f"m_five{i}" for i in range(1, 6)]


def five_replies() -> FakeEngine:
    """The fake engine with its newest chat a question with five replies, the third followed by another exchange."""
    engine = FakeEngine()
    engine.conversations["c_five"] = conversation("c_five", "Five colours", 90, 8, "m_five3")
    engine.messages["c_five"] = [
        message("m_q", None, "user", "Name a colour.", 91, conversation="c_five"),
        *(message(id, "m_q", "assistant", f"Colour number {i}.", 91 + i, conversation="c_five")
          for i, id in enumerate(REPLIES, 1)),
        message("m_q2", "m_five3", "user", "Why that one?", 97, conversation="c_five"),
        message("m_a2", "m_q2", "assistant", "Because it is calm.", 98, conversation="c_five"),
    ]
    return engine


@pytest.mark.asyncio
@pytest.mark.parametrize("size", SIZES)
async def test_five_replies_are_children_of_the_message_they_answer(tmp_path, size):
    async with LocalChatApp(client=five_replies(), config_file=tmp_path / "tui.toml").run_test(size=size) as pilot:
        screen = await chat_screen(pilot)
        await wait_until(pilot, lambda: len(screen.view.views) == 4 and chats_read(screen))
        await pilot.press("ctrl+t")
        outline = await screen_of(pilot, BranchTreeScreen)
        await pilot.pause()
        tree = outline.query_one(Tree)

        (question,) = tree.root.children
        assert question.data == "m_q" and question.is_expanded
        assert [reply.data for reply in question.children] == REPLIES
        third = question.children[2]
        assert [node.data for node in third.children] == ["m_q2", "m_a2"]  # its branch goes on under it
        assert all(not reply.children for reply in question.children if reply is not third)
        assert tree.cursor_node.data == "m_a2"  # the branch on screen
        assert within(tree, outline.query_one("#branch-tree").region) and tree.max_scroll_x == 0
