"""The engine's seams, read from the source (AST): the step reads as its phases, and the block pool's state has one
owner (engine/core/block_pool.py): others ask it by method."""

import ast
from pathlib import Path

ROOT = Path(__file__).parent.parent.parent
POOL_MODULE = ROOT / "engine" / "core" / "block_pool.py"
MAX_STEP_STATEMENTS = 10
LOOPS = (ast.For, ast.AsyncFor, ast.While, ast.ListComp, ast.SetComp, ast.DictComp, ast.GeneratorExp)


def function(path: Path, class_name: str, name: str) -> ast.FunctionDef:
    tree = ast.parse(path.read_text())
    owner = next(n for n in tree.body if isinstance(n, ast.ClassDef) and n.name == class_name)
    return next(n for n in owner.body if isinstance(n, ast.FunctionDef) and n.name == name)


def statements(func: ast.FunctionDef) -> list[ast.stmt]:
    """Every statement in the function, nested ones included, its docstring left out."""
    body = func.body[1:] if ast.get_docstring(func) is not None else func.body
    return [node for stmt in body for node in ast.walk(stmt) if isinstance(node, ast.stmt)]


def test_the_step_reads_as_its_phases():
    step = function(ROOT / "engine" / "frontend" / "llm_engine.py", "LLMEngine", "step")
    found = statements(step)
    assert len(found) <= MAX_STEP_STATEMENTS, f"LLMEngine.step has {len(found)} statements"
    loops = [type(node).__name__ for node in ast.walk(step) if isinstance(node, LOOPS)]
    assert not loops, f"LLMEngine.step loops: {loops}"


def pool_api() -> tuple[set[str], set[str]]:
    """BlockPool's public methods, and its properties (answers computed on each read, never assigned)."""
    pool = next(n for n in ast.parse(POOL_MODULE.read_text()).body
                if isinstance(n, ast.ClassDef) and n.name == "BlockPool")
    methods, properties = set(), set()
    for node in pool.body:
        if isinstance(node, ast.FunctionDef) and not node.name.startswith("_"):
            is_property = any(isinstance(d, ast.Name) and d.id == "property" for d in node.decorator_list)
            (properties if is_property else methods).add(node.name)
    return methods, properties


def is_pool(node: ast.expr) -> bool:
    """`pool` or `<anything>.pool`: the block pool, as the other modules name it."""
    return (isinstance(node, ast.Name) and node.id == "pool") or (isinstance(node, ast.Attribute)
                                                                    and node.attr == "pool")


def pool_reaches(path: Path, methods: set[str], properties: set[str]) -> list[str]:
    """Where a module reads or writes the pool's fields: anything but calling a public method or reading a
    property."""
    tree = ast.parse(path.read_text())
    called = {id(node.func) for node in ast.walk(tree) if isinstance(node, ast.Call)}
    found = []
    for node in ast.walk(tree):
        if not (isinstance(node, ast.Attribute) and is_pool(node.value)):
            continue
        allowed = (node.attr in methods and id(node) in called) or (
            node.attr in properties and isinstance(node.ctx, ast.Load))
        if not allowed:
            found.append(f"{path.relative_to(ROOT)}:{node.lineno} pool.{node.attr}")
    return found


def test_only_the_block_pool_touches_its_fields():
    methods, properties = pool_api()
    modules = [p for folder in ("engine", "app", "benchmarks") for p in (ROOT / folder).rglob("*.py")
               if p != POOL_MODULE]
    found = [reach for path in modules for reach in pool_reaches(path, methods, properties)]
    assert not found, "outside engine/core/block_pool.py:\n" + "\n".join(found)


def test_no_block_object_leaves_the_pool():
    """Hits and answers carry block ids: no other module imports the pool's Block."""
    importers = [str(p.relative_to(ROOT)) for p in (ROOT / "engine").rglob("*.py") if p != POOL_MODULE
                 for node in ast.walk(ast.parse(p.read_text()))
                 if isinstance(node, ast.ImportFrom) and node.module == "localchat.engine.core.block_pool"
                 and any(alias.name == "Block" for alias in node.names)]
    assert not importers, f"Block imported by {importers}"


GRAMMAR_OWNERS = {ROOT / "engine" / "core" / "sequence.py", ROOT / "engine" / "frontend" / "structured_output.py"}
GRAMMAR_STATE = {"grammar", "matcher", "answer_matcher", "waits_for_answer"}


