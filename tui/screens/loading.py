"""Shown while the engine starts and loads its model (EngineClient.connect reports each stage)."""

from collections.abc import Awaitable, Callable

from textual import work
from textual.app import ComposeResult
from textual.containers import Center, Middle
from textual.screen import Screen
from textual.widgets import Label, ProgressBar

from localchat.app.client.engine_client import EngineClient
from localchat.app.protocol import Health

Connect = Callable[[Callable[[Health], None]], Awaitable[EngineClient]]


class LoadingScreen(Screen):
    def __init__(self, connect: Connect):
        super().__init__()
        self.connect = connect

    def compose(self) -> ComposeResult:
        with Middle(), Center(id="loading"):
            yield Label("localchat", classes="dialog-title")
            yield Label("Looking for the engine…", id="stage")
            yield ProgressBar(total=None, show_eta=False, show_percentage=False, id="progress")

    def on_mount(self) -> None:
        self.connect_engine()

    @work(exit_on_error=False)
    async def connect_engine(self) -> None:
        try:
            client = await self.connect(lambda health: self.app.call_from_thread(self.show_progress, health))
        except Exception as error:  # the engine could not start: say why, offer a retry
            self.app.show_engine_error(f"The engine could not start: {error or type(error).__name__}")
        else:
            self.app.connected(client)

    def show_progress(self, health: Health) -> None:
        progress = health.progress
        if progress is None:
            return
        self.query_one("#stage", Label).update(f"Loading the model: {progress.stage}")
        bar = self.query_one(ProgressBar)
        bar.show_percentage = progress.fraction is not None  # a stage without a fraction shows no "--%"
        bar.update(total=None if progress.fraction is None else 1.0, progress=progress.fraction or 0.0)
