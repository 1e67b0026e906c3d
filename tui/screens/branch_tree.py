"""The chat as an outline of its branches; the branch on screen is highlighted, choosing a message shows its
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


class BranchTreeScreen(ModalScreen[str | None]):
    BINDINGS = [Binding("escape", "dismiss(None)", "Close", id="cancel")]

    def __init__(self, title: str, branches: MessageTree, shown: list[str]):
        super().__init__()
        self.chat_title, self.branches, self.shown = title, branches, shown

    def compose(self) -> ComposeResult:
        with Vertical(classes="dialog", id="branch-tree"):
            yield Label("Branches (enter shows one)", classes="dialog-title")
            tree: Tree[str] = Tree(self.chat_title, id="branches")
            tree.root.expand()
            self.add_after(tree.root, None)
            yield tree

    def add_after(self, node: TreeNode, message_id: str | None) -> None:
        """The messages after message_id, in node: a lone reply continues in node, one under another; a message with
        several replies is a node that holds them, each a node of its own, one level in, that holds the rest of its
        branch. The outline indents only where the chat branches, and a reply is always under the message it
        answers."""
        children = self.branches.children.get(message_id, [])
        while len(children) == 1:  # a loop, not a call per message: a long chat is deeper than Python's recursion
            message_id = children[0]
            children = self.branches.children.get(message_id, [])
            label = self.label(message_id, self.depth(node))
            if len(children) > 1:
                node = node.add(label, data=message_id, expand=True)
            else:
                node.add_leaf(label, data=message_id)
        for child in children:
            branch = node.add(self.label(child, self.depth(node)), data=child, expand=True)
            self.add_after(branch, child)
            branch.allow_expand = bool(branch.children)

    @staticmethod
    def depth(node: TreeNode) -> int:
        return 0 if node.parent is None else 1 + BranchTreeScreen.depth(node.parent)

    def label(self, message_id: str, depth: int) -> Text:
        """The message's first words, as many as fit beside the outline's indent (at most PREVIEW characters)."""
        message = self.branches.messages[message_id]
        who = author(message)
        text = " ".join(message_markdown(message).split())
        room = max(12, min(PREVIEW, self.app.size.width - 30 - 4 * depth - len(who)))
        on_path = message_id in self.shown
        return Text.assemble("● " if on_path else "○ ", (f"{who}: ", "bold"),
                             text[:room] + ("…" if len(text) > room else ""),
                             style=f"bold {self.app.current_theme.accent}" if on_path else "")

    def on_mount(self) -> None:
        tree = self.query_one(Tree)
        if self.shown:
            tree.move_cursor(self.node_of(tree.root, self.shown[-1]))

    def node_of(self, node: TreeNode, message_id: str) -> TreeNode | None:
        if node.data == message_id:
            return node
        return next((found for child in node.children if (found := self.node_of(child, message_id))), None)

    def on_tree_node_selected(self, event: Tree.NodeSelected) -> None:
        if event.node.data is not None:
            self.dismiss(event.node.data)
