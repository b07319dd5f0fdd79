"""The FastAPI app: wires the routers and middleware, nothing else. Run: ``kafka-audit serve``.

Every /v1 route refuses query parameters it does not declare, and every error is a
problem+json body (``problems.py``). With ``api.tokens`` set, every path but health and
the dashboard's static page needs a bearer token (``auth.py``); without, the API is
open and says so when it starts (and refuses to start beyond loopback: ``server.py``).
A request must name an allowed host, and beyond ``api.max_concurrent_requests`` in
flight it is a 503 (``guards.py``); answers are gzipped for clients that accept it.
``/metrics`` is for Prometheus (``metrics.py``), ``/dashboard`` for people, ``/docs`` and
``/redoc`` for developers (served from packaged assets, no CDN). ``app`` is created on
first use (``create_app()`` reads the settings for the limits and tokens it is built
with).
"""

from __future__ import annotations

import logging
from contextlib import asynccontextmanager
from typing import Any

from fastapi import Depends, FastAPI
from prometheus_client import CollectorRegistry
from starlette.middleware.gzip import GZipMiddleware

from kafka_audit import __version__
from kafka_audit.auditor_api import problems
from kafka_audit.auditor_api.auth import BearerAuth, is_open
from kafka_audit.auditor_api.cache import ResponseCache
from kafka_audit.auditor_api.guards import (
    AllowedHosts,
    ConcurrencyLimit,
    HeadAsGet,
    SecurityHeaders,
)
from kafka_audit.auditor_api.metrics import RequestMetrics
from kafka_audit.auditor_api.params import declared_query_only
from kafka_audit.auditor_api.routes import (
    dashboard,
    docs,
    findings,
    health,
    latency,
    metrics,
    partitions,
    producers,
    quality,
    suspicions,
    topics,
    windows,
)
from kafka_audit.auditor_api.server import allowed_hosts
from kafka_audit.settings import Settings, get_settings

log = logging.getLogger("kafka_audit.auditor_api")


def create_app(settings: Settings | None = None) -> FastAPI:
    """The app. ``settings``: serve these (tables, limits, tokens) instead of
    :func:`get_settings`'s; without them, the limits and tokens are read now and the tables'
    settings on each request."""
    limits = settings if settings is not None else get_settings()
    tokens = list(limits.api.tokens)

    @asynccontextmanager
    async def lifespan(app: FastAPI):
        if tokens:
            log.warning("API: bearer tokens required (%d configured); /healthz, /readyz and "
                        "/dashboard's page are open", len(tokens))
        else:
            log.warning("API is OPEN: no api.tokens configured, anyone who reaches it reads "
                        "the audit (fine for the local demo; `kafka-audit token new` makes "
                        "one)")
        yield

    title = "Kafka durability auditor"
    app = FastAPI(title=title, version=__version__, lifespan=lifespan,
                  docs_url=None, redoc_url=None,  # served from packaged assets: routes/docs.py
                  # each operation's id is its function's name (list_findings, timeline),
                  # the names generated clients give their methods; FastAPI's default
                  # glued the path and method on (list_findings_v1_findings_get)
                  generate_unique_id_function=lambda route: route.name,
                  description="Acknowledged-but-lost writes and their evidence, from Delta "
                              "tables. Every error is an RFC 9457 problem "
                              "(application/problem+json); a query parameter a route does not "
                              "declare is a 422. With tokens configured, send "
                              "'Authorization: Bearer <token>' (401 without, 403 with a wrong "
                              "one). A person reads /dashboard; Prometheus scrapes /metrics.")
    app.state.snapshots = {}
    app.state.metrics_registry = registry = CollectorRegistry(auto_describe=True)
    _process_metrics(registry)
    problems.install(app)
    v1 = {"dependencies": [Depends(declared_query_only)],
          "responses": problems.PROBLEM_RESPONSES}
    app.include_router(health.router, responses=problems.problem_responses(500))
    app.include_router(findings.router(limits.api.page_size_max), **v1)
    app.include_router(topics.router, **v1)
    app.include_router(producers.router, **v1)
    app.include_router(partitions.router(limits.api.timeline_points_max), **v1)
    app.include_router(quality.router, **v1)
    app.include_router(latency.router, **v1)
    app.include_router(windows.router, **v1)
    app.include_router(suspicions.router, **v1)
    app.include_router(metrics.router, **v1)
    app.include_router(dashboard.router)
    app.include_router(docs.router(title))
    # the last added runs first: metrics, HEAD as GET, headers, Host, the limit, gzip,
    # tokens, cache
    if limits.api.response_cache:
        app.add_middleware(ResponseCache, fastapi_app=app,  # inside the token check
                           max_bytes=int(limits.api.response_cache_max_mb * (1 << 20)))
    app.add_middleware(BearerAuth, tokens=tokens)
    # level 6: a 1 MB page in ~10 ms; the static assets come compressed already (assets.py)
    app.add_middleware(GZipMiddleware, minimum_size=1024, compresslevel=6)
    app.add_middleware(ConcurrencyLimit, limit=limits.api.max_concurrent_requests)
    app.add_middleware(AllowedHosts, allowed=allowed_hosts(limits.api))
    app.add_middleware(SecurityHeaders)
    app.add_middleware(HeadAsGet)  # inside the metrics: a HEAD is counted as one
    app.add_middleware(RequestMetrics, registry=registry)  # outermost: 401s are timed too
    if tokens:
        _declare_bearer(app)
    if settings is not None:
        app.dependency_overrides[get_settings] = lambda: settings
    return app


def _process_metrics(registry: CollectorRegistry) -> None:
    """The client library's standard figures of this process (``process_*``: memory, CPU,
    open files; ``python_*``: the interpreter, its garbage collector) and
    ``kafka_audit_build_info`` (the version and the Python that serve), on the app's own
    registry: the API's memory can then be alerted on as the soaks watched it."""
    import platform

    from prometheus_client import Info, ProcessCollector
    from prometheus_client.gc_collector import GCCollector
    from prometheus_client.platform_collector import PlatformCollector

    ProcessCollector(registry=registry)
    PlatformCollector(registry=registry)
    GCCollector(registry=registry)
    Info("kafka_audit_build", "the auditor's version and the Python serving it",
         registry=registry).info({"version": __version__,
                                  "python": platform.python_version()})


def _declare_bearer(app: FastAPI) -> None:
    """The bearer scheme in the OpenAPI schema: required on every operation but the open
    ones, each answering 401 and 403 problems."""
    generate = app.openapi

    def openapi() -> dict[str, Any]:
        first = app.openapi_schema is None
        schema = generate()
        if first:
            schema["components"].setdefault("securitySchemes", {})["bearer"] = {
                "type": "http", "scheme": "bearer",
                "description": "a token made by `kafka-audit token new`; the settings hold "
                               "its hash"}
            extra = problems.problem_responses(401, 403)
            for path, ops in schema["paths"].items():
                if is_open(path):
                    continue
                for op in ops.values():
                    op["security"] = [{"bearer": []}]
                    op.setdefault("responses", {}).update(extra)
        return schema

    app.openapi = openapi  # type: ignore[method-assign]


def __getattr__(name: str) -> Any:
    """``app``, created on first use (``uvicorn kafka_audit.auditor_api.main:app``): importing
    this module reads no settings."""
    if name == "app":
        globals()["app"] = created = create_app()
        return created
    raise AttributeError(f"module {__name__!r} has no attribute {name!r}")
