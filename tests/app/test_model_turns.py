"""Without a model: Ollama's names for this machine's models, keep_alive's durations, and the turns of requests that
name models (model_turns.py): requests for the current model run side by side, one for another model waits for them
and switches, later ones queue behind it in order, and keep_alive unloads once nothing runs."""

import asyncio
from pathlib import Path

import pytest

from localchat.app.server.active_requests import ActiveRequests
from localchat.app.server.backends import Loading
from localchat.app.server.model_turns import ModelTurns
from localchat.app.server.ollama_models import _parameter_size, find_model, keep_alive_seconds, ollama_name
from localchat.engine.loading.model_catalog import LocalModel


def model(name: str, source: str = "folder", path: str | None = None) -> LocalModel:
    return LocalModel(name, source, "gguf", "llama", 1, Path(path or f"/models/{name}.gguf"))


def test_a_model_is_named_as_it_is_served_with_the_tag_latest():
    embedded = model("SmolLM2-135M-Instruct", "embedded", "/site/SmolLM2-135M-Instruct.Q4_1.gguf")
    gguf = model("/models/llama-1b-q4km.gguf", path="/models/llama-1b-q4km.gguf")
    models = [embedded, gguf]
    assert ollama_name(embedded) == "SmolLM2-135M-Instruct:latest" and ollama_name(gguf) == "llama-1b-q4km:latest"
    for name in ("SmolLM2-135M-Instruct", "smollm2-135m-instruct:latest", " SmolLM2-135M-Instruct:LATEST"):
        assert find_model(models, name) is embedded, name
    assert find_model(models, "llama-1b-q4km") is gguf and find_model(models, "/models/llama-1b-q4km.gguf") is gguf
    assert find_model(models, "llama-1b-q4km:q8_0") is None and find_model(models, "llama3.2") is None


def test_keep_alive_is_seconds_or_a_duration():
    assert keep_alive_seconds(None) is None and keep_alive_seconds(0) == 0 and keep_alive_seconds(-1) == -1
    assert keep_alive_seconds("5m") == 300 and keep_alive_seconds("1h30m") == 5400
    assert keep_alive_seconds("1.5s") == 1.5 and keep_alive_seconds("-1m") == -60 and keep_alive_seconds("3600") == 3600
    for bad in ("forever", "5 minutes", "m", ""):
        with pytest.raises(ValueError, match="keep_alive"):
            keep_alive_seconds(bad)


def test_parameter_sizes_read_as_ollamas():
    assert [_parameter_size(n) for n in (134_515_008, 1_073_809_408, 3_200_000, None)] == \
        ["134.5M", "1.1B", "3.2M", "unknown"]


class FakeBackend:
    """Switches and unloads at once; records what it did."""

    def __init__(self, current: str):
        self.model_choice, self.loading, self.unloaded, self.error, self.stopping = current, Loading(ready=True), \
            False, None, False
        self.events: list[str] = []

    async def switch(self, name: str) -> None:
        self.events.append(f"switch {name}")
        self.model_choice = name
        await asyncio.sleep(0.01)

    async def unload(self) -> None:
        self.events.append("unload")
        self.unloaded, self.loading = True, Loading(stage="unloaded")

    def reload(self) -> None:
        if self.unloaded:
            self.events.append("reload")
            self.unloaded, self.loading = False, Loading(ready=True)

    async def loaded(self) -> None:
        self.reload()


class FakeConversations:
    async def stop_all(self, wait: bool = False) -> None:
        pass


@pytest.fixture
def turns(monkeypatch):
    monkeypatch.setattr("localchat.app.server.models_api.paths.chosen_model_path",
                        lambda: Path("/dev/null"))  # switch_model remembers the choice: nowhere here
    monkeypatch.setattr("localchat.app.server.models_api.write_atomically", lambda path, write: None)
    return ModelTurns(FakeBackend("a"), FakeConversations(), ActiveRequests())


async def run(turns: ModelTurns, name: str, log: list[str], release: asyncio.Event | None = None,
              keep_alive: float | None = None) -> None:
    """A request for model `name`: it holds its turn until `release` is set (none: it leaves at once)."""
    await turns.enter(model(name))
    log.append(f"start {name}")
    if release is not None:
        await release.wait()
    log.append(f"end {name}")
    await turns.leave(keep_alive)


async def until(condition, what: str) -> None:
    """Wait for something the turns do on their own (a generous deadline: a fake backend acts at once)."""
    deadline = asyncio.get_running_loop().time() + 30
    while not condition():
        assert asyncio.get_running_loop().time() < deadline, f"timed out waiting for {what}"
        await asyncio.sleep(0.005)


@pytest.mark.asyncio
async def test_requests_for_two_models_are_served_in_turn_in_the_order_they_came(turns):
    log: list[str] = []
    releases = [asyncio.Event() for _ in range(5)]
    tasks = []
    for name, release in zip("aabab", releases):
        tasks.append(asyncio.create_task(run(turns, name, log, release)))
        await asyncio.sleep(0)  # each one asks for its turn before the next comes
    await until(lambda: log == ["start a", "start a"], "the two a's side by side")
    for i, started in ((0, 2), (1, 2), (2, 5), (3, 7), (4, 9)):  # each request in turn leaves once it ran
        await until(lambda started=started: len(log) >= started, f"request {i} started")
        releases[i].set()
    await asyncio.gather(*tasks)
    # the two a's run side by side; b waits for them; the a after b waits for b (no overtaking), then b's last
    assert log[:4] == ["start a", "start a", "end a", "end a"]
    assert log[4:] == ["start b", "end b", "start a", "end a", "start b", "end b"]
    assert turns.backend.events == ["switch b", "switch a", "switch b"] and turns.users == 0


@pytest.mark.asyncio
async def test_keep_alive_unloads_once_nothing_runs_and_the_next_request_loads_again(turns):
    log: list[str] = []
    await run(turns, "a", log, keep_alive=0.05)
    assert turns.backend.events == []  # not yet: its keep_alive runs
    await until(lambda: turns.backend.events == ["unload"], "the unload after keep_alive")
    assert turns.unload_at is None
    await run(turns, "a", log)  # loads again; no keep_alive: loaded for good
    await until(lambda: turns.backend.events == ["unload", "reload"], "the load again")
    assert not turns.backend.unloaded

    turns.active.add("running")  # a request of another API still runs: keep_alive 0 waits for it
    await run(turns, "a", log, keep_alive=0)
    await asyncio.sleep(0.1)  # a window in which nothing may happen
    assert turns.backend.events == ["unload", "reload"]
    turns.active.remove("running")
    await until(lambda: turns.backend.events == ["unload", "reload", "unload"], "the unload once nothing runs")
