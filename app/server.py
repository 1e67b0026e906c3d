"""The engine process's web app: create_app() wires the store, the backend and the controllers."""

import os
import time
from collections import deque
from importlib.metadata import version

import msgspec
from litestar import Controller, Litestar, MediaType, Request, Response, get, post
from litestar.datastructures import Cookie, State
from litestar.di import NamedDependency, Provide
from litestar.exceptions import HTTPException, ValidationException
from litestar.middleware import DefineMiddleware
from litestar.params import FromQuery
from litestar.response import Redirect

from localchat.app import settings as paths
from localchat.app.api import ConversationController, SearchController
from localchat.app.backends import Backend, BackendNotReady, BackendRequestError, EmbeddedBackend, RemoteBackend
from localchat.app.conversations import Conversations, Running
from localchat.app.openai_api import OpenAIController
from localchat.app.protocol import ErrorBody, ErrorDetail, Health, LoginCode
from localchat.app.security import COOKIE_NAME, LOGIN_CODE_TTL_S, LoginCodes, SecurityMiddleware, load_or_create_token
from localchat.app.settings import Settings
from localchat.app.store import Store, StoreError
from localchat.webui import route_handlers as webui_routes

VERSION = version("localchat")


def make_backend(settings: Settings) -> Backend:
    if settings.engine_url:
        return RemoteBackend(settings.engine_url, settings.engine_model, settings.engine_api_key)
    return EmbeddedBackend(settings.model, num_kv_blocks=settings.kv_blocks, max_model_len=settings.max_model_len,
                           quantization=None if settings.quantization == "none" else settings.quantization)


class SystemController(Controller):
    @get("/health")
    async def health(self, backend: NamedDependency[Backend]) -> Health:
        """Open to anyone on loopback: no conversation data, only whether the model is ready."""
        loading = backend.loading
        status = ("stopping" if backend.stopping else "ready" if loading.ready
                  else "error" if loading.error else "loading")
        return Health(status=status, model=backend.model_name, backend=backend.kind, pid=os.getpid(),
                      version=VERSION, progress=None if loading.ready else loading.progress(), error=loading.error)

    @get("/metrics", media_type=MediaType.TEXT)
    async def metrics(self, backend: NamedDependency[Backend], throughput: NamedDependency["Throughput"]) -> str:
        """Prometheus text format."""
        stats = backend.stats()
        rate = throughput.sample(stats.get("generated_tokens", 0))
        metrics = [
            ("kv_blocks_total", "gauge", "KV cache blocks in all", stats.get("kv_blocks_total")),
            ("kv_blocks_used", "gauge", "KV cache blocks held by running requests", stats.get("kv_blocks_used")),
            ("kv_blocks_cached", "gauge", "free KV cache blocks that still hold a cached prefix",
             stats.get("kv_blocks_cached")),
            ("kv_blocks_free", "gauge", "KV cache blocks not held by any request (cached ones included)",
             stats.get("kv_blocks_free")),
            ("prefix_hit_rate", "gauge", "share of prompt tokens served from the prefix cache",
             stats.get("prefix_hit_rate")),
            ("prompt_tokens_total", "counter", "prompt tokens of all requests", stats.get("prompt_tokens")),
            ("cached_prompt_tokens_total", "counter", "prompt tokens served from the prefix cache",
             stats.get("cached_prompt_tokens")),
            ("generated_tokens_total", "counter", "tokens generated", stats.get("generated_tokens")),
            ("generated_tokens_per_second", "gauge", "tokens generated per second since the previous scrape",
             rate),
            ("requests_running", "gauge", "requests being generated", stats.get("num_running")),
            ("requests_waiting", "gauge", "requests waiting for KV blocks or a batch slot",
             stats.get("num_waiting")),
            ("preemptions_total", "counter", "requests preempted (recomputed later)", stats.get("num_preemptions")),
        ]
        lines = []
        for name, kind, description, value in metrics:
            if value is not None:
                lines += [f"# HELP localchat_{name} {description}", f"# TYPE localchat_{name} {kind}",
                          f"localchat_{name} {value}"]
        return "\n".join(lines) + "\n"


