"""``GET /dashboard``: the page a person reads; its script, style and charting library.

Everything is served by this app (no CDN: auditing sites are often offline): the
page (``static/dashboard.html``), its script and style, and plotly.js from the
``plotly`` package's own copy (``plotly/package_data/plotly.min.js``). The page holds
no audit data: it reads ``/v1/topics``, ``/v1/topics/{topic}`` and each partition's
timeline with the token the person gives (kept in the tab's sessionStorage), so it
is served without one.
"""

from __future__ import annotations

import functools
import hashlib
from importlib import resources
from pathlib import Path

from fastapi import APIRouter, Request
from fastapi.responses import HTMLResponse, Response

from kafka_audit.auditor_api.problems import ProblemError

router = APIRouter(include_in_schema=False)

_TYPES = {".js": "text/javascript; charset=utf-8", ".css": "text/css; charset=utf-8",
          ".html": "text/html; charset=utf-8"}


@functools.cache
def _asset(name: str) -> tuple[bytes, str] | None:
    """(content, ETag) of a static asset, read once; None if there is no such asset."""
    if name == "plotly.min.js":
        import plotly

        path = Path(plotly.__file__).parent / "package_data" / "plotly.min.js"
        data = path.read_bytes()
    else:
        item = resources.files("kafka_audit.auditor_api").joinpath("static", name)
        if "/" in name or not item.is_file():
            return None
        data = item.read_bytes()
    return data, '"' + hashlib.sha256(data).hexdigest()[:20] + '"'


@router.get("/dashboard")
@router.get("/dashboard/")
def dashboard() -> HTMLResponse:
    found = _asset("dashboard.html")
    assert found is not None, "the package lacks auditor_api/static/dashboard.html"
    return HTMLResponse(found[0], headers={"Cache-Control": "no-cache"})


@router.get("/dashboard/static/{name}")
def static(name: str, request: Request) -> Response:
    found = _asset(name) if name in ("plotly.min.js", "dashboard.js", "dashboard.css") else None
    if found is None:
        raise ProblemError(404, f"no such asset: {name}")
    data, etag = found
    headers = {"ETag": etag, "Cache-Control": "public, max-age=3600"}
    if request.headers.get("if-none-match") == etag:
        return Response(status_code=304, headers=headers)
    suffix = Path(name).suffix
    return Response(data, media_type=_TYPES.get(suffix, "application/octet-stream"),
                    headers=headers)
