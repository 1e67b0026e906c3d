"""The chat list beside the chat. It shows by itself only where the terminal leaves the chat room to read (WIDE
columns and more); at 80 columns it is hidden and its key (ctrl+b) shows it, which then holds until pressed again."""

from textual.containers import Vertical

WIDE = 110  # columns: with the sidebar's 30, a reply keeps about 75 (as at 80 columns without it)


class Sidebar(Vertical):
    def __init__(self, *children, **kwargs):
        super().__init__(*children, **kwargs)
        self.chosen: bool | None = None  # shown or not, as the user chose (None: as the width says)

    @property
    def shown(self) -> bool:
        return not self.has_class("-hidden")

    def fit(self, width: int) -> None:
        """Shown or not for a terminal `width` columns wide, unless the user chose."""
        self.set_class(not (self.chosen if self.chosen is not None else width >= WIDE), "-hidden")

    def toggle(self) -> None:
        self.chosen = not self.shown
        self.set_class(not self.chosen, "-hidden")
