"""A newcomer's first questions to the embedded model: how often the answer is right under each sampling setting,
through /v1/chat/completions on `localchat serve` with its defaults (n replies a question, seeded).

    .venv/bin/python benchmarks/first_answers.py [--replies 8] [--model PATH.gguf] [--cache-dir DIR]

A reply is right when it holds the answer (a pattern a question); replies of 48 tokens at most. The settings tried:
what a new chat gets on this model (GET /api/conversation-defaults), then temperatures 0.7 (localchat's old default)
down to 0 (greedy), top_p 0.95 and 0.9, with no system prompt (the chat template's own) or a short one. Writes
benchmarks/results/first_answers.json.
"""

import argparse
import json
import re
import sys
import tempfile
from pathlib import Path

from peers import localchat_client, localchat_serve, log, make_home, write_result

QUESTIONS = {  # question: a pattern its right answer holds
    "What is the capital of France?": r"\bparis\b",
    "What is the capital of Japan?": r"\btokyo\b",
    "What is 2 + 2?": r"\b(4|four)\b",
    "How many days are in a week?": r"\b(7|seven)\b",
    "What color is the sky on a clear day?": r"\bblue\b",
    "Who wrote Romeo and Juliet?": r"\bshakespeare\b",
    "What is the largest planet in our solar system?": r"\bjupiter\b",
    "At what temperature in Celsius does water boil at sea level?": r"\b100\b",
    "How many legs does a spider have?": r"\b(8|eight)\b",
    "What is the opposite of hot?": r"\bcold\b",
    "How do you say hello in Spanish?": r"\bhola\b",
    "What gas do plants take in from the air?": r"carbon dioxide|\bco2\b|co₂",
}
SHORT_SYSTEM = "You are a helpful assistant. Answer briefly and accurately."
SETTINGS = [{"temperature": t, "top_p": p, "system": s} for s in (None, SHORT_SYSTEM)
            for t, p in ((0.7, 0.95), (0.5, 0.95), (0.3, 0.95), (0.2, 0.9), (0.0, 1.0))]


def right_share(http, model: str, setting: dict, replies: int) -> tuple[float, dict]:
    """The share of right replies over every question, and one wrong reply a question (where there is one)."""
    right, wrong = 0, {}
    for question, pattern in QUESTIONS.items():
        system = [{"role": "system", "content": setting["system"]}] if setting["system"] else []
        body = {"model": model, "messages": [*system, {"role": "user", "content": question}],
                "temperature": setting["temperature"], "top_p": setting["top_p"], "max_tokens": 48,
                "n": 1 if setting["temperature"] == 0 else replies, "seed": 1}
        answer = http.post("/v1/chat/completions", json=body)
        answer.raise_for_status()
        texts = [choice["message"]["content"] for choice in answer.json()["choices"]]
        texts = texts * (replies // len(texts))  # greedy: one reply stands for all
        hits = [bool(re.search(pattern, text, re.IGNORECASE)) for text in texts]
        right += sum(hits)
        if not all(hits):
            wrong[question] = texts[hits.index(False)]
    return right / (len(QUESTIONS) * replies), wrong


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("--replies", type=int, default=8)
    parser.add_argument("--model", help="a GGUF file (default: the embedded model)")
    parser.add_argument("--cache-dir")
    args = parser.parse_args()
    work = Path(tempfile.mkdtemp(prefix="first-answers-"))
    home = make_home(work, args.cache_dir)
    rows = []
    with localchat_serve(home, ["--model", args.model] if args.model else [], work / "serve.log") as serve:
        http = localchat_client(home, serve.port)
        model = http.get("/health").json()["model"]
        defaults = http.get("/api/conversation-defaults").json()
        chat_default = {"temperature": defaults["settings"]["temperature"], "top_p": defaults["settings"]["top_p"],
                        "system": defaults["system_prompt"] or None, "new_chat_default": True}
        for setting in [chat_default, *SETTINGS]:
            share, wrong = right_share(http, model, setting, args.replies)
            rows.append({**setting, "right": round(share, 3), "wrong_examples": wrong})
            which = "a new chat's default: " if setting.get("new_chat_default") else ""
            log(f"{model}: {which}temperature {setting['temperature']} top_p {setting['top_p']} "
                f"system {'short' if setting['system'] else 'none'}: {share:.0%} right")
    write_result("first_answers", {"model": model, "replies_per_question": args.replies,
                                   "questions": list(QUESTIONS), "rows": rows})
    json.dump([{k: r.get(k, False) for k in ("temperature", "top_p", "right", "new_chat_default")}
               | {"system": bool(r["system"])} for r in rows], sys.stdout, indent=1)


if __name__ == "__main__":
    main()
