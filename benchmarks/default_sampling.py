"""What a client that names no sampling settings gets: one plain question asked through every API of `localchat serve`
with its defaults, seeded replies, and how many of them hold the right answer.

    .venv/bin/python benchmarks/default_sampling.py [--seeds 20] [--model PATH.gguf] [--cache-dir DIR]

The paths: /v1/chat/completions with no sampling fields, the same with the model authors' usual small-model values
(temperature 0.2, top_p 0.9), Ollama's /api/chat with no options, and a new conversation of the conversations API
(the settings a UI's new chat starts with). Replies of 48 tokens at most: "What is the capital of France?" with seeds
1..N, then first_answers.py's 12 questions with seeds 1..4 each (the share of right answers). Writes
benchmarks/results/default_sampling.json with what /v1/models says of the model's defaults.
"""

import argparse
import json
import re
import sys
import tempfile
from pathlib import Path

from first_answers import QUESTIONS
from peers import localchat_client, localchat_serve, log, make_home, write_result

QUESTION = "What is the capital of France?"
ANSWER = re.compile(r"\bparis\b", re.IGNORECASE)
MAX_TOKENS = 48


def v1(http, model: str, question: str, seed: int, fields: dict) -> str:
    body = {"model": model, "messages": [{"role": "user", "content": question}], "max_tokens": MAX_TOKENS,
            "seed": seed, **fields}
    reply = http.post("/v1/chat/completions", json=body)
    reply.raise_for_status()
    return reply.json()["choices"][0]["message"]["content"]


def ollama(http, model: str, question: str, seed: int) -> str:
    body = {"model": model, "messages": [{"role": "user", "content": question}], "stream": False,
            "options": {"seed": seed, "num_predict": MAX_TOKENS}}
    reply = http.post("/api/chat", json=body)
    reply.raise_for_status()
    return reply.json()["message"]["content"]


def conversation(http, question: str, seed: int) -> str:
    """A new chat with the settings the server gives it, its seed and length set as a UI's user would."""
    defaults = http.get("/api/conversation-defaults").json()
    settings = {**defaults["settings"], "seed": seed, "max_tokens": MAX_TOKENS}
    cid = http.post("/api/conversations", json={"system_prompt": defaults["system_prompt"],
                                                "settings": settings}).json()["id"]
    reply = http.post(f"/api/conversations/{cid}/messages", json={"content": question})
    reply.raise_for_status()
    done = [json.loads(line[5:]) for line in reply.text.splitlines() if line.startswith("data:")]
    return next(e["message"]["content"] for e in done if e.get("type") == "done")


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("--seeds", type=int, default=20)
    parser.add_argument("--model", help="a GGUF file (default: the embedded model)")
    parser.add_argument("--cache-dir")
    args = parser.parse_args()
    work = Path(tempfile.mkdtemp(prefix="default-sampling-"))
    home = make_home(work, args.cache_dir)
    rows = []
    with localchat_serve(home, ["--model", args.model] if args.model else [], work / "serve.log") as serve:
        http = localchat_client(home, serve.port)
        model = http.get("/health").json()["model"]
        listed = http.get("/v1/models").json()["data"][0]
        paths = {
            "/v1 chat, no sampling fields": lambda q, seed: v1(http, model, q, seed, {}),
            "/v1 chat, temperature 0.2 top_p 0.9": lambda q, seed: v1(http, model, q, seed, {"temperature": 0.2,
                                                                                               "top_p": 0.9}),
            "Ollama /api/chat, no options": lambda q, seed: ollama(http, model, q, seed),
            "a new conversation's defaults": lambda q, seed: conversation(http, q, seed),
        }
        for name, ask in paths.items():
            replies = [ask(QUESTION, seed) for seed in range(1, args.seeds + 1)]
            right = sum(bool(ANSWER.search(text)) for text in replies)
            answers = [bool(re.search(pattern, ask(q, seed), re.IGNORECASE))
                       for q, pattern in QUESTIONS.items() for seed in range(1, 5)]
            rows.append({"path": name, "right": right, "of": args.seeds, "examples": replies[:3],
                         "twelve_questions_right": round(sum(answers) / len(answers), 3)})
            log(f"{model}: {name}: {right}/{args.seeds} name Paris; {sum(answers) / len(answers):.0%} right over "
                f"12 questions")
    write_result("default_sampling", {"model": model, "question": QUESTION, "max_tokens": MAX_TOKENS,
                                      "v1_model_entry": listed, "rows": rows})
    json.dump([{k: r[k] for k in ("path", "right", "of", "twelve_questions_right")} for r in rows], sys.stdout,
              indent=1)


if __name__ == "__main__":
    main()
