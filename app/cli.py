"""The `localchat` command."""

import argparse
import asyncio
import sys
import warnings
from importlib.metadata import version

from localchat.app.server.config import (
    DEFAULT_HOST,
    DEFAULT_KV_DISK_GB,
    DEFAULT_PORT,
    ENGINE_API_KEY_ENV,
    SPECULATIVE,
)

MODEL_HELP = "a model from `localchat models`: a GGUF file, a safetensors folder or a cached HF model id"


def main(argv: list[str] | None = None) -> int:
    args = parser().parse_args(argv)
    warnings.filterwarnings("ignore", message=".*XDG_RUNTIME_DIR.*")  # platformdirs' fallback is fine
    try:
        return COMMANDS[args.command or "tui"](args)
    except (KeyboardInterrupt, EOFError):
        print(file=sys.stderr)
        return 130 if args.command else 0
    except Exception as error:  # one clear line, never a traceback
        message = str(error) or type(error).__name__
        print(f"localchat: {message}", file=sys.stderr)
        return 1


def parser() -> argparse.ArgumentParser:
    """The command line: the terminal UI without a command, and each command's options."""
    parser = argparse.ArgumentParser(prog="localchat", description="A local chat app with its own LLM engine. "
                                     "Without a command it opens the terminal UI.")
    parser.add_argument("--version", action="version", version=f"localchat {version('localchat')}")
    parser.add_argument("--model", default=None, help=MODEL_HELP)
    commands = parser.add_subparsers(dest="command", metavar="COMMAND")
    tui = commands.add_parser("tui", help="the terminal UI (the default command)")
    tui.add_argument("--model", default=None, help=MODEL_HELP + " for an engine it starts")
    add_serve_options(commands.add_parser("serve", help="run the engine process (the HTTP API) in the foreground",
                                          description="Run the engine process: the OpenAI-compatible API under /v1, "
                                                      "the conversations under /api, the web UI at /, /health and "
                                                      "/metrics."))
    web = commands.add_parser("web", help="open the web UI in a browser through a one-time login URL")
    web.add_argument("--print", action="store_true", help="only print the one-time URL")
    chat = commands.add_parser("chat", help="ask one question and print the reply (nothing is stored)",
                               description="One reply, streamed to stdout. A running engine process answers it; "
                                           "otherwise the model runs in this process and exits with it.")
    chat.add_argument("message", nargs="?", default="-", help="the question ('-' or nothing: read stdin)")
    chat.add_argument("--model", default=None, help=MODEL_HELP)
    chat.add_argument("--system", default=None,
                      help="a system prompt ('' for none; default: the model's, as a new chat gets it)")
    chat.add_argument("--max-tokens", type=int, default=512)
    chat.add_argument("--temperature", type=float, default=None, help="default: the model's, as a new chat gets it")
    chat.add_argument("--top-p", type=float, default=None)
    chat.add_argument("--seed", type=int, default=None)
    commands.add_parser("stop", help="stop the running engine process")
    commands.add_parser("status", help="show whether the engine process runs, where, and its model")
    commands.add_parser("token", help="print the API token (Authorization: Bearer TOKEN)")
    commands.add_parser("logout", help="sign every browser out of the web UI")
    commands.add_parser("models", help="list the embedded model and the models found on this machine")
    pull = commands.add_parser("pull", help="download a GGUF model from the Hugging Face Hub",
                               description="Download a GGUF file from a model repo on the Hugging Face Hub into its "
                                           "cache, where `localchat models` lists it. An interrupted pull goes on "
                                           "where it stopped when run again; the file is checked against its "
                                           "SHA-256. HF_ENDPOINT, HF_HUB_CACHE and the token of `hf auth login` "
                                           "(or HF_TOKEN) are honoured.")
    pull.add_argument("repo", help="the repo, OWNER/NAME (as bartowski/Qwen2.5-0.5B-Instruct-GGUF)")
    pull.add_argument("file", nargs="?", default=None,
                      help="one of its GGUF files (default: its only one, or its Q4_K_M)")
    return parser


