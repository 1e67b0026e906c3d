"""‹ 2/3 ›: which of its siblings a message is; clicking an arrow asks for the previous or next sibling."""

from textual.content import Content
from textual.message import Message
from textual.widgets import Static


class BranchSwitcher(Static):
    class Switched(Message):
        def __init__(self, switcher: "BranchSwitcher", delta: int):
            super().__init__()
            self.switcher, self.delta = switcher, delta

    def show_position(self, index: int, count: int) -> None:
        """index of count siblings; hidden for a message without siblings."""
        self.display = count > 1
        self.update(Content.from_markup("[@click=previous]‹[/] $position [@click=next]›[/]",
                                        position=f"{index + 1}/{count}"))

    def action_previous(self) -> None:
        self.post_message(self.Switched(self, -1))

    def action_next(self) -> None:
        self.post_message(self.Switched(self, 1))
