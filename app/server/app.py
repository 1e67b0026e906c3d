"""The engine process's web app: create_app() wires the store, the backend and the controllers."""

import logging
import os
import time
from collections import deque
from dataclasses import dataclass, fields
from importlib.metadata import version

import msgspec
from litestar import Controller, Litestar, MediaType, Request, Response, delete, get, post
from litestar.datastructures import Cookie, State
from litestar.di import NamedDependency, Provide
from litestar.exceptions import HTTPException
from litestar.middleware import DefineMiddleware
from litestar.openapi import OpenAPIConfig, ResponseSpec
from litestar.openapi.plugins import JsonRenderPlugin
from litestar.params import FromQuery
from litestar.response import Redirect
from litestar.routes import HTTPRoute

from localchat.app import paths
from localchat.app.kv_cache_words import pin_budget
from localchat.app.protocol import ollama
from localchat.app.protocol.conversations import MAX_DOCUMENTS, MAX_INSTRUCTION_CHARS
from localchat.app.protocol.limits import Limit, Limits
from localchat.app.protocol.system import ErrorBody, ErrorDetail, Health, LoginCode, SessionsRevoked
from localchat.app.server.active_requests import ActiveRequests
from localchat.app.server.backends import Backend, BackendDep, BackendNotReady, BackendRequestError
from localchat.app.server.config import MAX_REQUEST_BYTES, ServerConfig
from localchat.app.server.conversations import Conversations
from localchat.app.server.conversations_api import (
    ConversationController,
    ConversationDefaultsController,
    SearchController,
)
from localchat.app.server.documents import MAX_DOCUMENT_BYTES
from localchat.app.server.documents_api import DocumentController
from localchat.app.server.embedded_backend import EmbeddedBackend
from localchat.app.server.error_text import error_message
from localchat.app.server.json_body import JSONBodyRequest
from localchat.app.server.model_turns import ModelTurns
from localchat.app.server.models_api import ModelPulls, ModelsController, remembered_model
from localchat.app.server.ollama_api import OllamaController, listener_root
from localchat.app.server.openai_api import OpenAIController, OpenAIRelay
from localchat.app.server.openapi import StructSchemas
from localchat.app.server.remote_backend import RemoteBackend
from localchat.app.server.security import (
    COOKIE_NAME,
    LOGIN_CODE_TTL_S,
    BrowserSessions,
    LoginCodes,
    OllamaListenerGuard,
    SecurityMiddleware,
    cookie_value,
)
from localchat.app.server.store import Store, StoreError
from localchat.engine.sampling_limits import LIMITS, MAX_STOP_STRINGS, MIN_TEMPERATURE
from localchat.engine.stats import EngineStats
from localchat.webui import route_handlers as webui_routes
from localchat.webui.routes import signin_failed_page

VERSION = version("localchat")
log = logging.getLogger("localchat.app")


def make_backend(settings: ServerConfig) -> Backend:
    if settings.engine_url:
        return RemoteBackend(settings.engine_url, settings.engine_model, settings.engine_api_key)
    return EmbeddedBackend(settings.model or remembered_model(), num_kv_blocks=settings.kv_blocks,
                           max_model_len=settings.max_model_len,
                           quantization=settings.quantization, kv_disk_bytes=settings.kv_disk_bytes,
                           speculative=settings.speculative == "on")


class SystemController(Controller):
    @get("/health")
    async def health(self, backend: BackendDep) -> Health:
        """Open to anyone on loopback: no conversation data, only whether the model is ready."""
        loading, error = backend.loading, backend.error
        status = ("stopping" if backend.stopping else "error" if error else "ready" if loading.ready
                  else "unloaded" if backend.unloaded else "loading")
        return Health(status=status, model=backend.model_name, backend=backend.kind, pid=os.getpid(),
                      version=VERSION, progress=None if loading.ready else loading.progress(), error=error,
                      chat=backend.can_chat if status == "ready" else None,
                      thinking=backend.thinks if status == "ready" else None,
                      sampling=backend.sampling if status == "ready" else None,
                      kv_cache=backend.kv_cache if status == "ready" else None,
                      kernels=backend.kernels if status == "ready" else None,
                      pins=pin_budget(usage) if status == "ready" and (usage := backend.pin_usage()) else None)

    @get("/metrics", media_type=MediaType.TEXT)
    async def metrics(self, backend: BackendDep, throughput: NamedDependency["Throughput"]) -> str:
        """Prometheus text format."""
        stats = await backend.stats()
        rate = throughput.sample(stats.generated_tokens or 0)
        lines = []
        for name, kind, description, value in _metric_rows(stats, rate):
            if value is not None:
                lines += [f"# HELP localchat_{name} {description}", f"# TYPE localchat_{name} {kind}",
                          f"localchat_{name} {value}"]
        return "\n".join(lines) + "\n"