class AuthController(Controller):
    @post("/api/auth/login-code")
    async def login_code(self, request: Request, codes: NamedDependency[LoginCodes]) -> LoginCode:
        """A one-time code for the browser's login URL (`localchat web` asks for one)."""
        code = codes.issue()
        base = str(request.base_url).rstrip("/")
        return LoginCode(code=code, url=f"{base}/auth?code={code}", expires_in_s=LOGIN_CODE_TTL_S)

    @get("/auth")
    async def login(self, codes: NamedDependency[LoginCodes], token: NamedDependency[str],
                    code: FromQuery[str]) -> Response:
        """Trade a one-time code for the token cookie, then open the app."""
        if not codes.redeem(code):
            raise HTTPException(status_code=403, detail="this login link was used or has expired; "
                                                        "run `localchat web` for a new one")
        cookie = Cookie(key=COOKIE_NAME, value=token, httponly=True, samesite="strict", path="/",
                        max_age=400 * 24 * 3600)
        return Redirect("/", cookies=[cookie], status_code=303)




class Throughput:
    """Generated tokens per second between scrapes of /metrics (over the last 30 s at most)."""

    def __init__(self, window_s: float = 30.0):
        self.window_s = window_s
        self.samples: deque[tuple[float, float]] = deque()

    def sample(self, total: float) -> float:
        now = time.monotonic()
        self.samples.append((now, total))
        while len(self.samples) > 2 and now - self.samples[0][0] > self.window_s:
            self.samples.popleft()
        (t0, n0), (t1, n1) = self.samples[0], self.samples[-1]
        return round((n1 - n0) / (t1 - t0), 3) if t1 > t0 else 0.0


def _error(status: int, kind: str, message: str) -> Response:
    return Response(ErrorBody(ErrorDetail(message=message, type=kind, code=status)), status_code=status)


def _http_error(request: Request, error: HTTPException) -> Response:
    message = error.detail
    if isinstance(error, ValidationException) and isinstance(error.extra, list) and error.extra:
        problems = []
        for item in error.extra:
            if isinstance(item, dict):
                detail = item.get("message", "")
                problems.append("a JSON request body is required" if detail == "'data'" and
                                item.get("key") == "data" else f"{item.get('key')}: {detail}")
        message = f"{message}: {'; '.join(problems)}"
    kind = "invalid_request_error" if error.status_code < 500 else "server_error"
    return _error(error.status_code, kind, message)


EXCEPTION_HANDLERS = {
    HTTPException: _http_error,
    StoreError: lambda request, error: _error(404, "not_found", str(error)),
    BackendNotReady: lambda request, error: _error(503, "unavailable", str(error)),
    BackendRequestError: lambda request, error: _error(error.status, "invalid_request_error", str(error)),
    msgspec.ValidationError: lambda request, error: _error(400, "invalid_request_error", str(error)),
}


def create_app(settings: Settings | None = None, *, backend: Backend | None = None, store: Store | None = None,
               token: str | None = None) -> Litestar:
    settings = settings or Settings()
    store = store if store is not None else Store(paths.db_path())
    backend = backend if backend is not None else make_backend(settings)
    token = token if token is not None else load_or_create_token(paths.token_path())
    running = Running()
    conversations = Conversations(store, backend, running)
    codes = LoginCodes()
    throughput = Throughput()

    async def stop_all() -> None:
        """Refuse new requests and end the running ones (each stream finishes with "abort")."""
        backend.stopping = True
        for request_id in list(running.requests):
            await backend.abort(request_id)

    async def on_startup(app: Litestar) -> None:
        backend.start()

    async def on_shutdown(app: Litestar) -> None:
        await stop_all()
        await backend.close()
        store.close()

    def value(obj):
        return Provide(lambda: obj, sync_to_thread=False, use_cache=True)

    return Litestar(
        route_handlers=[SystemController, AuthController, OpenAIController, ConversationController, SearchController,
                        *webui_routes],
        dependencies={"store": value(store), "backend": value(backend), "running": value(running),
                      "conversations": value(conversations), "codes": value(codes), "token": value(token),
                      "throughput": value(throughput), "settings": value(settings)},
        middleware=[DefineMiddleware(SecurityMiddleware, token=token, allowed_hosts=settings.allowed_hosts,
                                     allowed_origins=settings.allowed_origins)],
        exception_handlers=EXCEPTION_HANDLERS,
        on_startup=[on_startup],
        on_shutdown=[on_shutdown],
        state=State({"stop_all": stop_all, "store": store, "backend": backend}),
        openapi_config=None,
    )
