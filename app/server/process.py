"""`localchat serve`: the engine process's life from its side. One per user (a lock), a state file that tells
clients where it listens, logging, and a clean stop on SIGTERM (the client side: client/engine_process.py).
"""

import asyncio
import contextlib
import dataclasses
import errno
import logging
import os
import socket
import sys
import time
from collections.abc import Callable

import uvicorn

from localchat.app import engine_state, paths
from localchat.app.engine_state import EngineState
from localchat.app.server.config import DEFAULT_HOST, GRACEFUL_SHUTDOWN_S, ServerConfig

PORT_TRIES = 10  # a taken default port: these ports from it on are tried, then any free one


class ListenerServer(uvicorn.Server):
    """A second port's server: the engine's EngineServer takes the signals and stops it."""

    @contextlib.contextmanager
    def capture_signals(self):
        yield


class EngineServer(uvicorn.Server):
    """uvicorn's server; on SIGTERM or SIGINT it first ends the running requests (their streams finish with
    "abort" and the replies are stored as stopped), then shuts down as usual and exits with status 0."""

    def __init__(self, config: uvicorn.Config, stop_all: Callable):
        super().__init__(config)
        self.stop_all = stop_all
        self.listeners: list[uvicorn.Server] = []  # the servers of the app's other ports, which stop with it

    def handle_exit(self, sig, frame) -> None:
        if self.should_exit:
            self.force_exit = True
            return
        self.should_exit = True
        for listener in self.listeners:
            listener.should_exit = True
        try:
            loop = asyncio.get_running_loop()
        except RuntimeError:
            return
        loop.call_soon_threadsafe(lambda: loop.create_task(self.stop_all()))


def serve(settings: ServerConfig, port_named: bool = True) -> None:
    """Run the engine process in the foreground until SIGTERM/SIGINT (or `localchat stop`). Everything it writes is
    the user's alone, whatever the umask: chats, their KV blocks on disk, the model cache, logs. A port the user
    named (--port) that is taken is an error; the default port, taken, gives way to a free one (_bind_free), which
    the state file tells clients."""
    os.umask(0o077)
    logging.basicConfig(level=logging.WARNING, stream=sys.stderr,
                        format="%(asctime)s %(levelname)s %(name)s: %(message)s")
    logging.getLogger("localchat").setLevel(logging.INFO)
    lock = engine_state.acquire_lock()
    try:
        sock = _bind(settings.host, settings.port) if port_named else _bind_free(settings)
        if sock.getsockname()[1] != settings.port:
            print(f"localchat: port {settings.port} on {settings.host} is taken by another program; serving on "
                  f"port {sock.getsockname()[1]} instead (clients find it in {paths.state_path()})",
                  file=sys.stderr, flush=True)
            settings = dataclasses.replace(settings, port=sock.getsockname()[1])  # the origins the app allows
        print(f"localchat: serving on {settings.url}", file=sys.stderr, flush=True)
        from localchat.app.server.app import create_app  # imports the engine (torch): after the quick checks

        app = create_app(settings)
        config = uvicorn.Config(app, log_level="warning", access_log=False, lifespan="on",
                                timeout_graceful_shutdown=GRACEFUL_SHUTDOWN_S)
        server = EngineServer(config, app.state["stop_all"])
        serving = [server.serve(sockets=[sock])]
        if settings.ollama_port:
            listener_sock = _bind(DEFAULT_HOST, settings.ollama_port, "--ollama-port")
            print(f"localchat: Ollama's API without the token on http://{DEFAULT_HOST}:{settings.ollama_port} "
                  "(inference only)", file=sys.stderr, flush=True)
            listener = ListenerServer(uvicorn.Config(app.state["ollama_listener"], log_level="warning",
                                                     access_log=False, lifespan="off",
                                                     timeout_graceful_shutdown=GRACEFUL_SHUTDOWN_S))
            server.listeners = [listener]
            serving.append(listener.serve(sockets=[listener_sock]))
        engine_state.write_state(EngineState(pid=os.getpid(), host=settings.host, port=settings.port,
                                             url=settings.url, started_at=time.time(),
                                             backend="remote" if settings.engine_url else "embedded"))
        try:
            asyncio.run(_serve_all(serving))
        finally:
            engine_state.remove_state()
    finally:
        os.close(lock)


async def _serve_all(servers) -> None:
    await asyncio.gather(*servers)


class PortTaken(RuntimeError):
    pass


def _bind_free(settings: ServerConfig) -> socket.socket:
    """A socket on the default port, or if another program has it, on one of the PORT_TRIES ports after it, or else
    on any free port (the system's choice), as Jupyter does: the engine a client starts in the background must not
    fail for a port nobody named."""
    candidates = [p for p in range(settings.port, settings.port + PORT_TRIES) if p != settings.ollama_port]
    for port in candidates:
        try:
            return _bind(settings.host, port)
        except PortTaken:
            continue
    return _bind(settings.host, 0)


def _bind(host: str, port: int, flag: str = "--port") -> socket.socket:
    family = socket.AF_INET6 if ":" in host else socket.AF_INET
    sock = socket.socket(family, socket.SOCK_STREAM)
    sock.setsockopt(socket.SOL_SOCKET, socket.SO_REUSEADDR, 1)
    try:
        sock.bind((host.strip("[]"), port))
    except OSError as error:
        sock.close()
        if error.errno == errno.EADDRINUSE:
            raise PortTaken(f"port {port} on {host} is in use by another program; pick one with {flag}") from None
        raise RuntimeError(f"cannot listen on {host}:{port}: {error.strerror}") from None
    sock.listen(128)
    sock.set_inheritable(True)
    return sock
