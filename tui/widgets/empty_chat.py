"""What a new chat shows before its first message: what to do, and the model in use, with the key that chooses
another (the embedded model is small; a larger GGUF model answers better). Two short lines: they fit 80 columns
beside the chat list (the placeholder and the footer name the help's key)."""

from textual.content import Content
from textual.widgets import Static


class EmptyChat(Static):
    def show(self, model: str | None, settings_key: str, switch_model_key: str | None) -> None:
        """The keys as the footer writes them (remapped or not); switch_model_key None: the engine cannot switch (it
        relays to a server that chooses its model)."""
        lines = [Content.from_markup("Type a message; [b]enter[/] sends · [b]$key[/]: settings", key=settings_key)]
        if model is not None:
            lines.append(Content.from_markup("Using [b]$model[/]", model=model))
            if switch_model_key is not None:
                lines[-1] += Content.from_markup(" · [b]$key[/]: a larger GGUF", key=switch_model_key)
        self.update(Content("\n").join(lines))
