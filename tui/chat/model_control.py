"""The chat screen's part for the engine's model: what it runs and what that can do (chat, think), read at start and
after a switch (F4, the models dialog), and a note where the open chat was written with another model. It tells the
screen what changed with a typed message (Known), which the screen shows (its title, the new chat's hint, the note on
a base model)."""

from dataclasses import dataclass

from textual.message import Message
from textual.widget import Widget

from localchat.app.client.engine_client import EngineClient
from localchat.app.protocol.system import Health
from localchat.tui.chat.host import ChatHost
from localchat.tui.engine_work import engine_work
from localchat.tui.screens.models import ModelsScreen


def base_model_notice(model: str | None) -> str:
    return (f"{model} is a base model without a chat template: it only continues text; it answers /v1/completions. "
            "F4 switches to a chat model.")


class ModelControl(Widget):
    DEFAULT_CSS = "ModelControl { display: none; }"

    @dataclass
    class Known(Message):
        """The model the engine runs, as its health says (health None: only its name, as a reply recorded it)."""

        model: str | None
        health: Health | None

    def __init__(self, client: EngineClient, host: ChatHost):
        super().__init__()
        self.client, self.host = client, host
        self.model: str | None = None  # the model the engine runs (as replies record it)
        self.can_chat = True  # False: the model is a base model, which only continues text
        self.thinks = False  # the model thinks before it answers: its thinking can be ended, its settings are shown

    def on_mount(self) -> None:
        self.load()

    @engine_work(group="model")
    async def load(self) -> None:
        self.know(await self.client.health())

    def know(self, health: Health) -> None:
        self.model = health.model
        self.can_chat = health.chat is not False
        self.thinks = health.thinking is True
        self.post_message(self.Known(health.model, health))

    def know_name(self, model: str) -> None:
        """A reply was written with `model` (another client may have switched it meanwhile)."""
        self.model = model
        self.post_message(self.Known(model, None))

    def ask_to_switch(self, writing: bool) -> None:
        if writing:
            self.notify("A reply is being written; esc stops it, then F4 switches the model", severity="warning")
        else:
            self.switch()

    @engine_work(group="model")
    async def switch(self) -> None:
        catalog = await self.client.models()
        if not catalog.switchable:
            self.notify(f"This engine relays to another server, which chooses its model ({catalog.current})",
                        severity="warning")
            return
        health = await self.app.push_screen_wait(ModelsScreen(self.client, catalog))
        if health is None:
            return
        if health.status != "ready":
            self.notify(health.error or f"the engine is {health.status}", title="The model did not load",
                        severity="error")
        self.know(health)
        if health.model:
            self.notify(f"Now running {health.model}", title="Model")
        self.note_other_model()

    def note_other_model(self) -> None:
        """Say so when the open chat was written with another model than the engine runs."""
        conversation = self.host.session.conversation
        written_with = conversation and conversation.model
        if written_with and self.model and written_with != self.model:
            self.notify(f"This chat was written with {written_with}; the engine runs {self.model}. Continuing "
                        f"tokenizes its messages again for {self.model} (F4 switches the model).", title="Model")

    def refuses_chat(self) -> bool:
        """A base model writes no replies: say so."""
        if not self.can_chat:
            self.notify(base_model_notice(self.model), title="No chat with this model", severity="warning")
        return not self.can_chat
