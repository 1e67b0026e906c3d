"""How the engine process is configured, and what one request may ask of it."""

import ipaddress
import os
from dataclasses import dataclass

DEFAULT_HOST = "127.0.0.1"
DEFAULT_PORT = int(os.environ.get("LOCALCHAT_PORT") or 8741)  # where `localchat serve` listens unless --port
LOOPBACK_NAMES = ("localhost", "127.0.0.1", "::1")
ENGINE_API_KEY_ENV = "LOCALCHAT_ENGINE_API_KEY"  # the bearer token of an --engine-url server
GRACEFUL_SHUTDOWN_S = 10  # how long a stopping engine waits for its open connections

# What one request may ask of the server (bigger ones are refused before any work is done)
MAX_REQUEST_BYTES = 4 * 1024 * 1024  # a request body
MAX_CHARS_PER_TOKEN = 32  # a text longer than max_model_len times this cannot fit: refused without tokenizing it
MAX_PROMPTS = 32  # prompts of one /v1/completions request
MAX_CHOICES = 64  # prompts times n of one /v1/completions request


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

    @classmethod
    def from_env(cls, **overrides) -> "ServerConfig":
        overrides.setdefault("engine_api_key", os.environ.get(ENGINE_API_KEY_ENV) or None)
        return cls(**{k: v for k, v in overrides.items() if v is not None})

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


def is_loopback(host: str) -> bool:
    if host == "localhost":
        return True
    try:
        return ipaddress.ip_address(host.strip("[]")).is_loopback
    except ValueError:
        return False


def url_host(host: str) -> str:
    return f"[{host}]" if ":" in host and not host.startswith("[") else host
