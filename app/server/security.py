"""Who may talk to the engine process. The chats are private, and every web page the user opens can send
requests to a port on 127.0.0.1, so:

- a Host header that is not a loopback name (or the configured host) is refused: DNS rebinding;
- /v1 and /api need the API token as `Authorization: Bearer`, or a browser session: the cookie that the
  one-time login URL sets (HttpOnly, SameSite=Strict). The cookie holds a session value of its own, never the
  token: it expires after SESSION_TTL_S and `localchat logout` (or the page's sign-out) revokes it;
- a state-changing request authenticated by that cookie must carry an Origin of this server.

Ollama's API (ollama_api.py) is under /api like the rest: the token (`Authorization: Bearer`, which Ollama's clients
can send) or a browser session. For clients that cannot send a header, `serve --ollama-port 11434` opens a second
listener on loopback with Ollama's API alone and no token (OllamaListenerGuard): inference and the model list, never
conversations, documents or settings; the same Host check; and closed to web pages: a request that a browser sends
(it carries Origin or Sec-Fetch-Site) is refused, so no page the user opens can prompt the model or read the model
list. Any program of any local user can use it while it is on: it is off unless asked for.
"""

import hashlib
import hmac
import re
import secrets
import time

import msgspec
from litestar.types import ASGIApp, Receive, Scope, Send

from localchat.app.protocol import ollama
from localchat.app.protocol.system import ErrorBody, ErrorDetail
from localchat.app.server.store import Store

COOKIE_NAME = "localchat_session"
PROTECTED_PREFIXES = ("/v1", "/api")
SAFE_METHODS = ("GET", "HEAD", "OPTIONS")
LOGIN_CODE_TTL_S = 120
SESSION_TTL_S = 14 * 24 * 3600



class LoginCodes:
    """One-time codes for the browser's login URL: each opens one cookie session, within a short time."""

    def __init__(self, ttl_s: float = LOGIN_CODE_TTL_S):
        self.ttl_s = ttl_s
        self.codes: dict[str, float] = {}

    def issue(self) -> str:
        now = time.monotonic()
        self.codes = {c: t for c, t in self.codes.items() if t > now}
        code = secrets.token_urlsafe(24)
        self.codes[code] = now + self.ttl_s
        return code

    def redeem(self, code: str) -> bool:
        expires = self.codes.pop(code, None)
        return expires is not None and expires > time.monotonic()


class BrowserSessions:
    """The browser's sessions, kept in the store by the SHA-256 of their value (a stolen database gives no
    usable cookie)."""

    def __init__(self, store: Store, ttl_s: float = SESSION_TTL_S):
        self.store, self.ttl_s = store, ttl_s

    def create(self) -> str:
        value = secrets.token_urlsafe(32)
        self.store.add_session(_digest(value), time.time() + self.ttl_s)
        return value

    def valid(self, value: str) -> bool:
        if not value:
            return False
        expires_at = self.store.session_expiry(_digest(value))
        return expires_at is not None and expires_at > time.time()

    def revoke(self, value: str | None = None) -> int:
        """One session, or every session (None). How many there were."""
        return self.store.delete_sessions(None if value is None else _digest(value))


def _digest(value: str) -> str:
    return hashlib.sha256(value.encode()).hexdigest()


_HOST = re.compile(r"(\[(?P<ipv6>[0-9a-f:.]+)\]|(?P<name>[^:\[\]]*))(:\d{1,5})?")


def host_name(host_header: str) -> str:
    """`127.0.0.1:8741` -> `127.0.0.1`, `[::1]:8741` -> `::1`; "" for anything that is not one host and an
    optional port (`[::1].evil.example`)."""
    match = _HOST.fullmatch(host_header.strip().lower())
    if match is None:
        return ""
    return match["ipv6"] or match["name"] or ""


