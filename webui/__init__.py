"""The browser UI, served by the engine process (app.server mounts `route_handlers`)."""

from localchat.webui.routes import route_handlers

__all__ = ["route_handlers"]
