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
each commit.
"""

from __future__ import annotations

import asyncio
import threading
from collections import OrderedDict

from starlette.types import ASGIApp, Message, Receive, Scope, Send

from kafka_audit.auditor_api.snapshots import answering_stale
from kafka_audit.schemas.tables import TABLES

__all__ = ["ResponseCache"]

#: answers kept at most (one per distinct path and query), and the largest one kept
MAX_ENTRIES = 1024
MAX_BODY = 4 << 20


class ResponseCache:
    def __init__(self, app: ASGIApp, fastapi_app) -> None:
        self.app = app
        self.fastapi_app = fastapi_app
        self.entries: OrderedDict[tuple, tuple] = OrderedDict()
        self.lock = threading.Lock()
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
                or not scope["path"].startswith("/v1/")):
            await self.app(scope, receive, send)
            return
        key = (scope["path"], scope.get("query_string", b""))
        versions = self._versions()
        hit = self.entries.get(key)
        if hit is not None and hit[0] == versions:
            self.hits += 1
            await send({"type": "http.response.start", "status": 200, "headers": hit[1]})
            await send({"type": "http.response.body", "body": hit[2]})
            return
        flight = (key, versions)
        leader = self.flights.get(flight)
        if leader is not None:
            answer = await asyncio.shield(leader)
            if answer is not None:
                self.shared += 1
                await send({"type": "http.response.start", "status": 200,
                            "headers": answer[0]})
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
                start.update(message)
            elif message["type"] == "http.response.body":
                chunks.append(message.get("body", b""))
                if not message.get("more_body") and start.get("status") == 200:
                    body = b"".join(chunks)
                    headers = list(start.get("headers", []))
                    if not done.done():
                        done.set_result((headers, body))
                    if not stale[0] and len(body) <= MAX_BODY:
                        with self.lock:
                            self.entries[key] = (versions, headers, body)
                            self.entries.move_to_end(key)
                            while len(self.entries) > MAX_ENTRIES:
                                self.entries.popitem(last=False)
            await send(message)

        await self.app(scope, receive, keeping)