class SecurityMiddleware:
    """Plain ASGI middleware in front of every route."""

    def __init__(self, app: ASGIApp, token: str, sessions: BrowserSessions, allowed_hosts: tuple[str, ...],
                 allowed_origins: tuple[str, ...]):
        self.app, self.token, self.sessions = app, token, sessions
        self.allowed_hosts = {h.lower() for h in allowed_hosts}
        self.allowed_origins = set(allowed_origins)

    async def __call__(self, scope: Scope, receive: Receive, send: Send) -> None:
        if scope["type"] not in ("http", "websocket"):
            return await self.app(scope, receive, send)
        headers = {k.decode("latin-1").lower(): v.decode("latin-1") for k, v in scope["headers"]}
        websocket = scope["type"] == "websocket"
        path = scope["path"]
        shape = "ollama" if path in ollama.PATHS else "openai"
        if host_name(headers.get("host", "")) not in self.allowed_hosts:
            return await _refuse(send, 403, "forbidden", "this server answers only to a loopback Host header",
                                 websocket, shape)
        if any(path == p or path.startswith(p + "/") for p in PROTECTED_PREFIXES):
            # a websocket is state-changing: with the cookie it needs this server's Origin, as a POST does
            refusal = self.check_auth("WEBSOCKET" if websocket else scope["method"], headers)
            if refusal is not None:
                return await _refuse(send, *refusal, websocket, shape)
        return await self.app(scope, receive, send)

    def check_auth(self, method: str, headers: dict[str, str]) -> tuple[int, str, str] | None:
        scheme, _, credential = headers.get("authorization", "").partition(" ")
        if scheme.lower() == "bearer" and credential:
            if hmac.compare_digest(credential.strip().encode(), self.token.encode()):
                return None
            return 401, "unauthorized", "wrong API token (see `localchat token`)"
        if self.sessions.valid(cookie_value(headers.get("cookie", ""))):
            if method in SAFE_METHODS or headers.get("origin") in self.allowed_origins:
                return None
            return 403, "forbidden", "cross-origin request refused (the Origin header must be this server)"
        return 401, "unauthorized", ("an API token is required: Authorization: Bearer <token> (see `localchat token`), "
                                      "or a browser session (`localchat web` signs in)")


def cookie_value(header: str) -> str:
    """The session cookie's value in a Cookie header, or ""."""
    for part in header.split(";"):
        key, _, value = part.strip().partition("=")
        if key == COOKIE_NAME:
            return value
    return ""


class OllamaListenerGuard:
    """ASGI middleware of the tokenless Ollama listener (see the module docstring): the Host check, and no request
    from a web page."""

    def __init__(self, app: ASGIApp, allowed_hosts: tuple[str, ...]):
        self.app, self.allowed_hosts = app, {h.lower() for h in allowed_hosts}

    async def __call__(self, scope: Scope, receive: Receive, send: Send) -> None:
        if scope["type"] == "lifespan":
            return await self.app(scope, receive, send)
        headers = {k.decode("latin-1").lower(): v.decode("latin-1") for k, v in scope["headers"]}
        if scope["type"] != "http":
            return await _refuse(send, 403, "forbidden", "this listener serves Ollama's HTTP API only", True)
        if host_name(headers.get("host", "")) not in self.allowed_hosts:
            return await _refuse(send, 403, "forbidden", "this server answers only to a loopback Host header",
                                 shape="ollama")
        if "origin" in headers or headers.get("sec-fetch-site", "none") != "none":
            return await _refuse(send, 403, "forbidden", "web pages may not use this listener (it has no token); "
                                 "a browser app must use the main port with a token", shape="ollama")
        return await self.app(scope, receive, send)


async def _refuse(send: Send, status: int, kind: str, message: str, websocket: bool = False,
                  shape: str = "openai") -> None:
    """An error answer before any route runs, in the shape of the API asked: OpenAI's (localchat's own), or
    Ollama's `{"error": "..."}`."""
    if websocket:
        await send({"type": "websocket.close", "code": 1008, "reason": message})
        return
    error = ollama.Error(message) if shape == "ollama" else ErrorBody(ErrorDetail(message=message, type=kind,
                                                                                 code=status))
    body = msgspec.json.encode(error)
    headers = [(b"content-type", b"application/json"), (b"content-length", str(len(body)).encode())]
    if status == 401:
        headers.append((b"www-authenticate", b'Bearer realm="localchat"'))
    await send({"type": "http.response.start", "status": status, "headers": headers})
    await send({"type": "http.response.body", "body": body})
