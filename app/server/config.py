"""How the engine process is configured, and what one request may ask of it."""

import ipaddress
import os
import tomllib
from dataclasses import dataclass

from localchat.app.server.context_budget import DEFAULT_POLICY, POLICIES
from localchat.engine.frontend.structured_output import MAX_SCHEMA_DEPTH
from localchat.engine.loading.dirs import user_dir
from localchat.engine.sampling_params import check_limit

DEFAULT_HOST = "127.0.0.1"
DEFAULT_PORT = int(os.environ.get("LOCALCHAT_PORT") or 8741)  # where `localchat serve` listens unless --port
LOOPBACK_NAMES = ("localhost", "127.0.0.1", "::1")
ENGINE_API_KEY_ENV = "LOCALCHAT_ENGINE_API_KEY"  # the bearer token of an --engine-url server
GRACEFUL_SHUTDOWN_S = 10  # how long a stopping engine waits for its open connections
DEFAULT_KV_DISK_GB = 8.0  # the KV cache's disk tier: chats stay warm across restarts within this much disk
SPECULATIVE = ("on", "off")
SETTINGS_FILE = "serve.toml"  # in the config folder: `localchat serve`'s options, which its flags override

# What one request may ask of the server (bigger ones are refused before any work is done)
MAX_REQUEST_BYTES = 4 * 1024 * 1024  # a request body
MAX_CHARS_PER_TOKEN = 32  # a text longer than max_model_len times this cannot fit: refused without tokenizing it
MAX_PROMPTS = 32  # prompts of one /v1/completions request
MAX_CHOICES = 64  # prompts times n of one /v1/completions request
# arrays and objects within each other in a JSON body, measured before it is decoded (decoding recurses per level):
# as deep as a JSON Schema may be in itself (the engine's limit, which names the schema), and the few levels of the
# request around it (a conversation's settings.tools[i].function.parameters, Ollama's messages[i].tool_calls[j].
# function.arguments: 6)
MAX_JSON_DEPTH = MAX_SCHEMA_DEPTH + 8
MAX_QUOTED_CHARS = 100  # of a name or id that an error message quotes back


@dataclass(frozen=True)
class ServerConfig:
    host: str = DEFAULT_HOST
    port: int = DEFAULT_PORT
    model: str | None = None  # the embedded engine's model (None: SmolLM2-135M-Instruct)
    engine_url: str | None = None  # an OpenAI-compatible server instead of the embedded engine
    engine_model: str | None = None
    engine_api_key: str | None = None
    kv_blocks: int | None = None  # the embedded engine's KV cache size (None: the engine's default)
    max_model_len: int | None = None
    quantization: str = "auto"  # the embedded engine's weights: "auto", "packed" or "none" (see EngineConfig)
    kv_disk_gb: float = DEFAULT_KV_DISK_GB  # the KV cache's disk tier (0: none)
    speculative: str = "on"  # drafts from the conversation, checked in the step's batch; "off": plain decoding
    # a thinking model's replies think at most this many tokens unless a request or a conversation says otherwise
    # (None: no limit but max_tokens)
    thinking_token_budget: int | None = None
    # what a conversation that outgrows the model's context does, unless it says otherwise (context_budget.py)
    context_overflow: str = DEFAULT_POLICY
    # a second listener on this loopback port for Ollama's API without the token (None: none); see security.py
    ollama_port: int | None = None

    def __post_init__(self) -> None:
        if not (isinstance(self.kv_disk_gb, int | float) and self.kv_disk_gb >= 0):
            raise ValueError(f"kv_disk_gb must be a number of GB, 0 for no disk tier; got {self.kv_disk_gb!r}")
        if self.speculative not in SPECULATIVE:
            raise ValueError(f"speculative must be \"on\" or \"off\", got {self.speculative!r}")
        check_limit("thinking_token_budget", self.thinking_token_budget)
        if self.ollama_port is not None and not (0 <= self.ollama_port <= 65535 and self.ollama_port != self.port):
            raise ValueError(f"ollama_port must be a port other than {self.port}; got {self.ollama_port!r}")
        if self.context_overflow not in POLICIES:
            raise ValueError(f"context_overflow must be one of {', '.join(POLICIES)}; got {self.context_overflow!r}")

    @classmethod
    def from_env(cls, **overrides) -> "ServerConfig":
        """The defaults, then the settings file, then the flags given (overrides that are not None)."""
        overrides.setdefault("engine_api_key", os.environ.get(ENGINE_API_KEY_ENV) or None)
        return cls(**{**read_settings_file(), **{k: v for k, v in overrides.items() if v is not None}})

    @property
    def kv_disk_bytes(self) -> int:
        return int(self.kv_disk_gb * 1e9)

    @property
    def url(self) -> str:
        return f"http://{url_host(self.host)}:{self.port}"

    @property
    def allowed_hosts(self) -> tuple[str, ...]:
        """Host header names the server answers: loopback names, and the bound host if it is a real name."""
        extra = () if self.host in ("0.0.0.0", "::", "") else (self.host.strip("[]"),)
        return tuple(dict.fromkeys(LOOPBACK_NAMES + extra))

    @property
    def allowed_origins(self) -> tuple[str, ...]:
        return tuple(f"http://{url_host(host)}:{self.port}" for host in self.allowed_hosts)


SETTINGS_IN_FILE = ("model", "kv_blocks", "max_model_len", "quantization", "kv_disk_gb", "speculative",
                    "thinking_token_budget", "context_overflow", "ollama_port")


def read_settings_file() -> dict:
    """`localchat serve`'s settings from the config folder's serve.toml (none if there is no file), e.g.
    `kv_disk_gb = 20`. An unknown name or a malformed file is a clear error."""
    path = user_dir("config") / SETTINGS_FILE
    if not path.is_file():
        return {}
    try:
        settings = tomllib.loads(path.read_text())
    except (tomllib.TOMLDecodeError, UnicodeDecodeError) as error:
        raise ValueError(f"{path} is not valid TOML: {error}") from None
    unknown = sorted(set(settings) - set(SETTINGS_IN_FILE))
    if unknown:
        raise ValueError(f"{path}: unknown setting {', '.join(unknown)}; known: {', '.join(SETTINGS_IN_FILE)}")
    return settings


def is_loopback(host: str) -> bool:
    if host == "localhost":
        return True
    try:
        return ipaddress.ip_address(host.strip("[]")).is_loopback
    except ValueError:
        return False


def quoted(name: str) -> str:
    """A name or id from a request, quoted for an error message: cut to MAX_QUOTED_CHARS with an ellipsis."""
    return repr(name if len(name) <= MAX_QUOTED_CHARS else name[:MAX_QUOTED_CHARS] + "…")


def url_host(host: str) -> str:
    return f"[{host}]" if ":" in host and not host.startswith("[") else host
