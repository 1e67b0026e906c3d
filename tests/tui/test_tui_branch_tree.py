"""The branch outline (Ctrl+T) draws replies under the message they answer: five replies to one question are its
children, not its siblings (issue 32); it indents by depth, each message under the one it follows, and a fork's
replies show their place ("3 of 5") and first words (issue 43)."""

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


def depth(node) -> int:
    """How many levels in from the outline's root (the chat's title)."""
    return 0 if node.parent is None else 1 + depth(node.parent)


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
        (follow_up,) = third.children  # its branch goes on under it, a step in per message
        assert follow_up.data == "m_q2" and [node.data for node in follow_up.children] == ["m_a2"]
        assert all(not reply.children for reply in question.children if reply is not third)
        depths = {node.data: depth(node) for node in outline.nodes.values()}
        assert depths == {"m_q": 1, **dict.fromkeys(REPLIES, 2), "m_q2": 3, "m_a2": 4}
        labels = [str(reply.label) for reply in question.children]
        assert labels[2] == "● 3 of 5 · Assistant: Colour number 3." and labels[0].startswith("○ 1 of 5 · ")
        assert str(follow_up.label) == "● You: Why that one?"  # no place: it has no siblings
        assert tree.cursor_node.data == "m_a2"  # the branch on screen
        assert within(tree, outline.query_one("#branch-tree").region) and tree.max_scroll_x == 0
