"""Cold start: process start to first token, on the first run (the GGUF is converted) and later runs.

    python benchmarks/cold_start.py [--runs 3]

Two paths, each in a fresh LOCALCHAT_HOME:
- in-process: `LLM()` and one token, in a new Python process;
- the app (needs tmux): `localchat` in a terminal with no engine running; it starts the engine, and "Hi" is typed
  the moment the chat screen is up. The time runs from launching `localchat` to the reply's first characters on the
  screen, as a user sees it. The first run converts the model; the later ones read the converted cache.
"""

import argparse
import os
import shutil
import subprocess
import sys
import tempfile
import time

from common import report

CHILD = """
import time
from localchat.engine import LLM, SamplingParams
llm = LLM()
llm.chat([{"role": "user", "content": "Hi"}], SamplingParams(temperature=0, max_tokens=1))
"""
TMUX = shutil.which("tmux")


def first_token_seconds(home: str) -> float:
    env = {**os.environ, "LOCALCHAT_HOME": home}
    start = time.perf_counter()
    subprocess.run([sys.executable, "-c", CHILD], env=env, check=True, capture_output=True)
    return time.perf_counter() - start


def app_first_token_seconds(home: str) -> tuple[float, float]:
    """(seconds to the chat screen, seconds to the reply's first characters) of `localchat` in tmux."""
    env = {**os.environ, "LOCALCHAT_HOME": home, "TERM": "xterm-256color"}
    tmux = [TMUX, "-L", f"localchat-cold-{os.getpid()}"]

    def pane() -> str:
        return subprocess.run([*tmux, "capture-pane", "-p", "-t", "cold"], capture_output=True, text=True).stdout

    def wait(condition, what: str, timeout: float = 300) -> float:
        while time.perf_counter() - start < timeout:
            if condition(pane()):
                return time.perf_counter() - start
            time.sleep(0.01)
        raise TimeoutError(what)

    start = time.perf_counter()
    subprocess.run([*tmux, "new-session", "-d", "-s", "cold", "-x", "120", "-y", "40",
                    f"{sys.executable} -m localchat.app.cli"], env=env, check=True)
    try:
        screen = wait(lambda text: "enter sends" in text, "the chat screen")
        subprocess.run([*tmux, "send-keys", "-t", "cold", "Hi", "Enter"], check=True)
        first = wait(reply_started, "the first token")
        return screen, first
    finally:
        subprocess.run([*tmux, "kill-server"], capture_output=True)
        subprocess.run([sys.executable, "-m", "localchat.app.cli", "stop"], env=env, capture_output=True, timeout=60)


def reply_started(text: str) -> bool:
    """The reply under the last "Assistant" header shows a character (its body lines carry the message's border)."""
    if "Assistant" not in text:
        return False
    lines = text.rsplit("Assistant", 1)[1].splitlines()[1:]
    return any(line.split("▌", 1)[1].strip() for line in lines if "▌" in line)


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("--runs", type=int, default=3)
    args = parser.parse_args()
    with tempfile.TemporaryDirectory(prefix="localchat-cold-") as home:
        rows = [{"path": "in-process LLM()", "run": "first (converts the GGUF)", "seconds": first_token_seconds(home)}]
        rows += [{"path": "in-process LLM()", "run": f"later #{i + 1} (cache)", "seconds": first_token_seconds(home)}
                 for i in range(args.runs)]
    summary = {"best later run, in-process": min(r["seconds"] for r in rows[1:])}
    if TMUX:
        with tempfile.TemporaryDirectory(prefix="localchat-cold-app-") as home:
            for i in range(args.runs + 1):
                screen, first = app_first_token_seconds(home)
                rows.append({"path": "`localchat` in tmux", "run": "first (converts the GGUF)" if i == 0 else
                             f"later #{i} (cache)", "chat screen s": screen, "seconds": first})
        summary["best later run, `localchat` to first token"] = min(r["seconds"] for r in rows[args.runs + 2:])
    report("cold_start", rows, summary)


if __name__ == "__main__":
    main()