def _metric_rows(stats: EngineStats, rate: float | None) -> list[tuple[str, str, str, float | None]]:
    """/metrics' rows: (name, kind, description, value); None where the backend does not know it (left out)."""
    kv, speculation, cpu, disk = stats.kv, stats.speculation, stats.cpu, stats.disk
    return [
        ("kv_blocks_total", "gauge", "KV cache blocks in all", kv.total if kv else None),
        ("kv_cache_bytes", "gauge", "memory of the KV cache, resident once each block has been used",
         stats.kv_cache_bytes),
        ("kv_blocks_used", "gauge", "KV cache blocks held by running requests", kv.used if kv else None),
        ("kv_blocks_cached", "gauge", "free KV cache blocks that still hold a cached prefix",
         kv.cached if kv else None),
        ("kv_blocks_free", "gauge", "KV cache blocks not held by any request (cached ones included)",
         kv.free if kv else None),
        ("prefix_hit_rate", "gauge", "share of prompt tokens served from the prefix cache", stats.prefix_hit_rate),
        ("prompt_tokens_total", "counter", "prompt tokens of all requests", stats.prompt_tokens),
        ("cached_prompt_tokens_total", "counter", "prompt tokens served from the prefix cache",
         stats.cached_prompt_tokens),
        ("generated_tokens_total", "counter", "tokens generated", stats.generated_tokens),
        ("generated_tokens_per_second", "gauge", "tokens generated per second since the previous scrape", rate),
        ("requests_running", "gauge", "requests being generated", stats.num_running),
        ("requests_waiting", "gauge", "requests waiting for KV blocks or a batch slot", stats.num_waiting),
        ("preemptions_total", "counter", "requests preempted (recomputed later)", stats.num_preemptions),
        ("draft_tokens_total", "counter", "draft tokens scored (speculative decoding)",
         speculation.drafted if speculation else None),
        ("accepted_draft_tokens_total", "counter", "of the draft tokens scored, those kept",
         speculation.accepted if speculation else None),
        ("cpu_threads", "gauge", "threads the engine's CPU kernels use now (fewer while other processes "
         "keep cores busy)", cpu.threads if cpu else None),
        ("cpu_load_of_others", "gauge", "cores' worth of CPU time that other processes took, last measured",
         cpu.load_of_others if cpu else None),
        ("kv_disk_enabled", "gauge", "1 while the KV cache's disk tier works, 0 once its folder failed",
         disk.enabled if disk else None),
        ("kv_disk_bytes", "gauge", "disk used by the KV cache's disk tier", disk.bytes if disk else None),
        ("kv_disk_limit_bytes", "gauge", "the disk tier's limit", disk.limit_bytes if disk else None),
        ("kv_disk_blocks", "gauge", "KV blocks kept on disk", disk.files if disk else None),
        ("kv_disk_hit_rate", "gauge", "share of the blocks looked up on disk that were read back", stats.disk_hit_rate),
        ("kv_disk_hits_total", "counter", "KV blocks read back from disk", disk.hits if disk else None),
        ("kv_disk_written_total", "counter", "KV blocks written to disk", disk.written if disk else None),
        ("kv_disk_failed_checks_total", "counter", "KV block files that failed their check (recomputed)",
         disk.failed_checks if disk else None),
    ]


class AuthController(Controller):
    @post("/api/auth/login-code")
    async def login_code(self, request: Request, codes: NamedDependency[LoginCodes]) -> LoginCode:
        """A one-time code for the browser's login URL (`localchat web` asks for one)."""
        code = codes.issue()
        base = str(request.base_url).rstrip("/")
        return LoginCode(code=code, url=f"{base}/auth?code={code}", expires_in_s=LOGIN_CODE_TTL_S)

    @get("/auth", include_in_schema=False)  # the browser's login link, a page like / and /static: not the API
    async def login(self, codes: NamedDependency[LoginCodes], sessions: NamedDependency[BrowserSessions],
                    code: FromQuery[str]) -> Response:
        """Trade a one-time code for a browser session cookie, then open the app."""
        if not codes.redeem(code):
            return signin_failed_page()  # a person reads this: a page that says what to run, not JSON
        cookie = Cookie(key=COOKIE_NAME, value=sessions.create(), httponly=True, samesite="strict", path="/",
                        max_age=int(sessions.ttl_s))
        return Redirect("/", cookies=[cookie], status_code=303)

    @post("/api/auth/logout", status_code=200)
    async def logout(self, request: Request, sessions: NamedDependency[BrowserSessions]) -> Response:
        """End this browser's session."""
        sessions.revoke(cookie_value(request.headers.get("cookie", "")) or "-")
        return Response(SessionsRevoked(revoked=1), cookies=[Cookie(key=COOKIE_NAME, value="", max_age=0, path="/")])

    @delete("/api/auth/sessions", status_code=200)
    async def revoke_sessions(self, sessions: NamedDependency[BrowserSessions]) -> SessionsRevoked:
        """End every browser session (`localchat logout`); each browser needs a new login link."""
        return SessionsRevoked(revoked=sessions.revoke())


