"""The README's examples work as written: every shell and Python block runs against a real `localchat serve` (the
suite's shared one, its port in place of the default 8741), with `localchat` on the PATH as `./dev` puts it. Two
kinds of line run elsewhere, each named below with the test that runs it."""

import json
import os
import re
import subprocess
import sys
from pathlib import Path

import pytest

pytestmark = pytest.mark.slow  # a real engine process

README = Path(__file__).resolve().parent.parent / "README.md"
RUN_ELSEWHERE = {  # a README line: the test that runs it
    "./dev": "tests/packaging/test_dev_launcher.py (set-up, the link onto the PATH, its messages)",
    "./dev test": "CI itself (.ci/run)",
    "localchat": "tests/tui/test_tui_terminal.py (the terminal UI in tmux)",
}


def blocks(language: str) -> list[str]:
    return re.findall(rf"^```{language}\n(.*?)^```", README.read_text(), flags=re.S | re.M)


def command(line: str) -> str:
    return line.split("#")[0].strip()


def run(program: list[str], source: str, server) -> subprocess.CompletedProcess:
    env = {**os.environ, "PATH": f"{Path(sys.executable).parent}{os.pathsep}{os.environ['PATH']}",
           "LOCALCHAT_HOME": str(server.home)}
    return subprocess.run([*program, source.replace("127.0.0.1:8741", f"127.0.0.1:{server.port}")], env=env,
                          capture_output=True, text=True, timeout=300)


def test_the_lines_run_elsewhere_are_the_set_up_and_the_terminal_ui():
    lines = [command(line) for block in blocks("bash") for line in block.splitlines()]
    assert {line for line in lines if line in RUN_ELSEWHERE} == set(RUN_ELSEWHERE)


@pytest.mark.parametrize("index", range(len(blocks("bash"))))
def test_each_shell_example_runs(server, index):
    source = blocks("bash")[index]
    if all(command(line) in RUN_ELSEWHERE for line in source.splitlines()):
        pytest.skip(f"run by {', '.join(RUN_ELSEWHERE[command(line)] for line in source.splitlines())}")
    result = run(["bash", "-euo", "pipefail", "-c"], source, server)
    assert result.returncode == 0, result.stderr
    out = result.stdout.strip()
    assert out, source
    if out.startswith("{"):  # an API's answer: a reply or the health report, never an error
        answer = json.loads(out)
        assert answer.get("error") is None, answer
        text = json.dumps(answer)
        assert any(key in answer for key in ("choices", "message", "status")), text


@pytest.mark.parametrize("index", range(len(blocks("python"))))
def test_each_python_example_runs(server, index):
    result = run([sys.executable, "-c"], blocks("python")[index], server)
    assert result.returncode == 0, result.stderr
    assert result.stdout.strip()
