"""Switch the engine's model: the models `localchat models` finds, then the new one's loading progress; or download
one from the Hugging Face Hub first (REPO [FILE], as `localchat pull` takes them), its progress shown, after which
the list has it."""

import asyncio

from textual.app import ComposeResult
from textual.binding import Binding
from textual.containers import Vertical
from textual.content import Content
from textual.screen import ModalScreen
from textual.widgets import Input, Label, OptionList, ProgressBar
from textual.widgets.option_list import Option

from localchat.app.client.engine_client import EngineClient, EngineError
from localchat.app.protocol.models import ModelCatalog, ModelInfo, ModelPull
from localchat.app.protocol.system import Health
from localchat.tui.engine_work import engine_work
from localchat.tui.widgets.load_progress import LoadProgress

POLL_S = 0.25  # how often the switcher asks the engine how its loading goes
MIN_ROWS_FOR_INFO = 22  # a terminal with fewer rows shows the list and the pull without the running model's info


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


def pull_words(pull: ModelPull) -> str:
    """"Downloading tiny.Q4_K_M.gguf: 1.2 of 3.0 MB", and where it stands after."""
    name = pull.file or pull.repo
    if pull.state == "failed":
        return f"Could not pull {pull.repo}: {pull.error}"
    if pull.state == "done":
        return f"{name} is here: Enter on it in the list loads it"
    if pull.state == "checking":
        return f"Checking {name} against its checksum…"
    if pull.state == "starting":
        return f"Asking the Hub for {pull.repo}…"
    of = f" of {pull.bytes_total / 1e6:,.1f}" if pull.bytes_total else ""
    again = f" (on from {pull.resumed_from / 1e6:,.1f} MB an earlier pull left)" if pull.resumed_from else ""
    return f"Downloading {name}: {pull.bytes_done / 1e6:,.1f}{of} MB{again}"


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
            yield Label("Enter loads one (replies being written stop); a chat goes on with it, its messages tokenized "
                        "again.", id="models-note")
            yield LoadProgress("", id="model-progress")
            yield Input(placeholder="get one from Hugging Face: OWNER/NAME [FILE.gguf]", id="model-pull", compact=True)
            yield Label("", id="pull-status", markup=False)
            yield ProgressBar(show_eta=False, id="pull-progress")

    def on_mount(self) -> None:
        self.query_one("#model-progress").display = False
        self.query_one("#pull-progress").display = False
        self.follow_pull()
        options = self.query_one(OptionList)
        options.highlighted = next((i for i, m in enumerate(self.catalog.models) if m.current), 0)
        self.show_running_model()

    @engine_work(group="model-info")
    async def show_running_model(self) -> None:
        self.query_one("#model-info", Label).update(running_model_info(await self.client.health()))
        self.fit_info()

    def on_resize(self) -> None:
        self.fit_info()

    def fit_info(self) -> None:
        """The running model's info, where the terminal has the rows for it beside the list and the pull (at 20
        rows it would push the pull's status out of sight)."""
        info = self.query_one("#model-info", Label)
        info.display = bool(str(info.render())) and self.app.size.height > MIN_ROWS_FOR_INFO

    def action_close(self) -> None:
        if not self.loading:  # a model half loaded is no state to leave in: the dialog waits for it
            self.dismiss(None)

    def on_option_list_option_selected(self, event: OptionList.OptionSelected) -> None:
        if not self.loading and event.option.id != self.catalog.current:
            self.switch(event.option.id)

    def on_input_submitted(self, event: Input.Submitted) -> None:
        """REPO [FILE]: pulled from the Hub (the text stays until the model is here)."""
        words = event.value.split()
        if not 1 <= len(words) <= 2:
            self.query_one("#pull-status", Label).update("Type a repo of GGUF files, and one of its files if it has "
                                                         "several: OWNER/NAME [FILE.gguf]")
            return
        self.pull(*words)

    @engine_work(group="pull", exclusive=True)
    async def pull(self, repo: str, file: str | None = None) -> None:
        status = self.query_one("#pull-status", Label)
        status.set_class(False, "-error")
        try:
            pulled = await self.client.pull_model(repo, file)
        except EngineError as error:
            status.set_class(True, "-error")
            status.update(f"Could not pull {repo}: {error}")
            return
        await self.show_pull(pulled)

    @engine_work(group="pull", exclusive=True)
    async def follow_pull(self) -> None:
        """A pull under way when the dialog opens (started before it closed, or by another client), followed."""
        try:
            pulled = await self.client.model_pull()
        except EngineError:  # none since the engine started
            return
        if pulled.state not in ("done", "failed"):
            await self.show_pull(pulled)

    async def show_pull(self, pulled: ModelPull) -> None:
        """The pull's progress until it ends; then the list with the model it brought, highlighted."""
        status, bar = self.query_one("#pull-status", Label), self.query_one("#pull-progress", ProgressBar)
        bar.display = True
        while pulled.state not in ("done", "failed"):
            status.update(pull_words(pulled))
            bar.update(total=pulled.bytes_total, progress=pulled.bytes_done)
            await asyncio.sleep(POLL_S)
            pulled = await self.client.model_pull()
        bar.display = False
        status.set_class(pulled.state == "failed", "-error")
        status.update(pull_words(pulled))
        if pulled.state == "done":
            self.query_one("#model-pull", Input).clear()
            await self.show_models(pulled.model)

    async def show_models(self, highlighted: str | None) -> None:
        """The models again (a pulled one among them), the one named highlighted."""
        self.catalog = await self.client.models()
        options = self.query_one(OptionList)
        options.clear_options()
        options.add_options([Option(model_label(m), id=m.name, disabled=not m.supported) for m in self.catalog.models])
        options.highlighted = next((i for i, m in enumerate(self.catalog.models) if m.name == highlighted), 0)
        options.focus()

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
