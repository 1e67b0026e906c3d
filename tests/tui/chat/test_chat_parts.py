"""The chat screen's seams, read from the source (AST), in the spirit of tests/test_layers.py: the screen composes and
routes; its parts (tui/chat/) are given a ChatHost and never the screen, ask other parts only through the Protocols
they are given, tell them things with typed messages, and change a chat only through ChatSession's methods."""

import ast
import inspect
from pathlib import Path

from localchat.tui.chat.host import ChatHost
from localchat.tui.chat_session import ChatSession

ROOT = Path(__file__).parents[3]
PARTS = sorted((ROOT / "tui" / "chat").glob("*.py"))
SCREEN = ROOT / "tui" / "screens" / "chat.py"
SHARED = {"localchat.tui.chat.host", "localchat.tui.chat.keys", "localchat.tui.chat.news"}  # what parts share


def tree_of(path: Path) -> ast.Module:
    return ast.parse(path.read_text())


def imported(path: Path) -> set[str]:
    """The modules the file imports, at the top or inside a function."""
    found = set()
    for node in ast.walk(tree_of(path)):
        if isinstance(node, ast.Import):
            found |= {alias.name for alias in node.names}
        elif isinstance(node, ast.ImportFrom) and node.module:
            found.add(node.module)
    return found


def dotted(node: ast.expr) -> str:
    """"self.host.session" for the expression self.host.session; "" for anything else."""
    if isinstance(node, ast.Name):
        return node.id
    if isinstance(node, ast.Attribute) and (base := dotted(node.value)):
        return f"{base}.{node.attr}"
    return ""


def test_the_parts_are_in_tui_chat():
    names = {path.stem for path in PARTS} - {"__init__"}
    assert {"reply_writer", "branch_navigation", "chat_documents", "chat_export", "long_chats", "message_actions",
            "model_control", "settings_control", "chat_record"} <= names
    assert not names & {path.stem for path in (ROOT / "tui" / "screens").glob("*.py")}, "a part left in screens/"


def test_no_part_imports_the_screen_or_another_part():
    for path in PARTS:
        ours = {m for m in imported(path) if m.startswith("localchat.tui.chat.") or m == "localchat.tui.screens.chat"}
        assert ours <= SHARED, f"{path.name} imports {sorted(ours - SHARED)}: a part asks another through a Protocol"


def test_no_part_reaches_up_to_the_screen():
    """A part uses what it was given (its host, its widgets, its peers as Protocols), not self.screen."""
    for path in PARTS:
        reached = [node.lineno for node in ast.walk(tree_of(path)) if dotted(node).startswith("self.screen")]
        assert not reached, f"{path.name}:{reached} reaches self.screen"


def host_members() -> set[str]:
    methods = {name for name, _ in inspect.getmembers(ChatHost, inspect.isfunction) if not name.startswith("_")}
    return set(ChatHost.__annotations__) | methods


def test_the_parts_use_only_what_the_host_offers():
    members = host_members()
    assert members == {"session", "composer", "view", "focused", "show_branch", "open_chat", "stored_chat"}
    for path in PARTS:
        used = {dotted(node).split(".")[-1] for node in ast.walk(tree_of(path)) if isinstance(node, ast.Attribute)
                and dotted(node.value) in ("self.host", "host")}
        assert used <= members, f"{path.name} uses {sorted(used - members)} of the screen beyond ChatHost"


def test_the_screen_is_a_chat_host():
    """Every member of ChatHost is one of ChatScreen's (its own method, or an attribute its __init__ sets; focused
    is Textual's)."""
    screen = next(node for node in ast.walk(tree_of(SCREEN)) if isinstance(node, ast.ClassDef)
                  and node.name == "ChatScreen")
    methods = {node.name for node in screen.body if isinstance(node, ast.FunctionDef | ast.AsyncFunctionDef)}
    init = next(node for node in screen.body if isinstance(node, ast.FunctionDef) and node.name == "__init__")
    attributes = {target.attr for node in ast.walk(init) if isinstance(node, ast.Assign) for target in node.targets
                  if isinstance(target, ast.Attribute) and dotted(target.value) == "self"}
    assert host_members() - {"focused"} <= methods | attributes


def test_the_screen_composes_and_routes():
    """Its methods: composing, rendering the open chat, opening one, and one route per key or typed message; the
    work is the parts'. 74 before issue 55."""
    screen = next(node for node in ast.walk(tree_of(SCREEN)) if isinstance(node, ast.ClassDef)
                  and node.name == "ChatScreen")
    methods = [node.name for node in screen.body if isinstance(node, ast.FunctionDef | ast.AsyncFunctionDef)]
    print(f"\nChatScreen: {len(methods)} methods")
    assert len(methods) < 40, methods


SESSION_FIELDS = set(vars(ChatSession()))


def test_only_chat_session_writes_its_fields():
    """Nothing in tui/ assigns a field of a ChatSession (session.conversation = ...): it calls the session's methods,
    so that the session is the one writer of the open chat, its tree, the branch shown."""
    writes = []
    for path in (ROOT / "tui").rglob("*.py"):
        if path.name == "chat_session.py":
            continue
        for node in ast.walk(tree_of(path)):
            targets = node.targets if isinstance(node, ast.Assign) else [node.target] if isinstance(
                node, ast.AugAssign | ast.AnnAssign) else []
            writes += [f"{path.name}:{node.lineno} {dotted(target)}" for target in targets
                       if isinstance(target, ast.Attribute) and target.attr in SESSION_FIELDS
                       and dotted(target.value).split(".")[-1] == "session"]
    assert writes == []


def test_parts_write_only_their_own_state():
    """A part assigns attributes of itself alone (self.x = ...), and the message box's text, which it puts back where
    the engine refused a send; what another part must learn goes as a message (news.py)."""
    for path in PARTS:
        for node in ast.walk(tree_of(path)):
            targets = node.targets if isinstance(node, ast.Assign) else [node.target] if isinstance(
                node, ast.AugAssign | ast.AnnAssign) else []
            for target in targets:
                if isinstance(target, ast.Tuple):
                    elements = target.elts
                else:
                    elements = [target]
                for element in elements:
                    if isinstance(element, ast.Attribute):
                        owner = dotted(element.value)
                        assert owner == "self" or (owner == "composer" and element.attr == "text"), \
                            f"{path.name}:{node.lineno} writes {dotted(element)}"
