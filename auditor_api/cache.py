"""Answers kept per table version: a repeated ``GET /v1/...`` is served from memory.

Every ``/v1`` answer is a function of the request (path and query) and of the
tables' versions, nothing else (no clock: health and ``/metrics`` are not cached).
This ASGI middleware keeps each 200 answer with the versions of every table it was
computed against; the same request is answered from memory while none of them
changed (the version check is the snapshots' two ``stat`` calls per table). An answer
computed from a version held while a newer one was being read is sent, not kept. It sits
inside the token check, so nothing is served to a request that would be refused.

**One computation per answer:** requests for the same path and query at the same
versions that arrive while the first of them is being computed wait for its answer and
are sent it. Without that, a commit (which makes every kept answer stale) sent every
request in flight to compute its own copy, each slowing the others down: under
``bench/api_bench.py --churn`` the slow requests came in bursts of half a second after
each commit. Each computation leaves the map of those in flight when it ends, answered or
not: the map holds the requests being computed now, nothing more. An answer computed
from older versions than the one kept (two computations of one request, ending out of
order) is sent, not kept: the answers to one request never step back.

**Bounded by bytes:** the answers kept weigh at most ``api.response_cache_max_mb`` in all
(the least recently used go first); one larger than a quarter of that is sent, not kept.
A count of answers bounded nothing: a thousand 4 MB pages of findings are 4 GB.
"""

from __future__ import annotations

import asyncio
from collections import OrderedDict

from starlette.types import ASGIApp, Message, Receive, Scope, Send

from kafka_audit.auditor_api.asgi import route_path
from kafka_audit.auditor_api.snapshots import answering_stale
from kafka_audit.schemas.tables import TABLES

__all__ = ["ResponseCache"]

#: what an answer kept weighs beside its body (its key, headers and versions), roughly
ENTRY_OVERHEAD = 512


def _at_least(a: tuple, b: tuple) -> bool:
    """Whether versions ``a`` (warehouse, then each table's) are as new as ``b`` or newer,
    table by table."""
    return a[0] == b[0] and all(x >= y for x, y in zip(a[1:], b[1:], strict=True))


def _weight(key: tuple, headers: list, body: bytes) -> int:
    return (len(body) + len(key[0]) + len(key[1]) + ENTRY_OVERHEAD
            + sum(len(k) + len(v) for k, v in headers))


class ResponseCache:
    def __init__(self, app: ASGIApp, fastapi_app, max_bytes: int = 64 << 20) -> None:
        self.app = app
        self.fastapi_app = fastapi_app
        #: (path, query) -> (versions, headers, body, weight), the least recently used first
        self.entries: OrderedDict[tuple, tuple] = OrderedDict()
        self.max_bytes = max_bytes
        self.max_entry = max_bytes // 4
        self.bytes = 0  # what the entries weigh
        #: (request, versions) being computed -> the future of its answer (None: not shared)
        self.flights: dict[tuple, asyncio.Future] = {}
        self.hits = self.misses = self.shared = 0

    def _versions(self) -> tuple:
        from kafka_audit.auditor_api.deps import snapshots_for, warehouse_of
        from kafka_audit.settings import get_settings

        app = self.fastapi_app
        settings = app.dependency_overrides.get(get_settings, get_settings)()
        snaps = snapshots_for(app, settings)
        return (warehouse_of(settings), *(snaps.version(t) for t in TABLES))

    async def __call__(self, scope: Scope, receive: Receive, send: Send) -> None:
        if (scope["type"] != "http" or scope.get("method") != "GET"
                or not route_path(scope).startswith("/v1/")):
            await self.app(scope, receive, send)
            return
        key = (scope["path"], scope.get("query_string", b""))
        versions = self._versions()
        hit = self.entries.get(key)
        if hit is not None and hit[0] == versions:
            self.hits += 1
            self.entries.move_to_end(key)
            # a copy of the headers: a middleware outside (gzip) may change them in place
            await send({"type": "http.response.start", "status": 200,
                        "headers": list(hit[1])})
            await send({"type": "http.response.body", "body": hit[2]})
            return
        flight = (key, versions)
        leader = self.flights.get(flight)
        if leader is not None:
            answer = await asyncio.shield(leader)
            if answer is not None:
                self.shared += 1
                await send({"type": "http.response.start", "status": 200,
                            "headers": list(answer[0])})
                await send({"type": "http.response.body", "body": answer[1]})
                return
        self.misses += 1
        done = asyncio.get_running_loop().create_future()
        if leader is None:
            self.flights[flight] = done
        try:
            await self._compute(scope, receive, send, key, versions, done)
        finally:
            if not done.done():
                done.set_result(None)
            if self.flights.get(flight) is done:
                del self.flights[flight]

    async def _compute(self, scope: Scope, receive: Receive, send: Send, key: tuple,
                       versions: tuple, done: asyncio.Future) -> None:
        """The app's answer, sent; kept when it is a 200 from the current versions, and
        given to the requests waiting on ``done`` when it is a 200."""
        stale = answering_stale()  # answered from a version older than ``versions``: not kept
        start: dict = {}
        chunks: list[bytes] = []

        async def keeping(message: Message) -> None:
            if message["type"] == "http.response.start":
                start.update(message, headers=list(message.get("headers", [])))  # as sent
            elif message["type"] == "http.response.body":
                chunks.append(message.get("body", b""))
                if not message.get("more_body") and start.get("status") == 200:
                    body = b"".join(chunks)
                    headers = list(start.get("headers", []))
                    if not done.done():
                        done.set_result((headers, body))
                    if not stale[0]:
                        self._keep(key, versions, headers, body)
            await send(message)

        await self.app(scope, receive, keeping)

    def _keep(self, key: tuple, versions: tuple, headers: list, body: bytes) -> None:
        """Keep an answer (replacing the one for older versions), then let the least
        recently used go until the entries weigh at most ``max_bytes``."""
        weight = _weight(key, headers, body)
        held = self.entries.get(key)
        if held is not None and held[0] != versions and _at_least(held[0], versions):
            return  # a computation that began earlier ended later: the newer answer stays
        old = self.entries.pop(key, None)
        if old is not None:
            self.bytes -= old[3]
        if weight > self.max_entry:
            return
        self.entries[key] = (versions, list(headers), body, weight)
        self.bytes += weight
        while self.bytes > self.max_bytes:
            self.bytes -= self.entries.popitem(last=False)[1][3]
