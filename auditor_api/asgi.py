"""The skeleton of this API's ASGI middleware (``guards.py``, ``problems.py``): each acts on
HTTP requests only and passes anything else (lifespan, websockets) through untouched; a
guard that health must pass whatever happens (``/healthz``, ``/readyz``) says so."""

from __future__ import annotations

from starlette.types import ASGIApp, Receive, Scope, Send

__all__ = ["HttpMiddleware", "HEALTH_PATHS", "route_path"]

#: answered whatever the Host and however busy the API is
HEALTH_PATHS = frozenset({"/healthz", "/readyz"})


def route_path(scope: Scope) -> str:
    """The request's path as the routes know it: without the root path (``api.root_path``)
    that uvicorn puts in front of the path it received."""
    path, root = scope["path"], scope.get("root_path", "")
    if root and (path == root or path.startswith(root + "/")):
        return path[len(root):] or "/"
    return path


class HttpMiddleware:
    """Calls :meth:`http` for an HTTP request, the app itself for anything else (and for
    health, when ``spares_health``)."""

    spares_health = False

    def __init__(self, app: ASGIApp) -> None:
        self.app = app

    async def __call__(self, scope: Scope, receive: Receive, send: Send) -> None:
        if scope["type"] != "http" or (self.spares_health and route_path(scope) in HEALTH_PATHS):
            await self.app(scope, receive, send)
            return
        await self.http(scope, receive, send)

    async def http(self, scope: Scope, receive: Receive, send: Send) -> None:
        raise NotImplementedError
