"""The web UI's chat session without a browser: webui/static/chat_session.js run by Node through the scenarios of
tests/tui/chat_session_scenarios.json, the file the terminal's twin (tui/chat_session.py) is tested with, step by step:
the two sessions agree on every one."""

import json
import shutil
import subprocess
from pathlib import Path

import pytest

SCENARIO_FILE = Path(__file__).parents[1] / "tui" / "chat_session_scenarios.json"
SCENARIOS = json.loads(SCENARIO_FILE.read_text())["scenarios"]
OBSERVER = Path(__file__).parent / "chat_session_observer.mjs"


@pytest.fixture(scope="module")
def observed() -> list[list[dict]]:
    """What the session had after each step of each scenario (chat_session_observer.mjs)."""
    node = shutil.which("node")
    if node is None:
        pytest.skip("Node.js is not installed: the web UI's chat session runs in it")
    result = subprocess.run([node, str(OBSERVER), str(SCENARIO_FILE)], capture_output=True, text=True, timeout=60)
    assert result.returncode == 0, result.stderr
    return json.loads(result.stdout)


@pytest.mark.parametrize("number", range(len(SCENARIOS)), ids=[s["name"] for s in SCENARIOS])
def test_the_session_follows_the_scenario(observed, number):
    steps = SCENARIOS[number]["steps"]
    assert len(observed[number]) == len(steps)
    for at, (step, seen) in enumerate(zip(steps, observed[number]), 1):
        assert seen == step["expect"], f"step {at}"
