"""Bearer tokens: who may read the audit's results.

Tokens live in the settings (``api.tokens``) as ``sha256:<hex>`` hashes only; a
request's token is hashed and looked up. With any token configured, every path
needs one but the open ones (:data:`OPEN_PATHS`: health for the orchestrator, which
says only its verdict without a token (:func:`accepted_token`), and
the dashboard's page, its script and the OpenAPI description, which carry no
audit data: the page asks for a token and sends it with every data request):

* no ``Authorization: Bearer ...`` header: **401** (with ``WWW-Authenticate``);
* a token whose hash is not configured: **403**;
* a read-only token on a method that writes: **403** (no endpoint writes today; an
  ``admin`` token would be needed).

Both answers are problem+json bodies. A token is never logged: this module logs
nothing of a request, and the server's error log names method and path only.
With no token configured the API is open, and says so once when it starts.
"""

from __future__ import annotations

import hashlib
import hmac
import logging
import secrets

from starlette.types import ASGIApp, Receive, Scope, Send

from kafka_audit.auditor_api.asgi import route_path
from kafka_audit.auditor_api.problems import FORBIDDEN, UNAUTHORIZED, problem

__all__ = ["hash_token", "new_token", "BearerAuth", "OPEN_PATHS", "is_open", "accepted_token"]

log = logging.getLogger("kafka_audit.auditor_api")

#: paths served without a token: health, and what carries no audit data
OPEN_PATHS = frozenset({"/healthz", "/readyz", "/dashboard", "/dashboard/", "/openapi.json",
                        "/docs", "/redoc"})
OPEN_PREFIXES = ("/dashboard/static/", "/docs/", "/redoc/")  # the pages' assets
_READ_METHODS = frozenset({"GET", "HEAD", "OPTIONS"})
#: what HTTP allows around a header's value (RFC 9110 optional whitespace), and the other
#: ASCII spaces a client may leave: stripped from a presented token
_OWS = " \t\r\n\x0b\x0c"
TOKEN_PREFIX = "kaudit_"


def hash_token(token: str) -> str:
    """What the settings store for ``token``: ``sha256:<64 hex digits>``. Tokens are random
    (:func:`new_token`, 256 bits), so one unsalted hash is enough: nothing to guess."""
    return "sha256:" + hashlib.sha256(token.encode("utf-8")).hexdigest()


def new_token() -> str:
    """A new random token (256 bits), prefixed so that secret scanners can find leaks."""
    return TOKEN_PREFIX + secrets.token_urlsafe(32)


def is_open(path: str) -> bool:
    return path in OPEN_PATHS or path.startswith(OPEN_PREFIXES)


def bearer(authorization: str | None) -> str | None:
    """The token an ``Authorization`` header value carries (``Bearer <token>``), or None."""
    if not authorization or authorization[:7].lower() != "bearer ":
        return None
    return authorization[7:].strip(_OWS) or None


def matching(presented: str, tokens: list):
    """The configured token (of ``tokens``) that ``presented`` is, or None: compared by
    hash, in constant time."""
    digest = hash_token(presented)
    return next((t for t in tokens if hmac.compare_digest(t.hash, digest)), None)


def accepted_token(authorization: str | None, tokens: list):
    """The configured token (of ``tokens``) an ``Authorization`` header value carries, or
    None: for an open path that says more to a token's holder (health's details)."""
    presented = bearer(authorization)
    return None if presented is None else matching(presented, tokens)


class BearerAuth:
    """ASGI middleware: the token check before any route runs (an unknown path without a
    token is a 401 too: nothing is said about what exists)."""

    def __init__(self, app: ASGIApp, tokens: list) -> None:
        self.app = app
        self.tokens = list(tokens)

    async def __call__(self, scope: Scope, receive: Receive, send: Send) -> None:
        if scope["type"] != "http" or not self.tokens or is_open(route_path(scope)):
            await self.app(scope, receive, send)
            return
        header = next((v for k, v in scope["headers"] if k == b"authorization"), None)
        presented = bearer(None if header is None else header.decode("latin-1"))
        if presented is None:
            response = problem(401, "this API needs a bearer token: send the header "
                                    "'Authorization: Bearer <token>'", type_=UNAUTHORIZED,
                               headers={"WWW-Authenticate": 'Bearer realm="kafka-audit"'})
            await response(scope, receive, send)
            return
        token = matching(presented, self.tokens)
        if token is None:
            await problem(403, "this token is not accepted here", type_=FORBIDDEN)(
                scope, receive, send)
            return
        if scope.get("method") not in _READ_METHODS and token.role != "admin":
            await problem(403, f"{scope.get('method')} needs an admin token; this one may "
                               f"only read", type_=FORBIDDEN)(scope, receive, send)
            return
        scope.setdefault("state", {})["api_token"] = token.name  # who, never the token
        await self.app(scope, receive, send)
