"""``GET /dashboard``: the page a person reads; its script, style and charting library.

Everything is served by this app (no CDN: auditing sites are often offline): the
page (``static/dashboard.html``), its script and style, and plotly.js from the
``plotly`` package's own copy (``plotly/package_data/plotly.min.js``), compressed for
clients that accept it (``assets.py``). The page holds no audit data: it reads
``/v1/topics`` (``?system=kafka`` or ``rabbitmq`` when the person picks one system: each
topic shows its system, a RabbitMQ queue's key as ``queue orders (vhost /)``),
``/v1/topics/{topic}`` and each partition's timeline with the token the person gives
(kept in the tab's sessionStorage), so it is served without one.

The page's ``Content-Security-Policy`` (:data:`DASHBOARD_POLICY`) lets only this app's
own scripts run (no inline script, no other origin), and its requests go to this app
only: a record's text that slipped into the page as markup could neither run nor send
the token anywhere. The script itself shows every value as text (``dashboard.js``).

Every path the page and its script use is relative (``dashboard/static/...``, ``v1/...``):
behind a reverse proxy that serves the API under a prefix (``/audit/dashboard``, with
uvicorn's ``--root-path /audit`` or the proxy's ``X-Forwarded-Prefix`` handled there) they
resolve under the prefix.
"""

from __future__ import annotations

from fastapi import APIRouter, Request
from fastapi.responses import Response

from kafka_audit.auditor_api.assets import asset_response, packaged
from kafka_audit.auditor_api.problems import ProblemError

__all__ = ["router", "DASHBOARD_POLICY"]

router = APIRouter(include_in_schema=False)

#: scripts from this app only, never inline; styles inline too (plotly.js styles its SVG
#: through style attributes); data: and blob: images (plotly's exported pictures)
DASHBOARD_POLICY = ("default-src 'self'; script-src 'self'; style-src 'self' 'unsafe-inline'; "
                    "img-src 'self' data: blob:; connect-src 'self'; object-src 'none'; "
                    "base-uri 'none'; form-action 'self'; frame-ancestors 'none'")
_ASSETS = {"dashboard.js": ("kafka_audit.auditor_api", "static"),
           "dashboard.css": ("kafka_audit.auditor_api", "static"),
           "plotly.min.js": ("plotly", "package_data")}


@router.get("/dashboard/")
def dashboard_slash() -> Response:
    """To ``/dashboard``, relatively: the page's own paths are relative to it (it works
    behind a proxy that serves the API under a path prefix) and would not resolve from
    here."""
    return Response(status_code=308, headers={"Location": "../dashboard"})


@router.get("/dashboard")
def dashboard(request: Request) -> Response:
    page = packaged("kafka_audit.auditor_api", "static", "dashboard.html")
    assert page is not None, "the package lacks auditor_api/static/dashboard.html"
    return asset_response(page, request, max_age=0, headers={
        "Cache-Control": "no-cache", "Content-Security-Policy": DASHBOARD_POLICY})


@router.get("/dashboard/static/{name}")
def static(name: str, request: Request) -> Response:
    where = _ASSETS.get(name)
    found = packaged(*where, name) if where else None
    if found is None:
        raise ProblemError(404, f"no such asset: {name}")
    return asset_response(found, request)
