"""The chat screen's part for a chat's settings (ctrl+s): the dialog over the open chat (a new one is created for
them), saved to the engine and to the session, and the number of replies a fork writes (per chat, kept here)."""

from textual.widget import Widget

from localchat.app.client.engine_client import EngineClient
from localchat.tui.chat.host import ChatHost
from localchat.tui.engine_work import engine_work
from localchat.tui.screens.settings import SettingsScreen

DEFAULT_FORK_N = 3


class SettingsControl(Widget):
    DEFAULT_CSS = "SettingsControl { display: none; }"

    def __init__(self, client: EngineClient, host: ChatHost):
        super().__init__()
        self.client, self.host = client, host
        self.fork_n: dict[str, int] = {}  # per chat

    def n_of(self, conversation_id: str | None) -> int:
        """How many replies a fork writes in the chat (None: a new one)."""
        return self.fork_n.get(conversation_id, DEFAULT_FORK_N)

    def keep_n(self, conversation_id: str | None, n: int) -> None:
        """The chat's next fork starts with n replies (the fork dialog's last)."""
        if conversation_id is not None:
            self.fork_n[conversation_id] = n

    @engine_work()
    async def edit(self, thinking: bool) -> None:
        """thinking: the model thinks (its settings for that are shown)."""
        conversation = await self.host.stored_chat()
        limits = await self.client.limits()
        choice = await self.app.push_screen_wait(SettingsScreen(conversation, self.n_of(conversation.id), limits,
                                                                thinking=thinking))
        if choice is None:
            return
        saved = await self.client.update_conversation(conversation.id, system_prompt=choice.system_prompt,
                                                      settings=choice.sampling)
        self.fork_n[conversation.id] = choice.fork_n
        self.host.session.update(saved)
        self.notify("Settings saved")
