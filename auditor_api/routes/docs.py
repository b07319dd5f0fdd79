"""``GET /docs`` (Swagger UI) and ``/redoc`` (ReDoc): the OpenAPI description for people,
from assets served by this app.

FastAPI's own pages load Swagger UI and ReDoc from a CDN: offline (auditing sites often
are) they are blank, and they ran a third party's script on the origin that holds the
dashboard's token. Here the pages are FastAPI's (``fastapi.openapi.docs``) pointed at
copies packaged by ``fastapi-standalone-docs`` (Swagger UI 5, ReDoc 2, their licenses
beside them; its ReDoc asks for its logo under ``/redoc/``), served compressed with
``assets.py``, under a ``Content-Security-Policy`` that lets only this app's scripts
run, and Swagger UI's one inline script by its hash.
"""

from __future__ import annotations

import base64
import hashlib
import re

from fastapi import APIRouter, Request
from fastapi.openapi.docs import get_redoc_html, get_swagger_ui_html
from fastapi.responses import HTMLResponse, Response

from kafka_audit.auditor_api.assets import asset_response, packaged
from kafka_audit.auditor_api.problems import ProblemError

__all__ = ["router", "docs_policy"]

_PACKAGE = "fastapi_standalone_docs"
#: served name -> the package's folder holding it
_SWAGGER = {"swagger-ui-bundle.js": "static/swagger", "swagger-ui.css": "static/swagger",
            "LICENSE": "static/swagger", "favicon.png": "static/fastapi"}
_REDOC = {"redoc.standalone.js": "static/redoc", "redoc.standalone.js.LICENSE.txt":
          "static/redoc", "logo-mini.svg": "static/redoc", "favicon.png": "static/fastapi"}
_INLINE_SCRIPT = re.compile(r"<script>(.*?)</script>", re.DOTALL)


def docs_policy(html: str) -> str:
    """The page's policy: scripts from this app, and the page's own inline scripts by their
    hashes; ReDoc runs its search in a worker made from a blob."""
    hashes = " ".join("'sha256-" + base64.b64encode(hashlib.sha256(s.encode()).digest())
                      .decode() + "'" for s in _INLINE_SCRIPT.findall(html))
    return (f"default-src 'self'; script-src 'self' {hashes}".rstrip() + "; "
            "style-src 'self' 'unsafe-inline'; img-src 'self' data:; connect-src 'self'; "
            "worker-src 'self' blob:; object-src 'none'; base-uri 'none'; "
            "form-action 'self'; frame-ancestors 'none'")


def _page(page: HTMLResponse) -> HTMLResponse:
    html = bytes(page.body).decode()
    page.headers["Content-Security-Policy"] = docs_policy(html)
    page.headers["Cache-Control"] = "no-cache"
    return page


def _asset(names: dict[str, str], name: str, request: Request) -> Response:
    folder = names.get(name)
    found = packaged(_PACKAGE, folder, name) if folder else None
    if found is None:
        raise ProblemError(404, f"no such asset: {name}")
    return asset_response(found, request)


def router(title: str) -> APIRouter:
    """The two pages and their assets, for an API called ``title``."""
    r = APIRouter(include_in_schema=False)

    @r.get("/docs")
    def swagger_ui(request: Request) -> HTMLResponse:
        root = request.scope.get("root_path", "").rstrip("/")
        return _page(get_swagger_ui_html(
            openapi_url=f"{root}/openapi.json", title=f"{title} - Swagger UI",
            swagger_js_url=f"{root}/docs/swagger-ui-bundle.js",
            swagger_css_url=f"{root}/docs/swagger-ui.css",
            swagger_favicon_url=f"{root}/docs/favicon.png",
            # no badge fetched from validator.swagger.io
            swagger_ui_parameters={"validatorUrl": None}))

    @r.get("/redoc")
    def redoc(request: Request) -> HTMLResponse:
        root = request.scope.get("root_path", "").rstrip("/")
        return _page(get_redoc_html(
            openapi_url=f"{root}/openapi.json", title=f"{title} - ReDoc",
            redoc_js_url=f"{root}/redoc/redoc.standalone.js",
            redoc_favicon_url=f"{root}/redoc/favicon.png", with_google_fonts=False))

    @r.get("/docs/{name}")
    def swagger_asset(name: str, request: Request) -> Response:
        return _asset(_SWAGGER, name, request)

    @r.get("/redoc/{name}")
    def redoc_asset(name: str, request: Request) -> Response:
        return _asset(_REDOC, name, request)

    return r
