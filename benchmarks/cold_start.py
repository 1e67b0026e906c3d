"""Cold start: process start to first token, on the first run (the GGUF is converted) and later runs.

    python benchmarks/cold_start.py [--runs 3]
"""

import argparse
import os
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


def first_token_seconds(home: str) -> float:
    env = {**os.environ, "LOCALCHAT_HOME": home}
    start = time.perf_counter()
    subprocess.run([sys.executable, "-c", CHILD], env=env, check=True, capture_output=True)
    return time.perf_counter() - start


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__)
    parser.add_argument("--runs", type=int, default=3)
    args = parser.parse_args()
    with tempfile.TemporaryDirectory(prefix="localchat-cold-") as home:
        rows = [{"run": "first (converts the GGUF)", "seconds": first_token_seconds(home)}]
        rows += [{"run": f"later #{i + 1} (cache)", "seconds": first_token_seconds(home)} for i in range(args.runs)]
    report("cold_start", rows, {"best later run": min(r["seconds"] for r in rows[1:])})


if __name__ == "__main__":
    main()
