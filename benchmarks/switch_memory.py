"""What switching models leaves behind in `localchat serve`: its resident memory after each of --switches switches
between the embedded model and a tiny second one (tests/support.py's tiny-llama: 2 layers, random weights), each
switch waited for until the new model is ready. Without gc and malloc_trim after an unload
(engine/memory.release_freed_memory) the process grew by most of a model's memory per round trip.

    python benchmarks/switch_memory.py [--switches 8]
"""

import argparse
import os
import sys
import tempfile
import time
from pathlib import Path

import httpx
from peers import free_port, make_home

from common import Server, report

sys.path.insert(0, str(Path(__file__).resolve().parents[1] / "tests"))


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("--switches", type=int, default=8)
    args = parser.parse_args()
    root = Path(tempfile.mkdtemp(prefix="localchat-switch-"))
    home = make_home(root, "~/.cache/localchat")
    os.environ["LOCALCHAT_HOME"] = str(home)
    os.environ["LOCALCHAT_TEST_SUITE_HOME"] = str(home)  # tests/support.py's home: the tiny model is built here
    from support import SECOND_MODEL_NAME, second_model_dir

    models = second_model_dir(root / "models")
    os.environ["LOCALCHAT_MODEL_DIRS"] = str(models)
    server = Server(home, free_port(), ["--kv-disk-gb", "0"])
    rows = [{"switch": 0, "model": "SmolLM2-135M-Instruct", "rss MB": round(server.rss_mb())}]
    try:
        with server.client() as api:
            names = [m["name"] for m in api.get("/api/models").json()["models"]]
            tiny = next(n for n in names if n.endswith(SECOND_MODEL_NAME))
            for k in range(1, args.switches + 1):
                name = tiny if k % 2 else "SmolLM2-135M-Instruct"
                api.post("/api/models/current", json={"model": name}).raise_for_status()
                while (health := httpx.get(f"{server.url}/health").json())["status"] == "loading":
                    time.sleep(0.1)
                assert health["status"] == "ready", health
                rows.append({"switch": k, "model": health["model"], "rss MB": round(server.rss_mb())})
    finally:
        server.process.terminate()
        server.process.wait(60)
    report("switch_memory", rows, {"growth MB over the switches": rows[-1]["rss MB"] - rows[0]["rss MB"]})


if __name__ == "__main__":
    main()
