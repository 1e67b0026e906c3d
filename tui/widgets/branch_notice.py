"""A line above the chat, while a search hit is shown on another branch than the one the chat was on: which branch
("Found on branch 2 of 3, after “How do I…”"), and the key that goes back (a click does too)."""

from textual.content import Content
from textual.message import Message
from textual.widgets import Static


class BranchNotice(Static):
    class BackAsked(Message):
        """The user asked to go back to the branch the chat was on."""

    def show(self, place: tuple[int, int], fork_of: str, back_key: str) -> None:
        """place: (2, 3) for branch 2 of 3; fork_of: what the branches answer (or follow), in a few words."""
        index, count = place
        self.update(Content.from_markup(f"Found on branch {index} of {count}, after “$words” · "
                                        f"[@click=back][b]{back_key}[/b] goes back[/]", words=fork_of))
        self.display = True

    def hide(self) -> None:
        self.display = False

    def action_back(self) -> None:
        self.post_message(self.BackAsked())
