"""Switch the engine's model: the models `localchat models` finds, then the new one's loading progress."""

import asyncio

from textual.app import ComposeResult
from textual.binding import Binding
from textual.containers import Vertical
from textual.content import Content
from textual.screen import ModalScreen
from textual.widgets import Label, OptionList
from textual.widgets.option_list import Option

from localchat.app.client.engine_client import EngineClient
from localchat.app.protocol.models import ModelCatalog, ModelInfo
from localchat.app.protocol.system import Health
from localchat.tui.engine_work import engine_work
from localchat.tui.widgets.load_progress import LoadProgress

POLL_S = 0.25  # how often the switcher asks the engine how its loading goes


def running_model_info(health: Health) -> str:
    """What the running model samples with where a chat sets nothing, and what its KV cache holds, as the engine
    says them (/health)."""
    lines = []
    if health.sampling is not None:
        s = health.sampling
        lines.append(f"Samples at temperature {s.temperature:g}, top_p {s.top_p:g}, top_k {s.top_k}, min_p "
                     f"{s.min_p:g} ({s.source}); a fork at {s.fork_temperature:g} at least")
    if health.kv_cache is not None:
        lines.append(f"KV cache: {health.kv_cache.summary}")
    return "\n".join(lines)


def model_label(model: ModelInfo) -> Content:
    about = " · ".join(part for part in (model.architecture or "unknown architecture",
                                         model.quantization or model.format,
                                         f"{model.memory_bytes / 1e9:.2f} GB" if model.memory_bytes else None,
                                         model.source, None if model.supported else "not supported") if part)
    return Content.assemble(("● " if model.current else "  ", "bold"), (model.name, "bold" if model.current else ""),
                            "\n    ", (about, "dim"))


class ModelsScreen(ModalScreen[Health | None]):
    """Pick a model; the engine unloads the current one and loads it. Dismissed with the engine's health once the
    new model is ready (or failed), None if nothing was switched."""

    BINDINGS = [Binding("escape", "close", "Close", id="cancel")]

    def __init__(self, client: EngineClient, catalog: ModelCatalog):
        super().__init__()
        self.client, self.catalog = client, catalog
        self.loading = False

    def compose(self) -> ComposeResult:
        with Vertical(classes="dialog", id="models"):
            yield Label("Model", classes="dialog-title")
            yield Label("", id="model-info")
            yield OptionList(*(Option(model_label(m), id=m.name, disabled=not m.supported)
                               for m in self.catalog.models), id="model-list")
            yield Label("Enter loads the model: replies being written stop. Chats keep the model that wrote them; "
                        "continuing one with another model tokenizes its messages again.", id="models-note")
            yield LoadProgress("", id="model-progress")

    def on_mount(self) -> None:
        self.query_one("#model-progress").display = False
        options = self.query_one(OptionList)
        options.highlighted = next((i for i, m in enumerate(self.catalog.models) if m.current), 0)
        self.show_running_model()

    @engine_work(group="model-info")
    async def show_running_model(self) -> None:
        self.query_one("#model-info", Label).update(running_model_info(await self.client.health()))

    def action_close(self) -> None:
        if not self.loading:  # a model half loaded is no state to leave in: the dialog waits for it
            self.dismiss(None)

    def on_option_list_option_selected(self, event: OptionList.OptionSelected) -> None:
        if not self.loading and event.option.id != self.catalog.current:
            self.switch(event.option.id)

    @engine_work(exclusive=True)
    async def switch(self, name: str) -> None:
        self.loading = True
        self.query_one(OptionList).disabled = True
        progress = self.query_one(LoadProgress)
        progress.display = True
        try:
            await self.client.switch_model(name)
            while (health := await self.client.health()).status == "loading":
                progress.show(health)
                await asyncio.sleep(POLL_S)
        finally:
            self.loading = False
            self.query_one(OptionList).disabled = False
        self.dismiss(health)
