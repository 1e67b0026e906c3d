"""What a new chat shows before its first message: what to do, and the model in use, with the key that chooses
another (the embedded model is small; a larger GGUF model answers better). Two short lines: they fit 80 columns
beside the chat list (the placeholder and the footer name the help's key)."""

from dataclasses import dataclass

from textual.content import Content
from textual.widgets import Static


@dataclass(frozen=True)
class EmptyChatKeys:
    """The keys it names, as the footer writes them (remapped or not)."""

    settings: str
    switch_model: str | None  # None: the engine cannot switch (it relays to a server that chooses its model)


class EmptyChat(Static):
    def show(self, model: str | None, keys: EmptyChatKeys) -> None:
        lines = [Content.from_markup("Type a message; [b]enter[/] sends · [b]$key[/]: settings", key=keys.settings)]
        if model is not None:
            lines.append(Content.from_markup("Using [b]$model[/]", model=model))
            if keys.switch_model is not None:
                lines[-1] += Content.from_markup(" · [b]$key[/]: a larger GGUF", key=keys.switch_model)
        self.update(Content("\n").join(lines))
