"""The chat as an outline of its branches; the branch on screen is highlighted, choosing a message shows its
branch."""

from rich.text import Text
from textual.app import ComposeResult
from textual.binding import Binding
from textual.containers import Vertical
from textual.screen import ModalScreen
from textual.widgets import Label, Tree
from textual.widgets.tree import TreeNode

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
            self.add_children(tree.root, None)
            yield tree

    def add_children(self, node: TreeNode, parent_id: str | None) -> None:
        for message_id in self.branches.children.get(parent_id, []):
            message = self.branches.messages[message_id]
            who = "You" if message.role == "user" else "Assistant"
            text = " ".join(message.content.split())
            on_path = message_id in self.shown
            label = Text.assemble("● " if on_path else "○ ", (f"{who}: ", "bold"),
                                  text[:PREVIEW] + ("…" if len(text) > PREVIEW else ""),
                                  style=f"bold {self.app.current_theme.accent}" if on_path else "")
            child = node.add(label, data=message_id, expand=True)
            self.add_children(child, message_id)
            if not self.branches.children.get(message_id):
                child.allow_expand = False

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
