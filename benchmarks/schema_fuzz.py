"""Schemathesis over the served OpenAPI schema, every check and every phase, as a hostile client would probe it: a
bounded run (--max-examples per operation and phase, seeded) against `localchat serve` on tests/support.py's
tiny-llama (2 layers, random weights: fast replies) with a context of 36 tokens, as tests/app/test_openapi_fuzz.py
runs a smaller one. Its settings are that test's (config_text): the operations that may refuse (400) a request the
schema allows for what no schema can state (a context, a vocabulary, a chat template, distinct tool names), and real
ids in the paths; unlike the test, Ollama's refusals by design (pull, push, create, copy, delete, embed: 400 is all
they answer) are checked too, and each failure they give is listed as such. The coverage and fuzzing phases run with
those ids; the stateful phase without them (it follows the schema's links to what it creates). Afterwards the engine
must still generate, with every KV block free and no traceback in its log.

    python benchmarks/schema_fuzz.py [--max-examples 10]

Reports the cases each run generated, its failures by design (each operation, check and status) and its other
failures (results/schema_fuzz.json); the exit status is 1 if there is any other failure.
"""

import argparse
import os
import re
import subprocess
import sys
import tempfile
from pathlib import Path

import httpx
from peers import free_port, make_home

from common import Server, report

sys.path.insert(0, str(Path(__file__).resolve().parents[1] / "tests"))
CONTEXT = 36  # tokens: one short message and a few of reply, so no generated request runs long
RUNS = {"coverage and fuzzing": "examples,coverage,fuzzing", "stateful": "stateful"}


def schemathesis(server: Server, config: Path, phases: str, max_examples: int, out: Path,
                 by_design: list[str]) -> dict:
    """One `schemathesis run`, all checks: its cases, and its failures (operation, check, status): those that are
    the refusals by design of the paths `by_design`, and the others."""
    command = [str(Path(sys.executable).with_name("schemathesis")), "--config-file", str(config), "run",
               f"{server.url}/api/openapi/openapi.json", "-H", f"Authorization: Bearer {server.token}",
               "--checks", "all", "--phases", phases, "--max-examples", str(max_examples), "--seed", "1",
               "--workers", "1", "--request-timeout", "120"]
    result = subprocess.run(command, capture_output=True, text=True)
    out.write_text(result.stdout + result.stderr)
    cases = re.search(r"Test cases:\s*\n\s*(\d+) generated", result.stdout)
    found = failures(result.stdout)
    refusals = [f for f in found if f.split(": ")[0].split(" ", 1)[1] in by_design
                and f.endswith("Schema-valid request rejected (400)")]
    return {"cases": int(cases[1]) if cases else None, "failures": [f for f in found if f not in refusals],
            "refusals by design": refusals, "exit status": result.returncode}


def failures(report: str) -> list[str]:
    """Each failure a run's report lists, once: "METHOD PATH: check (status)"."""
    if "FAILURES ===" not in report:
        return []
    section = re.split(r"=+ (?:WARNINGS|SUMMARY) =+", report.split("FAILURES ===", 1)[1])[0]
    found, operation, checks = [], None, []
    for line in section.splitlines():
        if heading := re.fullmatch(r"_+ (\S+ \S+) _+", line):
            operation = heading[1]
        elif check := re.fullmatch(r"- (.+)", line):
            checks.append(check[1])
        elif status := re.match(r"\[(\d{3})\]", line):
            found += [f"{operation}: {name} ({status[1]})" for name in checks]
            checks = []
    return list(dict.fromkeys(found))


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("--max-examples", type=int, default=10, help="per operation and phase")
    args = parser.parse_args()
    root = Path(tempfile.mkdtemp(prefix="localchat-schema-fuzz-"))
    home = make_home(root, "~/.cache/localchat")
    os.environ["LOCALCHAT_HOME"] = str(home)
    os.environ["LOCALCHAT_TEST_SUITE_HOME"] = str(home)  # tests/support.py's home: the tiny model is built here
    from app.test_openapi_fuzz import REFUSED_BY_DESIGN, REFUSED_FOR_WHAT_NO_SCHEMA_STATES, config_text

    from support import SECOND_MODEL_NAME, second_model_dir, stream_api

    model = second_model_dir(root / "models") / SECOND_MODEL_NAME
    server = Server(home, free_port(), ["--model", str(model), "--max-model-len", str(CONTEXT), "--kv-blocks", "64",
                                        "--kv-disk-gb", "0"])
    rows = []
    try:
        with server.client() as api:  # replies of one token, unless a request's settings say otherwise
            cid, doomed = (api.post("/api/conversations", json={"settings": {"max_tokens": 1}}).json()["id"]
                           for _ in range(2))
            mid = stream_api(api, f"/api/conversations/{cid}/messages", {"content": "Hi"})[0]["message"]["id"]
            models = [api.get("/v1/models").json()["data"][0]["id"], str(model)]  # in /v1, in Ollama's API
        for run, phases in RUNS.items():
            config = root / f"{phases.replace(',', '-')}.toml"
            config.write_text(config_text(cid, mid, doomed, models, REFUSED_FOR_WHAT_NO_SCHEMA_STATES)
                              if "stateful" not in phases else
                              config_text(models=models, may_refuse=REFUSED_FOR_WHAT_NO_SCHEMA_STATES))
            rows.append({"run": run, **schemathesis(server, config, phases, args.max_examples,
                                                    root / f"{phases.replace(',', '-')}.txt", REFUSED_BY_DESIGN)})
        with server.client() as api:
            reply = api.post("/v1/chat/completions", json={"messages": [{"role": "user", "content": "Hi"}],
                                                           "max_tokens": 4})
            metrics = httpx.get(f"{server.url}/metrics").text
    finally:
        server.process.terminate()
        server.process.wait(60)
    log = (home / "serve.log").read_text(errors="replace")
    summary = {"max examples": args.max_examples, "cases": sum(r["cases"] or 0 for r in rows),
               "failures": sum(len(r["failures"]) for r in rows),
               "refusals by design": sum(len(r["refusals by design"]) for r in rows),
               "generates afterwards": reply.status_code == 200,
               "KV blocks held afterwards": re.search(r"^localchat_kv_blocks_used (\S+)", metrics, re.M)[1],
               "tracebacks in the log": log.count("Traceback"), "outputs": str(root)}
    report("schema_fuzz", rows, summary)
    ok = summary["failures"] == 0 and summary["generates afterwards"]  # Schemathesis exits 1 for those by design
    sys.exit(0 if ok and summary["tracebacks in the log"] == 0 else 1)


if __name__ == "__main__":
    main()
