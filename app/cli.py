"""The `localchat` command."""

import argparse
import sys
from importlib.metadata import version


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(prog="localchat", description="A local chat app with its own LLM engine.")
    parser.add_argument("--version", action="version", version=f"localchat {version('localchat')}")
    parser.add_argument("--model", default=None, help="a GGUF file, a safetensors folder or a cached HF model id")
    args = parser.parse_args(argv)
    try:
        return chat_in_terminal(args.model)
    except (ValueError, RuntimeError) as error:
        print(f"localchat: {error}", file=sys.stderr)
        return 1
    except (KeyboardInterrupt, EOFError):
        print()
        return 0


def chat_in_terminal(model: str | None) -> int:
    """A plain streaming chat on stdin/stdout (the terminal UI replaces it). Each turn's prompt is the whole
    conversation; the engine's prefix cache finds the earlier turns' KV blocks."""
    from localchat.engine import SamplingParams
    from localchat.engine.llm_engine import LLMEngine

    print("loading the model...", file=sys.stderr)
    engine = LLMEngine(model)
    print(f"{engine.model_name} ready. Type a message; Ctrl+D quits.", file=sys.stderr)
    messages: list[dict] = []
    while True:
        message = input("> ").strip()
        if not message:
            continue
        messages.append({"role": "user", "content": message})
        request_id = engine.add_request(engine.apply_chat_template(messages),
                                        SamplingParams(temperature=0.7, top_p=0.9, max_tokens=512))
        reply = ""
        while engine.has_unfinished_requests():
            for delta in engine.step():
                if delta.request_id == request_id:
                    for part in delta.outputs:
                        print(part.text, end="", flush=True)
                        reply += part.text
        print()
        messages.append({"role": "assistant", "content": reply})


if __name__ == "__main__":
    sys.exit(main())