def engine_limits() -> Limits:
    """The engine's sampling limits (sampling_params.LIMITS and friends) as GET /api/limits answers them."""
    return Limits(sampling={name: Limit(low, high) for name, (low, high) in LIMITS.items()},
                  min_temperature=MIN_TEMPERATURE, max_stop_strings=MAX_STOP_STRINGS,
                  max_document_bytes=MAX_DOCUMENT_BYTES, max_documents=MAX_DOCUMENTS,
                  max_instruction_chars=MAX_INSTRUCTION_CHARS)


class LimitsController(Controller):
    @get("/api/limits")
    async def limits(self) -> Limits:
        """The range of every sampling setting, for the UIs (the server refuses values outside them)."""
        return engine_limits()


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
    if error.status_code >= 500:
        return _unexpected_error(request, error)
    response = _error(error.status_code, "invalid_request_error", error_message(error))
    response.headers.update(error.headers or {})  # a 405's Allow, a 401's WWW-Authenticate
    return response


# the routes whose requests need the model: after keep_alive unloaded it (Ollama's API), one waits while it loads
NEEDS_THE_MODEL = ("/v1/", "/api/conversations", "/api/documents")


async def _before_request(request: Request) -> Response | None:
    """Load a model that keep_alive unloaded for a request that needs it (it waits, as an Ollama request does), and
    answer OPTIONS with every method of the route: Litestar 2's own answer names only those of the handlers
    registered first on a path (litestar#4169, fixed in Litestar 3)."""
    backend = request.app.state["backend"]
    if backend.unloaded and request.url.path.startswith(NEEDS_THE_MODEL):
        await backend.loaded()
    if request.method != "OPTIONS":
        return None
    route = next(r for r in request.app.routes
                 if isinstance(r, HTTPRoute) and r.path_format == request.scope["path_template"])
    return Response(None, status_code=204, headers={"Allow": ", ".join(sorted(route.methods))})


def _unexpected_error(request: Request, error: Exception) -> Response:
    """A bug: logged with its traceback; the client learns nothing of the server's internals."""
    log.error("%s %s failed", request.method, request.url.path, exc_info=error)
    return _error(500, "server_error", "the server failed to answer this request (the engine log has the details)")


# every route's error answers, as the OpenAPI schema documents them: one body, ErrorBody
ERROR_RESPONSES = {status: ResponseSpec(ErrorBody, description=description) for status, description in [
    (400, "invalid request: the message names the problem"), (401, "no or a wrong API token"),
    (403, "a foreign Host header, or a cross-origin browser request"), (404, "no such conversation, message or model"),
    (405, "method not allowed (the Allow header lists those that are)"),
    (409, "the request conflicts with what is running or kept (a model still loading, a document in use)"),
    (413, "request body too large"),
    (415, "a JSON body sent with another Content-Type than application/json, or an upload that is not a readable "
          "document (an image, a binary file)"),
    (500, "a bug: the engine log has the details"), (503, "the model is loading, failed, or the engine is stopping"),
]}

# Ollama's routes answer errors in its shape (ollama_api.py)
OLLAMA_ERROR_RESPONSES = {status: ResponseSpec(ollama.Error, description=spec.description)
                          for status, spec in ERROR_RESPONSES.items()} | {
    501: ResponseSpec(ollama.Error, description="the engine relays to another server (--engine-url)")}

EXCEPTION_HANDLERS = {
    HTTPException: _http_error,
    StoreError: lambda request, error: _error(404, "not_found", str(error)),
    BackendNotReady: lambda request, error: _error(503, "unavailable", str(error)),
    BackendRequestError: lambda request, error: _error(error.status, "invalid_request_error", str(error)),
    msgspec.ValidationError: lambda request, error: _error(400, "invalid_request_error", str(error)),
    Exception: _unexpected_error,
}


