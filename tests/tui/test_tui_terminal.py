"""`localchat` in a real terminal (tmux): it starts the engine itself on a fresh LOCALCHAT_HOME, a two-line message
is typed, and the reply is read back from the screen."""

import json
import os
import shutil
import subprocess
import sys
import time

import httpx
import pytest

from support import free_port, make_home

pytestmark = pytest.mark.slow  # a real terminal and engine process: left out of `./dev test --fast`

TMUX = shutil.which("tmux") or "/usr/bin/tmux"


def wait_for(condition, timeout: float, what: str):
    deadline = time.monotonic() + timeout
    while time.monotonic() < deadline:
        if value := condition():
            return value
        time.sleep(0.2)
    raise TimeoutError(f"timed out waiting for {what}")


def plain(text: str) -> str:
    """Text without spaces, line breaks and the marks Markdown turns into style (list bullets included)."""
    return "".join(c for c in text if not c.isspace() and c not in "*_`#>-•\ufffd")


@pytest.mark.skipif(not os.path.exists(TMUX), reason="needs tmux")
def test_localchat_in_tmux_starts_the_engine_and_answers(tmp_path):
    home = make_home(tmp_path / "home")
    env = {**os.environ, "LOCALCHAT_HOME": str(home), "OMP_WAIT_POLICY": "PASSIVE", "TERM": "xterm-256color",
           "LOCALCHAT_PORT": str(free_port())}  # the engine it starts does not need 8741 to be free
    tmux = [TMUX, "-L", f"localchat-test-{os.getpid()}"]
    command = f"{sys.executable} -m localchat.app.cli"  # Textual draws on stderr: keep it on the terminal
    subprocess.run([*tmux, "new-session", "-d", "-s", "chat", "-x", "120", "-y", "40", command], env=env, check=True)

    def pane() -> str:
        return subprocess.run([*tmux, "capture-pane", "-p", "-t", "chat"], capture_output=True, text=True).stdout

    try:
        wait_for(lambda: "enter sends" in pane(), 240, "the chat screen (the engine started and loaded)")
        # two lines: Ctrl+J starts the second (a terminal sends Shift+Enter as Enter), Enter sends
        subprocess.run([*tmux, "send-keys", "-t", "chat", "Say hello", "C-j", "to me.", "Enter"], check=True)
        screen = wait_for(lambda: "tok/s" in (text := pane()) and text, 180, "the reply's stats")

        state = json.loads((home / "runtime" / "engine.json").read_text())
        token = (home / "config" / "token").read_text().strip()
        with httpx.Client(base_url=state["url"], headers={"Authorization": f"Bearer {token}"}) as api:
            (chat,) = api.get("/api/conversations").json()
            user, reply = api.get(f"/api/conversations/{chat['id']}").json()["messages"]
        assert user["content"] == "Say hello\nto me." and "Say hello" in screen and "to me." in screen
        # the view follows the reply: its end is on screen (lines joined, as Markdown renders them, without the
        # marks it turns into style)
        shown = "".join(line.split("▌", 1)[1] for line in screen.splitlines() if "▌" in line)
        assert plain(reply["content"])[-8:] in plain(shown), screen
        assert f"tok/s · {reply['stats']['cached_tokens']} cached" in screen  # the stats' one short line
    finally:
        subprocess.run([*tmux, "kill-server"], capture_output=True)
        stop = subprocess.run([sys.executable, "-m", "localchat.app.cli", "stop"], env=env, capture_output=True,
                              text=True, timeout=60)
        assert stop.returncode == 0, stop.stderr
