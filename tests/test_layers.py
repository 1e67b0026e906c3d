"""The import structure, read from the source (AST): which part imports which.

    engine  <-  app.server  <-  app.cli  ->  app.client  <-  tui
                    |                           |
                    +--> app (shared) <---------+        webui: mounted by app.server, imports nothing of ours

No cycle between the parts; tui/ and webui/ import no server or engine module; engine/ imports nothing above it.
Run it with -s to see the table."""

import ast
from pathlib import Path

ROOT = Path(__file__).parent.parent
SHARED = ("localchat.app.protocol", "localchat.app.markdown", "localchat.app.paths", "localchat.app.engine_state",
          "localchat.app.sse", "localchat.app.chat_defaults", "localchat.app.sampling_defaults",
          "localchat.app.kv_cache_words", "localchat.app.model_pull")


def part(module: str) -> str | None:
    """The part of the code base a localchat module belongs to."""
    if module.startswith("localchat.app.server"):
        return "app.server"
    if module.startswith("localchat.app.client"):
        return "app.client"
    if module == "localchat.app.cli":
        return "app.cli"
    if module.startswith(SHARED) or module == "localchat.app":
        return "app (shared)"
    for name in ("engine", "tui", "webui"):
        if module == f"localchat.{name}" or module.startswith(f"localchat.{name}."):
            return name
    return None


def module_name(path: Path) -> str:
    folder, *rest = path.relative_to(ROOT).with_suffix("").parts
    return ".".join(["localchat", folder, *rest]).removesuffix(".__init__")


def imports(path: Path) -> set[str]:
    """Every localchat module the file imports, at the top or inside a function."""
    found = set()
    for node in ast.walk(ast.parse(path.read_text())):
        if isinstance(node, ast.Import):
            found.update(alias.name for alias in node.names)
        elif isinstance(node, ast.ImportFrom) and node.module:
            base = node.module
            if node.level:  # relative: from .x import y
                base = ".".join(module_name(path).split(".")[: -node.level] + [node.module])
            found.add(base)
    return {m for m in found if m.startswith("localchat")}


def import_graph() -> dict[str, set[str]]:
    graph: dict[str, set[str]] = {}
    for folder in ("engine", "app", "tui", "webui"):
        for path in (ROOT / folder).rglob("*.py"):
            source = part(module_name(path))
            assert source is not None, f"{module_name(path)} belongs to no part: name it in part() (SHARED or another)"
            graph.setdefault(source, set())
            for target in map(part, imports(path)):
                if target and target != source:
                    graph[source].add(target)
    return graph


def test_the_parts_import_each_other_without_a_cycle():
    graph = import_graph()
    print("\n| part | imports |\n|---|---|")
    for source in sorted(graph):
        print(f"| {source} | {', '.join(sorted(graph[source])) or '-'} |")
    assert graph["engine"] == set(), "engine/ imports nothing above it"
    assert graph["tui"] <= {"app.client", "app (shared)"}, "tui/ talks to the engine only through the client"
    assert graph["webui"] == set(), "webui/ imports no server or engine module"
    assert "app.server" not in graph["app.client"] and "app.client" not in graph["app.server"]

    def reaches(start: str, goal: str, seen: frozenset = frozenset()) -> bool:
        return any(n == goal or (n not in seen and reaches(n, goal, seen | {n})) for n in graph.get(start, ()))

    cycles = [p for p in graph if reaches(p, p)]
    assert cycles == [], f"import cycles through {cycles}"


ROOMS = ("core", "worker", "loading", "frontend")
# the engine's shared vocabulary, beside its four rooms: what it is asked to be, what it reports, how a request samples
ENGINE_SHARED = {"localchat.engine", "localchat.engine.config", "localchat.engine.stats", "localchat.engine.memory",
                 "localchat.engine.sampling_params", "localchat.engine.sampling_limits"}


def room(module: str) -> str | None:
    """The engine room a module is in (core, worker, loading, frontend), or None for the shared vocabulary."""
    parts = module.split(".")
    return parts[2] if len(parts) > 2 and parts[2] in ROOMS else None


def test_the_engine_is_four_rooms_and_core_decides_without_the_worker():
    rooms: dict[str, set[str]] = {name: set() for name in ROOMS}
    for path in (ROOT / "engine").rglob("*.py"):
        source = module_name(path)
        if room(source) is None:
            assert source in ENGINE_SHARED, f"{source} is in no room of the engine (core, worker, loading, frontend)"
            continue
        rooms[room(source)] |= {room(target) for target in imports(path)} - {room(source), None}
    print("\n| room | imports |\n|---|---|")
    for name in ROOMS:
        print(f"| {name} | {', '.join(sorted(rooms[name])) or '-'} |")
    assert "worker" not in rooms["core"], "core/ decides what runs; it imports nothing of worker/"
    assert rooms["loading"] <= {"worker"}, "loading/ reads files into the worker's forms, nothing else"
