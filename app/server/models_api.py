"""The models on this machine (GET /api/models), switching the engine to another one (POST /api/models/current), and
pulling one from the Hugging Face Hub (POST /api/models/pull, followed by GET). The choice is remembered: the next
`localchat serve` without --model loads it."""

import asyncio
import threading

import msgspec
from litestar import Controller, get, post
from litestar.di import NamedDependency
from litestar.exceptions import HTTPException, NotFoundException
from litestar.params import JSONBody

from localchat.app import paths
from localchat.app.model_pull import PullError, check_repo, pull_model
from localchat.app.protocol.models import ModelCatalog, ModelChoice, ModelInfo, ModelPull, PullRequest
from localchat.app.server.backends import Backend, BackendDep, BackendRequestError
from localchat.app.server.config import quoted
from localchat.app.server.conversations import Conversations
from localchat.engine.loading.dirs import write_atomically
from localchat.engine.loading.model_catalog import LocalModel, find_models, still_present


class ModelPulls:
    """The pull of a GGUF file the UIs started (one at a time), in a thread of its own that the process does not wait
    for at its end (its partial file stays, and a pull run again goes on from it); `latest` as far as it got."""

    def __init__(self):
        self.latest: ModelPull | None = None
        self.running = False

    def start(self, request: PullRequest) -> ModelPull:
        if self.running:
            raise HTTPException(status_code=409, detail=f"{self.latest.repo} is being pulled: one pull at a time")
        try:
            check_repo(request.repo)
        except PullError as error:
            raise BackendRequestError(str(error)) from None
        self.latest, self.running = ModelPull(repo=request.repo, file=request.file), True
        threading.Thread(target=self._pull, args=(request,), name="localchat-pull", daemon=True).start()
        return self.latest

    def _pull(self, request: PullRequest) -> None:
        def follow(state: ModelPull) -> None:
            self.latest = state

        try:
            pull_model(request.repo, request.file, follow)
        except PullError as error:
            self.latest = msgspec.structs.replace(self.latest, state="failed", error=str(error))
        finally:
            self.running = False


class ModelsController(Controller):
    path = "/api/models"

    @get("/")
    async def catalog(self, backend: BackendDep) -> ModelCatalog:
        """Every model `localchat models` lists; the one the engine runs is `current`."""
        if not backend.can_switch_models:
            return ModelCatalog(models=[], current=backend.model_name, switchable=False)
        return _catalog(await asyncio.to_thread(find_models), backend.model_choice)

    @post("/current", status_code=202)
    async def switch(self, data: JSONBody[ModelChoice], backend: BackendDep,
                     conversations: NamedDependency[Conversations]) -> ModelCatalog:
        """Stop the running replies (each keeps its text, marked stopped), unload the model and start loading
        `model`; /health shows the progress. 404 for a name GET lists not, 400 for an unsupported one."""
        backend.check_switch()
        models = await asyncio.to_thread(find_models)
        chosen = next((m for m in models if m.name == data.model), None)
        if chosen is None:
            raise NotFoundException(f"no model named {quoted(data.model)} on this machine (GET /api/models lists them)")
        if not (chosen.name == backend.model_choice and backend.loading.ready):
            await switch_model(backend, conversations, chosen)
        return _catalog(models, chosen.name)

    @post("/pull", status_code=202)
    async def pull(self, data: JSONBody[PullRequest], backend: BackendDep,
                   pulls: NamedDependency[ModelPulls]) -> ModelPull:
        """Start pulling a GGUF file from the Hugging Face Hub into its cache (as `localchat pull` does; one pull at a
        time, 409 while one runs); GET /api/models/pull follows it, and once it is done GET /api/models lists the
        model. A pull of a file partly pulled before goes on from there; a file that does not match its checksum is
        deleted (failed)."""
        if not backend.can_switch_models:
            raise BackendRequestError("the engine relays to another server, which runs its own models")
        return pulls.start(data)

    @get("/pull")
    async def pulled(self, pulls: NamedDependency[ModelPulls]) -> ModelPull:
        """The last pull started, as far as it got: downloading (bytes_done of bytes_total), checking, done (model:
        its name in GET /api/models) or failed (error: why, and what to do). 404 before any."""
        if pulls.latest is None:
            raise NotFoundException("no model has been pulled since the engine started")
        return pulls.latest


async def switch_model(backend: Backend, conversations: Conversations, chosen: LocalModel) -> None:
    """Stop the running replies (each keeps its text, marked stopped), unload the model, start loading `chosen` and
    remember it; a BackendRequestError for a model localchat does not run."""
    if not chosen.supported:
        raise BackendRequestError(f"{chosen.name} has architecture {chosen.architecture or 'unknown'}, "
                                  "which localchat does not run")
    await conversations.stop_all(wait=True)
    await backend.switch(chosen.name)
    await asyncio.to_thread(write_atomically, paths.chosen_model_path(), lambda tmp: tmp.write_text(chosen.name + "\n"))


def _catalog(models: list[LocalModel], current: str) -> ModelCatalog:
    return ModelCatalog(models=[_info(m, current) for m in models], current=current, switchable=True)


def _info(model: LocalModel, current: str) -> ModelInfo:
    return ModelInfo(name=model.name, served_name=model.served_name, source=model.source, format=model.format,
                     architecture=model.architecture, quantization=model.quantization, size_bytes=model.size_bytes,
                     memory_bytes=model.memory_bytes, supported=model.supported, current=model.name == current)


def remembered_model() -> str | None:
    """The model last chosen in a UI, if it is still on this machine (else the default model loads). At start-up:
    it checks the file system only, reading no model's header."""
    try:
        name = paths.chosen_model_path().read_text().strip()
    except OSError:
        return None
    return name if name and still_present(name) else None