@dataclass
class ServerParts:
    """What the server's handlers share (each one a dependency by its field's name), and its start and end."""

    config: ServerConfig
    store: Store
    backend: Backend
    active: ActiveRequests
    conversations: Conversations
    turns: ModelTurns
    codes: LoginCodes
    sessions: BrowserSessions
    throughput: Throughput
    pulls: ModelPulls

    @classmethod
    def build(cls, settings: ServerConfig, backend: Backend, store: Store) -> "ServerParts":
        active = ActiveRequests()
        conversations = Conversations(store, backend, active, settings.thinking_token_budget,
                                      settings.context_overflow)
        return cls(settings, store, backend, active, conversations, ModelTurns(backend, conversations, active),
                   LoginCodes(), BrowserSessions(store), Throughput(), ModelPulls())

    def dependencies(self) -> dict[str, Provide]:
        return {f.name: _provided(getattr(self, f.name)) for f in fields(self)}

    async def stop_all(self) -> None:
        """Refuse new requests and end the running ones (each stream finishes with "abort")."""
        self.backend.stopping = True
        await self.conversations.stop_all()

    async def on_startup(self, app: Litestar) -> None:
        interrupted = self.store.mark_interrupted()
        if interrupted:
            log.warning("%d replies were being written when the engine last stopped; kept as interrupted",
                        interrupted)
        self.backend.start()
        self.conversations.warmth.start_watching()

    async def on_shutdown(self, app: Litestar) -> None:
        self.conversations.warmth.stop_watching()
        await self.stop_all()
        await self.backend.close()
        self.store.close()


def _provided(value) -> Provide:
    return Provide(lambda: value, sync_to_thread=False, use_cache=True)


def create_app(settings: ServerConfig | None = None, *, backend: Backend | None = None, store: Store | None = None,
               token: str | None = None) -> Litestar:
    settings = settings or ServerConfig()
    parts = ServerParts.build(settings, backend if backend is not None else make_backend(settings),
                              store if store is not None else Store(paths.db_path()))
    token = token if token is not None else paths.load_or_create_token()
    dependencies = parts.dependencies()
    app = Litestar(
        route_handlers=[SystemController, AuthController, LimitsController, ModelsController,
                        OpenAIRelay if parts.backend.relays_openai else OpenAIController,
                        ConversationController, ConversationDefaultsController, SearchController, DocumentController,
                        OllamaController,
                        *webui_routes],
        dependencies=dependencies,
        middleware=[DefineMiddleware(SecurityMiddleware, token=token, sessions=parts.sessions,
                                     allowed_hosts=settings.allowed_hosts, allowed_origins=settings.allowed_origins)],
        exception_handlers=EXCEPTION_HANDLERS,
        before_request=_before_request,
        request_class=JSONBodyRequest,
        plugins=[StructSchemas()],
        on_startup=[parts.on_startup],
        on_shutdown=[parts.on_shutdown],
        state=State({"stop_all": parts.stop_all, "store": parts.store, "backend": parts.backend,
                     "ollama_listener": _ollama_listener(settings, dependencies) if settings.ollama_port else None}),
        request_max_body_size=MAX_REQUEST_BYTES,
        logging_config=None,  # `localchat serve` sets up logging (process.serve); _unexpected_error logs 500s
        # the schema is under /api: it needs the token, like everything it describes
        openapi_config=OpenAPIConfig(title="localchat", version=VERSION, path="/api/openapi",
                                     render_plugins=[JsonRenderPlugin()]),
    )
    _document_errors(app)
    return app


def _document_errors(app: Litestar) -> None:
    """Every route's error responses in the schema: Ollama's shape on its paths, OpenAI's elsewhere."""
    for route in app.routes:
        errors = OLLAMA_ERROR_RESPONSES if route.path in ollama.PATHS else ERROR_RESPONSES
        for handler in getattr(route, "route_handlers", ()):
            handler.responses = {**errors, **(handler.responses or {})}


def _ollama_listener(settings: ServerConfig, dependencies: dict) -> Litestar:
    """The app of the tokenless listener on settings.ollama_port: Ollama's API alone, on the main app's engine and
    state (security.py says why it may go without the token)."""
    return Litestar(route_handlers=[OllamaController, listener_root], dependencies=dependencies,
                    middleware=[DefineMiddleware(OllamaListenerGuard, allowed_hosts=settings.allowed_hosts)],
                    request_class=JSONBodyRequest, request_max_body_size=MAX_REQUEST_BYTES, logging_config=None,
                    openapi_config=None)
