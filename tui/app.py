"""`localchat` with no command: the terminal UI. It talks to the engine process only through EngineClient."""

import subprocess

from textual.app import App
from textual.binding import Binding

from localchat.app import paths
from localchat.app.client.engine_client import EngineClient, EngineError
from localchat.tui.commands import ChatCommands
from localchat.tui.config import TuiConfig, config_path
from localchat.tui.screens.chat import ChatScreen
from localchat.tui.screens.engine_error import EngineErrorScreen
from localchat.tui.screens.fork_picker import ForkPicker, ReplyCard
from localchat.tui.screens.loading import LoadingScreen
from localchat.tui.widgets.composer import Composer
from localchat.tui.widgets.document_chips import AttachedChip
from localchat.tui.widgets.message_view import ChatMessage


class LocalChatApp(App):
    CSS_PATH = "localchat.tcss"
    TITLE = "localchat"
    COMMANDS = App.COMMANDS | {ChatCommands}

    def __init__(self, client: EngineClient | None = None, serve_args: list[str] = (), config_file=None,
                 started: subprocess.Popen | None = None):
        """With a client (tests), use it; without, find the engine (or `started`, one already starting) or start
        one (serve_args), and connect."""
        super().__init__()
        self.client, self.serve_args, self.started = client, list(serve_args), started
        self.config_path = config_file or config_path()
        self.config_error: str | None = None
        try:
            self.config = TuiConfig.load(self.config_path)
        except ValueError as error:
            self.config, self.config_error = TuiConfig(), str(error)

    @property
    def keymap(self) -> dict[str, str]:
        return self.config.keymap

    def on_mount(self) -> None:
        self.set_keymap(self.keymap)
        if self.config.theme in self.available_themes:
            self.theme = self.config.theme
        self.theme_changed_signal.subscribe(self, self.remember_theme)
        if self.config_error:
            self.notify(self.config_error, title="Config ignored", severity="error")
        if self.client is not None:
            self.push_screen(ChatScreen(self.client))
        else:
            self.push_screen(LoadingScreen(self.connect_engine))

    def remember_theme(self, theme) -> None:
        self.config.theme = theme.name
        self.save_config()

    def save_config(self) -> None:
        """tui.toml as the config is now (the theme chosen, the fork presets saved)."""
        try:
            self.config.save(self.config_path)
        except OSError as error:
            self.notify(f"Could not save {self.config_path}: {error.strerror}", severity="warning")

    async def connect_engine(self, on_progress) -> EngineClient:
        if self.client is not None:  # a retry with the client we were given: is its engine back?
            await self.client.health()
            return self.client
        started, self.started = self.started, None  # a retry finds or starts the engine afresh
        return await EngineClient.connect(on_progress=on_progress, serve_args=self.serve_args, started=started)

    def connected(self, client: EngineClient) -> None:
        self.client = client
        self.switch_screen(ChatScreen(client))

    def show_engine_error(self, message: str) -> None:
        while len(self.screen_stack) > 2:
            self.pop_screen()
        self.switch_screen(EngineErrorScreen(message, str(paths.log_path())))

    def action_retry(self) -> None:
        self.switch_screen(LoadingScreen(self.connect_engine))

    def report_engine_error(self, error: Exception) -> None:
        if isinstance(error, EngineError):
            self.notify(str(error), title="The engine refused", severity="error")
        else:
            self.show_engine_error(f"Lost the connection to the engine: {str(error) or type(error).__name__}")

    def help_groups(self) -> list[tuple[str, list[Binding]]]:
        return [("Chat", ChatScreen.BINDINGS), ("Message box", Composer.BINDINGS), ("Message", ChatMessage.BINDINGS),
                ("N replies", [*ForkPicker.BINDINGS, *ReplyCard.BINDINGS]),
                ("Document chip", AttachedChip.BINDINGS),
                ("App", [Binding(self.COMMAND_PALETTE_BINDING, "command_palette", "Command palette, themes"),
                         *App.BINDINGS[:1]])]

    async def on_unmount(self) -> None:
        if self.client is not None:
            await self.client.close()


def main(serve_args: list[str], started: subprocess.Popen | None = None) -> int:
    LocalChatApp(serve_args=serve_args, started=started).run()
    return 0
