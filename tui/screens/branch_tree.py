"""The chat as an outline of its branches: each message under the one it follows, a fork's replies (or edits) each
with its first words and its place ("2 of 3"); the branch on screen is highlighted, choosing a message shows its
branch."""

from rich.text import Text
from textual.app import ComposeResult
from textual.binding import Binding
from textual.containers import Vertical
from textual.screen import ModalScreen
from textual.widgets import Label, Tree
from textual.widgets.tree import TreeNode

from localchat.app.markdown import author, message_markdown
from localchat.tui.message_tree import MessageTree

PREVIEW = 60
GUIDE_DEPTH = 2  # columns per level: a chat of many turns stays readable at 80 columns


class BranchTreeScreen(ModalScreen[str | None]):
    BINDINGS = [Binding("escape", "dismiss(None)", "Close", id="cancel")]

    def __init__(self, title: str, branches: MessageTree, shown: list[str]):
        super().__init__()
        self.chat_title, self.branches, self.shown = title, branches, shown
        self.nodes: dict[str, TreeNode] = {}  # by message id

    def compose(self) -> ComposeResult:
        with Vertical(classes="dialog", id="branch-tree"):
            yield Label("Branches (enter shows one)", classes="dialog-title")
            tree: Tree[str] = Tree(self.chat_title, id="branches")
            tree.guide_depth = GUIDE_DEPTH
            tree.root.expand()
            self.add_messages(tree.root)
            yield tree

    def add_messages(self, root: TreeNode) -> None:
        """Every message, under the one it follows: the outline indents by depth, a reply one step in from the message
        it answers, a fork's replies side by side at one depth, each with its place ("2 of 3"). A loop over a stack,
        not a call per message: a long chat is deeper than Python's recursion."""
        pending = [(root, message_id, 1) for message_id in reversed(self.branches.children.get(None, []))]
        while pending:
            parent, message_id, depth = pending.pop()
            children = self.branches.children.get(message_id, [])
            label = self.label(message_id, depth)
            node = (parent.add(label, data=message_id, expand=True) if children
                    else parent.add_leaf(label, data=message_id))
            self.nodes[message_id] = node
            pending += [(node, child, depth + 1) for child in reversed(children)]

    def label(self, message_id: str, depth: int) -> Text:
        """The message's first words, as many as fit beside the outline's indent (at most PREVIEW characters); where
        it is one of several replies (or edits), its place among them first: "2 of 3"."""
        message = self.branches.messages[message_id]
        index, count = self.branches.place(message_id)
        place = f"{index} of {count} · " if count > 1 else ""
        who = f"{place}{author(message)}"
        text = " ".join(message_markdown(message).split())
        room = max(12, min(PREVIEW, self.app.size.width - 18 - GUIDE_DEPTH * depth - len(who)))
        on_path = message_id in self.shown
        return Text.assemble("● " if on_path else "○ ", (f"{who}: ", "bold"),
                             text[:room] + ("…" if len(text) > room else ""),
                             style=f"bold {self.app.current_theme.accent}" if on_path else "")

    def on_mount(self) -> None:
        tree = self.query_one(Tree)
        if self.shown:
            tree.move_cursor(self.nodes[self.shown[-1]])

    def on_tree_node_selected(self, event: Tree.NodeSelected) -> None:
        if event.node.data is not None:
            self.dismiss(event.node.data)
