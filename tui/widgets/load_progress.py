"""The model's loading stage and progress bar, as the engine's /health reports them (the loading screen and the
model switcher show it)."""

from textual.app import ComposeResult
from textual.containers import Vertical
from textual.widgets import Label, ProgressBar

from localchat.app.protocol.system import Health


class LoadProgress(Vertical):
    DEFAULT_CSS = "LoadProgress { height: auto; } LoadProgress > Label { width: 100%; content-align: center middle; }"

    def __init__(self, waiting: str, **kwargs):
        super().__init__(**kwargs)
        self.waiting = waiting

    def compose(self) -> ComposeResult:
        yield Label(self.waiting, id="stage")
        yield ProgressBar(total=None, show_eta=False, show_percentage=False, id="progress")

    def show(self, health: Health) -> None:
        progress = health.progress
        if progress is None:
            return
        self.query_one("#stage", Label).update(f"Loading the model: {progress.stage}")
        bar = self.query_one(ProgressBar)
        bar.show_percentage = progress.fraction is not None  # a stage without a fraction shows no "--%"
        bar.update(total=None if progress.fraction is None else 1.0, progress=progress.fraction or 0.0)
