"""Shown while the engine starts and loads its model (EngineClient.connect reports each stage)."""

from collections.abc import Awaitable, Callable

from textual import work
from textual.app import ComposeResult
from textual.containers import Center, Middle
from textual.screen import Screen
from textual.widgets import Label

from localchat.app.client.engine_client import EngineClient
from localchat.app.protocol.system import Health
from localchat.tui.widgets.load_progress import LoadProgress

Connect = Callable[[Callable[[Health], None]], Awaitable[EngineClient]]


class LoadingScreen(Screen):
    def __init__(self, connect: Connect):
        super().__init__()
        self.connect = connect

    def compose(self) -> ComposeResult:
        with Middle(), Center(id="loading"):
            yield Label("localchat", classes="dialog-title")
            yield LoadProgress("Looking for the engine…")

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
        self.query_one(LoadProgress).show(health)