def test_a_replys_grammar_state_is_written_by_its_sequence_alone():
    """One owner for a reply's place in its grammar: Sequence's methods (its ReplyGrammar); the others read
    seq.matcher or call those methods."""
    found = []
    for path in (ROOT / "engine").rglob("*.py"):
        if path in GRAMMAR_OWNERS:
            continue
        for node in ast.walk(ast.parse(path.read_text())):
            targets = (node.targets if isinstance(node, ast.Assign)
                       else [node.target] if isinstance(node, ast.AugAssign | ast.AnnAssign) else [])
            written = [t for target in targets for t in ast.walk(target)
                       if isinstance(t, ast.Attribute) and t.attr in GRAMMAR_STATE and isinstance(t.ctx, ast.Store)]
            found += [f"{path.relative_to(ROOT)}:{node.lineno} .{t.attr}" for t in written]
    assert not found, "grammar state written outside engine/core/sequence.py:\n" + "\n".join(found)


# Who writes each field of a Sequence once it is made (engine/core/sequence.py's comment says the same): the scheduler
# its tokens, progress and life; the KV cache manager its blocks; the sequence itself its grammar. The rest are never
# written after construction.
SEQUENCE_WRITERS = {
    "token_ids": {"core/scheduler.py"}, "status": {"core/scheduler.py"},
    "num_computed_tokens": {"core/scheduler.py"}, "num_cached_tokens": {"core/scheduler.py"},
    "num_admissions": {"core/scheduler.py"}, "num_siblings_pending": {"core/scheduler.py"},
    "finish_reason": {"core/scheduler.py"},
    "block_table": {"core/kv_cache_manager.py"}, "block_hashes": {"core/kv_cache_manager.py"},
    "grammar": {"core/sequence.py"},
    "request_id": set(), "index": set(), "num_prompt_tokens": set(), "params": set(), "seed": set(),
    "seq_id": set(), "max_tokens": set(),
}
MUTATORS = {"append", "extend", "insert", "pop", "remove", "clear", "sort", "reverse", "__setitem__", "__delitem__"}


def sequence_writes(path: Path) -> list[tuple[str, int]]:
    """(field, line) of every write to a Sequence field in a module: an assignment to `x.field` or `x.field[...]`, a
    `del`, or a mutating call (`x.field.append(...)`). Not counted: `self.field` in a class of the module other than
    Sequence, and any field of the same name that a class of the module declares (its own: Block.token_ids in
    block_pool.py, CompletionOutput.finish_reason in outputs.py)."""
    tree = ast.parse(path.read_text())
    classes = [node for node in ast.walk(tree) if isinstance(node, ast.ClassDef) and node.name != "Sequence"]
    own = {id(node) for cls in classes for node in ast.walk(cls)
           if isinstance(node, ast.Attribute) and isinstance(node.value, ast.Name) and node.value.id == "self"}
    declared = {node.target.id for cls in classes for node in cls.body
                if isinstance(node, ast.AnnAssign) and isinstance(node.target, ast.Name)}

    def field_of(node: ast.expr) -> ast.Attribute | None:
        while isinstance(node, ast.Subscript):
            node = node.value
        return node if (isinstance(node, ast.Attribute) and node.attr in SEQUENCE_WRITERS and id(node) not in own
                        and node.attr not in declared) else None

    found = []
    for node in ast.walk(tree):
        targets = (node.targets if isinstance(node, ast.Assign | ast.Delete)
                   else [node.target] if isinstance(node, ast.AugAssign | ast.AnnAssign) else [])
        if isinstance(node, ast.Call) and isinstance(node.func, ast.Attribute) and node.func.attr in MUTATORS:
            targets = [node.func.value]
        for target in targets:
            for element in (target.elts if isinstance(target, ast.Tuple) else [target]):
                if (written := field_of(element)) is not None:
                    found.append((written.attr, node.lineno))
    return found


def test_each_sequence_field_has_one_writer():
    """A reader can name the writer of every Sequence field from SEQUENCE_WRITERS; any other writer fails here."""
    fields = {node.target.id for node in next(n for n in ast.parse((ROOT / "engine/core/sequence.py").read_text()).body
                                              if isinstance(n, ast.ClassDef) and n.name == "Sequence").body
              if isinstance(node, ast.AnnAssign)}
    assert fields == set(SEQUENCE_WRITERS), "name the writer of every Sequence field in SEQUENCE_WRITERS"
    found = [f"engine/{path.relative_to(ROOT / 'engine')}:{line} .{name}"
             for path in (ROOT / "engine").rglob("*.py")
             for name, line in sequence_writes(path)
             if str(path.relative_to(ROOT / "engine")) not in SEQUENCE_WRITERS[name]]
    assert not found, "Sequence fields written outside their writer:\n" + "\n".join(found)
    scheduler_writes = {name for name, _ in sequence_writes(ROOT / "engine/core/scheduler.py")}
    assert {"token_ids", "status", "num_computed_tokens"} <= scheduler_writes, "the check finds the real writes"