def add_serve_options(serve: argparse.ArgumentParser) -> None:
    serve.add_argument("--host", default=DEFAULT_HOST,
                       help=f"address to listen on (default {DEFAULT_HOST}; anything else exposes your chats)")
    serve.add_argument("--port", type=int, default=None,
                       help=f"port (default {DEFAULT_PORT}, or a free one when another program has it: clients "
                            "find it in the engine's state file)")
    serve.add_argument("--model", default=None, help=MODEL_HELP)
    serve.add_argument("--engine-url", default=None,
                       help="use this OpenAI-compatible server (vLLM, SGLang) instead of the embedded engine; "
                            f"its API key comes from ${ENGINE_API_KEY_ENV}")
    serve.add_argument("--engine-model", default=None, help="the model name on --engine-url (default: its first)")
    serve.add_argument("--kv-blocks", type=int, default=None, help="KV cache size in 16-token blocks")
    serve.add_argument("--kv-disk-gb", type=float, default=None,
                       help="disk for the KV cache's tier that keeps chats warm across restarts (default "
                            f"{DEFAULT_KV_DISK_GB:g}; 0: none)")
    serve.add_argument("--max-model-len", type=int, default=None, help="longest prompt + reply, in tokens")
    serve.add_argument("--quantization", choices=("auto", "packed", "none"), default=None,
                       help="auto (default): a GGUF runs its own quantized weights on CPU (little memory, fast, "
                            "reproducible for a seed); none: dense float32 weights, exact against transformers")
    serve.add_argument("--speculative", choices=SPECULATIVE, default=None,
                       help="on (default): draft tokens from the chat itself (the prompt, the reply so far, the "
                            "replies it regenerates) and check them in one step; the same replies, fewer steps")
    serve.add_argument("--thinking-token-budget", type=int, default=None,
                       help="a thinking model thinks at most this many tokens, then answers (default: no limit; a "
                            "request or a conversation may set its own)")
    serve.add_argument("--ollama-port", type=int, default=None,
                       help="also serve Ollama's API without the token on this loopback port (11434 is Ollama's): "
                            "inference only, for clients that cannot send a token; any local program may use it")


def tui(args) -> int:
    from localchat.app.client.engine_process import start_unless_running

    serve_args = ["--model", args.model] if args.model else []
    started = start_unless_running(serve_args)  # the engine loads while the terminal UI imports and draws
    from localchat.tui.app import main as run_tui

    return run_tui(serve_args, started)


def chat(args) -> int:
    from localchat.app.client.one_shot import reply

    message = sys.stdin.read() if args.message == "-" else args.message
    if not message.strip():
        raise ValueError("the message is empty")
    sampling = {"max_tokens": args.max_tokens, "temperature": args.temperature, "top_p": args.top_p,
                "seed": args.seed}
    for text in reply(message, args.system, args.model, sampling):
        print(text, end="", flush=True)
    print()
    return 0


def models(args) -> int:
    from localchat.engine.loading.model_catalog import find_models, hf_cache_dir, model_dirs

    rows = [(m.name, m.architecture or "?", m.quantization or m.format, f"{m.size_bytes / 1e6:,.0f} MB",
             f"{m.memory_bytes / 1e6:,.0f} MB" if m.memory_bytes else "?", m.source,
             "" if m.supported else "not supported") for m in find_models()]
    header = ("MODEL", "ARCHITECTURE", "WEIGHTS", "FILE", "MEMORY", "FOUND IN", "")
    widths = [max(len(row[i]) for row in [header, *rows]) for i in range(len(header))]
    for row in [header, *rows]:
        print("  ".join(cell.ljust(width) for cell, width in zip(row, widths)).rstrip())
    searched = ", ".join(str(p) for p in [hf_cache_dir(), *model_dirs()])
    print(f"\nsearched: {searched} (more folders: $LOCALCHAT_MODEL_DIRS); use one with --model NAME; "
          "MEMORY is its weights as the engine holds them, before the KV cache", file=sys.stderr)
    return 0


def pull(args) -> int:
    from huggingface_hub.utils import tqdm

    from localchat.app.model_pull import pull_model

    bar = None

    def show(state) -> None:
        nonlocal bar
        if state.state == "downloading":
            if bar is None:
                if state.resumed_from:
                    print(f"going on from {state.resumed_from:,} bytes an earlier pull left", file=sys.stderr)
                bar = tqdm(total=state.bytes_total, initial=state.bytes_done, unit="B", unit_scale=True,
                           unit_divisor=1024, desc=state.file)
            bar.update(state.bytes_done - bar.n)
        elif state.state == "checking" and bar is not None:
            bar.close()
            print(f"checking {state.file} against its checksum", file=sys.stderr)

    try:
        path = pull_model(args.repo, args.file, show)
    finally:
        if bar is not None:
            bar.close()
    print(path)
    print(f"`localchat models` lists it; `localchat serve --model {path}` runs it (or choose it with F4 in the "
          "terminal, the Model list in the browser)", file=sys.stderr)
    return 0


def serve(args) -> int:
    from localchat.app.server.config import ServerConfig, is_loopback
    from localchat.app.server.process import serve as run_server

    if args.engine_url and args.model:
        raise ValueError("--model and --engine-url exclude each other")
    config = ServerConfig.from_env(host=args.host, port=args.port, model=args.model, engine_url=args.engine_url,
                                   engine_model=args.engine_model, kv_blocks=args.kv_blocks,
                                   max_model_len=args.max_model_len, quantization=args.quantization,
                                   kv_disk_gb=args.kv_disk_gb, speculative=args.speculative,
                                   thinking_token_budget=args.thinking_token_budget, ollama_port=args.ollama_port)
    if not is_loopback(config.host):
        print(f"localchat: listening on {config.host}: reachable from other machines (token required)",
              file=sys.stderr)
    run_server(config, port_named=args.port is not None)
    return 0


