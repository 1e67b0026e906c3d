"""The `localchat` command: its help, `models`, `status`, and `chat` answered by a running engine or in-process."""

import pytest

from localchat.app.cli import WARM_CHATS_SHOWN, _kv_cache_line, _warm_chat_lines
from localchat.app.protocol.conversations import Conversation, SamplingSettings, Warmth
from localchat.app.protocol.system import PinBudget
from support import Server, make_home

pytestmark = pytest.mark.slow  # real `localchat` processes: left out of `./dev test --fast`

GREEDY = ("--temperature", "0", "--max-tokens", "12")
QUESTION = "Name one colour."


def test_help_lists_every_command_on_one_line(tmp_path):
    usage = Server(make_home(tmp_path)).run_cli("--help").stdout
    commands = usage.split("  COMMAND\n", 1)[1].split("\n\n")[0].splitlines()
    assert [line.split()[0] for line in commands] == ["tui", "serve", "web", "chat", "stop", "status", "token",
                                                      "logout", "models", "pull"]  # one line each: no wrapped help
    assert "the terminal UI (the default command)" in usage


def test_models_lists_the_embedded_model(tmp_path):
    result = Server(make_home(tmp_path)).run_cli("models")
    assert result.returncode == 0
    header, embedded = result.stdout.splitlines()[:2]
    assert header.split() == ["MODEL", "ARCHITECTURE", "WEIGHTS", "FILE", "MEMORY", "FOUND", "IN"]
    name, architecture, weights, file_mb, _, memory_mb, _, found_in = embedded.split()
    assert (name, architecture, weights, file_mb, found_in) == ("SmolLM2-135M-Instruct", "llama", "Q4_1", "98",
                                                                 "embedded")
    assert 0.8 * 98 < int(memory_mb) < 1.3 * 98  # held packed, not as a float copy (about 540 MB)


def test_status_reports_the_kv_cache_size(server):
    result = server.run_cli("status")
    assert result.returncode == 0, result.stderr
    metrics = server.metrics()
    size, blocks = metrics["localchat_kv_cache_bytes"] / 2**30, metrics["localchat_kv_blocks_total"]
    assert f"KV cache: {size:.2f} GiB in {blocks:.0f} blocks, " in result.stdout


def test_the_kv_cache_line_says_its_size_where_the_engine_reports_one():
    metrics = {"kv_blocks_total": 4096, "kv_blocks_used": 3, "kv_blocks_cached": 40}
    assert _kv_cache_line({**metrics, "kv_cache_bytes": 3 * 2**29}) == (
        "KV cache: 1.50 GiB in 4096 blocks, 3 in use, 40 cached; no disk tier")
    assert _kv_cache_line(metrics) == "KV cache: 4096 blocks, 3 in use, 40 cached; no disk tier"  # a remote engine


def chat_in_list(title: str, state: str | None, summary: str = "", pinned: bool = False) -> Conversation:
    """A chat as GET /api/conversations lists it (state None: the engine says nothing of it)."""
    warmth = None if state is None else Warmth(state=state, tokens=1234, resident_tokens=0, on_disk_tokens=0,
                                               cold_tokens=0, predicted_s=None, pinned=pinned, summary=summary)
    return Conversation(id=f"c_{title}", title=title, system_prompt="", settings=SamplingSettings(), created_at=0,
                        updated_at=0, pinned=pinned, warmth=warmth)


def test_status_lists_the_warm_and_pinned_chats_and_the_pin_budget():
    pins = PinBudget(tokens=1234, limit_tokens=8192, bytes=2**20, limit_bytes=8 * 2**20,
                     summary="pinned chats keep 1,234 of 8,192 tokens (1 of 8 MiB)")
    chats = [chat_in_list("Trip to Oslo", "resident", "warm · instant", pinned=True),
             chat_in_list("Recipes", "on_disk", "on disk · about 0.4 s"),
             chat_in_list("Old notes", "cold", "cold · about 4 s"),  # neither warm nor pinned: left out
             chat_in_list("Kept", "cold", "cold · about 4 s", pinned=True),  # pinned, its blocks not yet read back
             chat_in_list("Empty", None)]
    assert _warm_chat_lines(chats, pins) == [
        "warm chats: 3",
        "  pinned Trip to Oslo                              warm · instant (1,234 tokens)",
        "         Recipes                                   on disk · about 0.4 s (1,234 tokens)",
        "  pinned Kept                                      cold · about 4 s (1,234 tokens)",
        "pinned chats keep 1,234 of 8,192 tokens (1 of 8 MiB)"]
    assert _warm_chat_lines(chats[2:3], None) == ["warm chats: none"]  # a remote engine: no pin budget
    many = [chat_in_list(f"Chat {i}", "resident", "warm · instant") for i in range(WARM_CHATS_SHOWN + 2)]
    lines = _warm_chat_lines(many, pins)
    assert lines[0] == f"warm chats: {WARM_CHATS_SHOWN + 2} (the newest {WARM_CHATS_SHOWN})"
    assert len(lines) == 1 + WARM_CHATS_SHOWN + 1 and "Chat 0 " in lines[1]


def test_chat_through_the_engine_process_and_in_process_agree(server, api, tmp_path):
    system = api.get("/api/conversation-defaults").json()["system_prompt"]  # a new chat's, as `localchat chat` takes it
    assert system  # the embedded model is a small one: it gets a short system prompt
    reference = api.post("/v1/chat/completions", json={
        "messages": [{"role": "system", "content": system}, {"role": "user", "content": QUESTION}], "temperature": 0,
        "max_tokens": 12}).json()["choices"][0]["message"]["content"]
    assert reference.strip()

    served = server.run_cli("chat", QUESTION, *GREEDY)  # the server's home: its engine answers
    assert served.returncode == 0, served.stderr
    assert served.stdout == reference + "\n" and "loading the model" not in served.stderr

    alone = Server(make_home(tmp_path)).run_cli("chat", "  ", *GREEDY)
    assert alone.returncode == 1 and alone.stderr.strip() == "localchat: the message is empty"
    alone = Server(make_home(tmp_path)).run_cli("chat", QUESTION, *GREEDY, timeout=240)  # no engine: it runs here
    assert alone.returncode == 0, alone.stderr
    assert alone.stdout == reference + "\n" and "loading the model" in alone.stderr


def test_chat_with_an_unknown_model_is_one_line(tmp_path):
    result = Server(make_home(tmp_path)).run_cli("chat", "hi", "--model", "/no/such/model.gguf", timeout=120)
    assert result.returncode == 1
    assert result.stderr.strip().splitlines()[-1] == (
        "localchat: model '/no/such/model.gguf' not found: no GGUF file at /no/such/model.gguf")
    assert "Traceback" not in result.stderr
