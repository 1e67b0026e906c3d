"""The footer of keys, fitted to its width: where the keys do not all fit, whole keys are left out, from the end (the
focused widget's keys come first, the screen's after them) and the help key last, never one cut in two (F1 lists
every key)."""

from textual.widget import Widget
from textual.widgets import Footer
from textual.widgets._footer import FooterKey, FooterLabel, KeyGroup

HELP_ACTION = "help"


def entries(keys: list[Widget]) -> list[list[Widget]]:
    """The footer's children as what a reader takes as one key: a key and its label, or a group's keys and their
    label ("← → Branch"); the command palette's key, docked apart, is none of them."""
    units: list[list[Widget]] = []
    for key in keys:
        if key.styles.dock != "none":
            continue
        if isinstance(key, FooterLabel) and units and isinstance(units[-1][-1], KeyGroup):
            units[-1].append(key)
        else:
            units.append([key])
    return units


def width_of(entry: list[Widget]) -> int:
    """The columns an entry takes, its margins included."""
    first, last = entry[0], entry[-1]
    return (last.virtual_region.right + last.styles.margin.right) - (first.virtual_region.x - first.styles.margin.left)


def is_help(entry: list[Widget]) -> bool:
    return isinstance(entry[0], FooterKey) and entry[0].action == HELP_ACTION


class KeyFooter(Footer):
    async def recompose(self) -> None:
        await super().recompose()
        self.call_after_refresh(self.fit_keys)

    def on_resize(self) -> None:
        """Every key again, then as many as the new width takes."""
        for key in self.children:
            key.display = True
        self.call_after_refresh(self.fit_keys)

    def fit_keys(self) -> None:
        """Leave out the keys past the footer's width: the last ones first, the help key last of all."""
        units = entries(list(self.children))
        if not units or not all(unit[0].virtual_region.width for unit in units):  # not laid out (yet)
            return
        docked = sum(key.outer_size.width for key in self.children if key.styles.dock != "none")
        room = self.size.width - docked
        kept: set[int] = set()
        for at in sorted(range(len(units)), key=lambda i: not is_help(units[i])):
            width = width_of(units[at])
            if width <= room:
                kept.add(at)
                room -= width
            else:
                room = -1  # the keys after one left out go too: the footer keeps its order's beginning
        for at, unit in enumerate(units):
            for key in unit:
                key.display = at in kept