def stop(args) -> int:
    from localchat.app.client.engine_process import stop_engine

    pid = stop_engine()
    print("no engine is running" if pid is None else f"stopped the engine (pid {pid})")
    return 0


def status(args) -> int:
    from localchat.app.client.engine_process import health
    from localchat.app.engine_state import read_state

    state = read_state()
    if state is None:
        print("not running")
        return 1
    report = health(state.url)
    if report is None:
        print(f"starting: pid {state.pid}, {state.url}")
    elif report.status == "loading" and report.progress:
        fraction = f" {report.progress.fraction:.0%}" if report.progress.fraction is not None else ""
        print(f"loading: pid {state.pid}, {state.url}, {report.progress.stage}{fraction} "
              f"({report.progress.elapsed_s:.0f} s)")
    else:
        print(f"{report.status}: pid {state.pid}, {state.url}, {report.backend} model {report.model}"
              + (f" ({report.error})" if report.error else ""))
        if report.status == "ready":
            metrics, chats = asyncio.run(_metrics_and_chats())
            print(_kv_cache_line(metrics))
            print("\n".join(_warm_chat_lines(chats, report.pins)))
    return 0


async def _metrics_and_chats() -> tuple[dict[str, float], list]:
    from localchat.app.client.engine_client import EngineClient

    async with EngineClient.running() as client:
        return await client.metrics(), await client.list_conversations()


WARM_CHATS_SHOWN = 10  # of `localchat status`'s list of warm chats


def _warm_chat_lines(chats: list, pins) -> list[str]:
    """The chats whose history is warm (in memory or on disk) or pinned, newest first, and the pin budget."""
    warm = [c for c in chats if c.warmth is not None and (c.warmth.state != "cold" or c.pinned)]
    lines = [f"warm chats: {len(warm)}" + (f" (the newest {WARM_CHATS_SHOWN})" if len(warm) > WARM_CHATS_SHOWN else "")
             if warm else "warm chats: none"]
    for chat in warm[:WARM_CHATS_SHOWN]:
        title = chat.title if len(chat.title) <= 40 else chat.title[:39] + "…"
        lines.append(f"  {'pinned ' if chat.pinned else '       '}{title:<40}  {chat.warmth.summary} "
                     f"({chat.warmth.tokens:,} tokens)")
    if pins is not None:
        lines.append(pins.summary)
    return lines


def _kv_cache_line(metrics: dict[str, float]) -> str:
    """The KV cache's size (the memory it takes once every block has been used), its blocks, and its disk tier."""
    size = f"{metrics['kv_cache_bytes'] / 2**30:.2f} GiB in " if "kv_cache_bytes" in metrics else ""
    memory = (f"KV cache: {size}{metrics.get('kv_blocks_total', 0):.0f} blocks, "
              f"{metrics.get('kv_blocks_used', 0):.0f} in use, {metrics.get('kv_blocks_cached', 0):.0f} cached")
    if "kv_disk_bytes" not in metrics:
        return f"{memory}; no disk tier"
    if not metrics["kv_disk_enabled"]:
        return f"{memory}; the disk tier is off after an error (see the engine's log)"
    return (f"{memory}; disk tier {metrics['kv_disk_bytes'] / 1e9:.2f} of {metrics['kv_disk_limit_bytes'] / 1e9:g} GB "
            f"({metrics['kv_disk_blocks']:.0f} blocks), {metrics['kv_disk_hits_total']:.0f} blocks read back, "
            f"hit rate {metrics['kv_disk_hit_rate']:.0%}")


def token(args) -> int:
    from localchat.app.paths import load_or_create_token

    print(load_or_create_token())
    return 0


def logout(args) -> int:
    from localchat.app.client.engine_client import EngineClient

    async def revoke() -> int:
        async with EngineClient.running() as client:
            return await client.revoke_browser_sessions()

    print(f"signed out {asyncio.run(revoke())} browser session(s)")
    return 0


def web(args) -> int:
    from localchat.app.client.engine_client import EngineClient

    shown = []

    async def login_url() -> str:
        async with await EngineClient.connect(on_progress=lambda report: shown.append(_show_progress(report))) as c:
            return (await c.login_code()).url

    url = asyncio.run(login_url())
    if shown:
        print(file=sys.stderr)  # end the progress line
    print(url)
    if not args.print:
        import webbrowser

        if not webbrowser.open(url):
            print("localchat: no browser found; open the URL above (it works once)", file=sys.stderr)
    return 0


def _show_progress(report) -> None:
    progress = report.progress
    if progress is not None:
        fraction = f" {progress.fraction:.0%}" if progress.fraction is not None else ""
        print(f"\rloading the model: {progress.stage}{fraction} ({progress.elapsed_s:.0f} s)\033[K",
              end="", file=sys.stderr, flush=True)


COMMANDS = {"tui": tui, "serve": serve, "web": web, "chat": chat, "stop": stop, "status": status, "token": token,
            "logout": logout, "models": models, "pull": pull}


if __name__ == "__main__":
    sys.exit(main())
