"""What every request passes before a route: its Host name, the concurrency limit, and the
headers every answer carries. ASGI middleware, wired by ``main.py``.

* :class:`AllowedHosts`: a request whose ``Host`` is not one of ``api.allowed_hosts``
  (``server.allowed_hosts``) is a 400 problem. Starlette's ``TrustedHostMiddleware``
  decides (its parsing of ``Host``, IPv6 brackets and ``*.`` patterns); only its plain-text
  refusal is replaced by this API's problem+json. Health answers any name: orchestrators
  probe a container by its IP, and health says nothing of the audit without a token.
* :class:`ConcurrencyLimit`: at most ``api.max_concurrent_requests`` requests are served
  at once; one more is a 503 problem with ``Retry-After`` at once. Queued instead, a burst
  of slow requests (a timeline each) piled up behind the threads the sync routes share
  and every request after them waited, health's included.
* :class:`HeadAsGet`: ``HEAD`` on any path answers what ``GET`` would, headers only
  (FastAPI's routes answer a ``HEAD`` with 405: load balancers' and uptime monitors'
  probes, ``curl -I``, failed);
* :class:`SecurityHeaders`: ``X-Content-Type-Options: nosniff`` on every answer (a JSON
  answer holding a record's text is never sniffed into a page), and a
  ``Content-Security-Policy`` that lets nothing run on answers that set none (JSON,
  problems); the pages set their own (``routes/dashboard.py``, ``routes/docs.py``).
"""

from __future__ import annotations

from starlette.datastructures import Headers, MutableHeaders
from starlette.middleware.trustedhost import TrustedHostMiddleware
from starlette.types import ASGIApp, Message, Receive, Scope, Send

from kafka_audit.auditor_api.asgi import HEALTH_PATHS, HttpMiddleware
from kafka_audit.auditor_api.problems import BAD_HOST, OVERLOADED, problem

__all__ = ["AllowedHosts", "ConcurrencyLimit", "SecurityHeaders", "HeadAsGet",
           "HEALTH_PATHS", "NO_CONTENT_POLICY"]

#: the policy of an answer that is not a page: nothing in it may load or run
NO_CONTENT_POLICY = "default-src 'none'; frame-ancestors 'none'"
_ALLOWED = "kafka_audit.host_allowed"  # set in the scope by the check when it passes


class AllowedHosts(HttpMiddleware):
    """400 for a ``Host`` not among ``allowed`` (see the module's docstring)."""

    spares_health = True

    def __init__(self, app: ASGIApp, allowed: list[str]) -> None:
        super().__init__(app)
        self.allowed = list(allowed)
        self.check = TrustedHostMiddleware(self._passed, allowed_hosts=self.allowed,
                                           www_redirect=False)

    async def _passed(self, scope: Scope, receive: Receive, send: Send) -> None:
        scope[_ALLOWED] = True
        await self.app(scope, receive, send)

    async def http(self, scope: Scope, receive: Receive, send: Send) -> None:
        async def unless_refused(message: Message) -> None:
            if scope.get(_ALLOWED):  # the app's answer; the check's refusal is replaced
                await send(message)

        await self.check(scope, receive, unless_refused)
        if not scope.get(_ALLOWED):
            host = Headers(scope=scope).get("host")
            shown = repr(host[:100]) if host is not None else "no Host header"
            await problem(400, f"this API does not answer to the host name {shown}: it "
                               f"answers to {', '.join(self.allowed)} (api.allowed_hosts)",
                          type_=BAD_HOST, title="Host not allowed")(scope, receive, send)


class ConcurrencyLimit(HttpMiddleware):
    """A 503 problem with ``Retry-After`` for a request beyond ``limit`` in flight (health
    excepted). The count lives on the event loop: no lock needed."""

    spares_health = True

    def __init__(self, app: ASGIApp, limit: int, retry_after_seconds: int = 1) -> None:
        super().__init__(app)
        self.limit = limit
        self.retry_after = str(retry_after_seconds)
        self.in_flight = 0
        self.refused = 0  # for tests and the benchmark

    async def http(self, scope: Scope, receive: Receive, send: Send) -> None:
        if self.in_flight >= self.limit:
            self.refused += 1
            await problem(503, f"the API is serving {self.limit} requests already "
                               f"(api.max_concurrent_requests): try again in "
                               f"{self.retry_after} s", type_=OVERLOADED,
                          headers={"Retry-After": self.retry_after})(scope, receive, send)
            return
        self.in_flight += 1
        try:
            await self.app(scope, receive, send)
        finally:
            self.in_flight -= 1


class SecurityHeaders(HttpMiddleware):
    """``nosniff`` on every answer; a policy that runs nothing on answers without one."""

    async def http(self, scope: Scope, receive: Receive, send: Send) -> None:
        async def with_headers(message: Message) -> None:
            if message["type"] == "http.response.start":
                message.setdefault("headers", [])
                headers = MutableHeaders(scope=message)  # a copy: a cached answer's stays
                headers["X-Content-Type-Options"] = "nosniff"
                if "content-security-policy" not in headers:
                    headers["Content-Security-Policy"] = NO_CONTENT_POLICY
            await send(message)

        await self.app(scope, receive, with_headers)


class HeadAsGet(HttpMiddleware):
    """A ``HEAD`` request served as the ``GET`` it asks about, its body left out (the
    headers, ``Content-Length`` included, are the ``GET``'s, as RFC 9110 allows). The
    scope passed on is a copy: middleware outside this one (the request metrics) still
    sees ``HEAD``."""

    async def http(self, scope: Scope, receive: Receive, send: Send) -> None:
        if scope["method"] != "HEAD":
            await self.app(scope, receive, send)
            return

        async def headers_only(message: Message) -> None:
            if message["type"] == "http.response.body":
                if message.get("more_body", False):
                    return  # the body's parts are dropped; its end is sent, empty
                message = {"type": "http.response.body", "body": b"", "more_body": False}
            await send(message)

        inner = {**scope, "method": "GET"}
        await self.app(inner, receive, headers_only)
        if "route" in inner:  # the route the router matched, for the request metrics
            scope["route"] = inner["route"]
