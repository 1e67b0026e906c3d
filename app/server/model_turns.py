"""The model for the requests that name one (Ollama's API), and how long it stays loaded after them.

A request for the model the engine runs goes at once. One for another model of this machine's waits until the
requests that named the current one have ended, then switches as the models API does (a conversation's running reply
is stopped and kept): requests for two models are served in turn, in the order they came, never side by side.

keep_alive (Ollama's): after a request, the model stays loaded that long while nothing runs, then is unloaded; 0
unloads it as soon as nothing runs, a negative value or none keeps it loaded (localchat's way: its UIs expect the
model resident). The next request loads it again; /health says "unloaded", then "loading"."""

import asyncio
import time
from collections.abc import Callable
from dataclasses import dataclass

from localchat.app.server.active_requests import ActiveRequests
from localchat.app.server.backends import Backend
from localchat.app.server.conversations import Conversations
from localchat.app.server.models_api import switch_model
from localchat.engine.loading.model_catalog import LocalModel

IDLE_POLL_S = 0.05


@dataclass
class Turn:
    """A request's hold on the model: `load_s`, how long it waited for the model to (switch and) load."""

    load_s: float


class ModelTurns:
    def __init__(self, backend: Backend, conversations: Conversations, active: ActiveRequests,
                 clock: Callable[[], float] = time.monotonic):
        self.backend, self.conversations, self.active, self.clock = backend, conversations, active, clock
        self.changed = asyncio.Condition()
        self.users = 0  # requests holding a turn
        self.waiting: list[tuple[object, str]] = []  # (ticket, model name), in the order they came
        self.switching = False
        self.unload_at: float | None = None  # the clock's time after which the model is unloaded once idle
        self.unloader: asyncio.Task | None = None

    async def enter(self, model: LocalModel) -> Turn:
        """Wait for `model`'s turn, switch to it if need be and wait until it is loaded; leave() ends the turn."""
        started = self.clock()
        ticket = (object(), model.name)
        async with self.changed:
            self.waiting.append(ticket)
            try:
                await self.changed.wait_for(lambda: self._may_enter(ticket))
            finally:
                self.waiting.remove(ticket)
                self.changed.notify_all()
            self.users += 1
            switching = self.switching = model.name != self.backend.model_choice
        try:
            if switching:
                await switch_model(self.backend, self.conversations, model)
            await self.backend.loaded()
        except BaseException:
            await self.leave(None)
            raise
        finally:
            if switching:
                async with self.changed:
                    self.switching = False
                    self.changed.notify_all()
        return Turn(self.clock() - started)

    def _may_enter(self, ticket: tuple[object, str]) -> bool:
        if self.switching:
            return False
        current = self.backend.model_choice
        ahead = self.waiting[:self.waiting.index(ticket)]
        if ticket[1] == current:
            return all(name == current for _, name in ahead)  # not past a request waiting to switch
        return self.users == 0 and not ahead

    async def leave(self, keep_alive_s: float | None) -> None:
        """End a turn; keep_alive_s: how long the model stays loaded once nothing runs (None or negative: until
        another request says otherwise, 0: unloaded as soon as nothing runs)."""
        async with self.changed:
            self.users -= 1
            self.changed.notify_all()
        await self.keep(keep_alive_s)

    async def keep(self, keep_alive_s: float | None) -> None:
        """Keep the model loaded keep_alive_s once nothing runs (None or negative: until told otherwise)."""
        self.unload_at = None if keep_alive_s is None or keep_alive_s < 0 else self.clock() + keep_alive_s
        if self.unload_at is not None and (self.unloader is None or self.unloader.done()):
            self.unloader = asyncio.get_running_loop().create_task(self._unload_when_idle())

    async def _unload_when_idle(self) -> None:
        while self.unload_at is not None:
            wait = self.unload_at - self.clock()
            idle = self.users == 0 and not self.waiting and not self.active.requests
            if wait <= 0 and idle and self.backend.loading.ready:
                self.unload_at = None
                await self.backend.unload()
                return
            await asyncio.sleep(max(wait, IDLE_POLL_S))
