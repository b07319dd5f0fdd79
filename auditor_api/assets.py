"""Static files the app serves itself (no CDN: auditing sites are often offline): read once,
compressed once, answered with an ``ETag`` (a 304 when the browser holds it) and, to a
client that accepts gzip, compressed (plotly.js is 4.8 MB, 1.4 MB gzipped; compressing it
at each request would cost a core a third of a second).

The dashboard's own files come from ``auditor_api/static``, plotly.js from the ``plotly``
package, Swagger UI and ReDoc from ``fastapi-standalone-docs`` (``routes/docs.py``).
"""

from __future__ import annotations

import functools
import gzip
import hashlib
from dataclasses import dataclass
from importlib import resources
from pathlib import PurePosixPath

from starlette.requests import Request
from starlette.responses import Response

__all__ = ["Asset", "packaged", "asset_response"]

_TYPES = {".js": "text/javascript; charset=utf-8", ".css": "text/css; charset=utf-8",
          ".html": "text/html; charset=utf-8", ".png": "image/png", ".svg": "image/svg+xml",
          ".txt": "text/plain; charset=utf-8"}
#: not worth compressing: already compressed, or too small to gain
_KEEP_AS_IS = frozenset({".png"})
_MIN_GZIP = 1024


@dataclass(frozen=True)
class Asset:
    data: bytes
    media_type: str
    etag: str
    gzipped: bytes | None  # None: sent as is

    @classmethod
    def of(cls, data: bytes, name: str) -> Asset:
        suffix = PurePosixPath(name).suffix
        packed = None
        if suffix not in _KEEP_AS_IS and len(data) >= _MIN_GZIP:
            packed = gzip.compress(data, compresslevel=6, mtime=0)
        return cls(data, _TYPES.get(suffix, "application/octet-stream"),
                   '"' + hashlib.sha256(data).hexdigest()[:20] + '"', packed)


@functools.cache
def packaged(package: str, folder: str, name: str) -> Asset | None:
    """The file ``folder/name`` of an installed ``package`` (read and compressed once);
    None if there is no such file (``name`` is one path part, never a way out)."""
    if not name or "/" in name or "\\" in name or name.startswith("."):
        return None
    try:
        item = resources.files(package).joinpath(*folder.split("/"), name)
    except ModuleNotFoundError:
        return None
    if not item.is_file():
        return None
    return Asset.of(item.read_bytes(), name)


def _accepts_gzip(request: Request) -> bool:
    for part in request.headers.get("accept-encoding", "").split(","):
        coding, *params = [p.strip() for p in part.split(";")]
        if coding.lower() in ("gzip", "x-gzip", "*"):
            q = next((p[2:] for p in params if p.lower().startswith("q=")), "1")
            try:
                return float(q) > 0
            except ValueError:
                return False
    return False


def asset_response(asset: Asset, request: Request, *, max_age: int = 3600,
                   headers: dict[str, str] | None = None) -> Response:
    """``asset`` as the answer to ``request``: gzipped when accepted, a 304 when the
    browser's copy (``If-None-Match``) is current."""
    packed = asset.gzipped is not None and _accepts_gzip(request)
    etag = asset.etag[:-1] + '-gz"' if packed else asset.etag  # one tag per encoding
    out = {"ETag": etag, "Cache-Control": f"public, max-age={max_age}"}
    out.update(headers or {})
    if asset.gzipped is not None:
        out["Vary"] = "Accept-Encoding"
    if etag in [t.strip() for t in request.headers.get("if-none-match", "").split(",")]:
        return Response(status_code=304, headers=out)
    if packed:
        out["Content-Encoding"] = "gzip"
        return Response(asset.gzipped, media_type=asset.media_type, headers=out)
    return Response(asset.data, media_type=asset.media_type, headers=out)
