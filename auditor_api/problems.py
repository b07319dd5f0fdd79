"""One error contract: every 4xx and 5xx body is ``application/problem+json`` (RFC 9457).

* a bad parameter (FastAPI's validation, a rule a route checks by hand, an unknown
  query parameter) is a 422 whose ``errors`` names each offending parameter;
* an ``HTTPException`` (a route's own, 404 for an unknown path, 405) keeps its
  status and headers (``Allow`` on a 405);
* an unhandled exception is a 500 carrying an ``id`` that the server's log line
  carries too, with the traceback. It is answered by :class:`ProblemOn500`, a
  middleware inside Starlette's ``ServerErrorMiddleware``: that one re-raises
  after answering, and uvicorn then closes the connection; here the exception
  ends with the response and the client's pooled connection stays usable.

:data:`PROBLEM_RESPONSES` declares these bodies in the OpenAPI schema; the
:class:`Problem` model is added to its components by :func:`install`.
"""

from __future__ import annotations

import logging
import uuid
from http import HTTPStatus
from typing import Any

from fastapi import FastAPI, Request
from fastapi.exceptions import RequestValidationError
from fastapi.responses import JSONResponse, Response
from pydantic import BaseModel, ConfigDict, Field
from starlette.exceptions import HTTPException as StarletteHTTPException
from starlette.types import Message, Receive, Scope, Send

from kafka_audit.auditor_api.asgi import HttpMiddleware

__all__ = ["MEDIA_TYPE", "Problem", "ProblemParameter", "PROBLEM_RESPONSES",
           "problem_responses", "problem", "ProblemError", "bad_parameters", "install",
           "ProblemOn500"]

log = logging.getLogger("kafka_audit.auditor_api")

MEDIA_TYPE = "application/problem+json"
#: problem types of this API (tag URIs, RFC 4151: names, not documents to fetch)
INVALID_PARAMETERS = "tag:kafka-audit,2026:problem:invalid-parameters"
UNKNOWN_TOPIC = "tag:kafka-audit,2026:problem:unknown-topic"
INTERNAL_ERROR = "tag:kafka-audit,2026:problem:internal-error"
UNKNOWN_FINDING = "tag:kafka-audit,2026:problem:unknown-finding"
UNKNOWN_PARTITION = "tag:kafka-audit,2026:problem:unknown-partition"
UNAUTHORIZED = "tag:kafka-audit,2026:problem:unauthorized"
FORBIDDEN = "tag:kafka-audit,2026:problem:forbidden"
BAD_HOST = "tag:kafka-audit,2026:problem:bad-host"
OVERLOADED = "tag:kafka-audit,2026:problem:overloaded"


class ProblemParameter(BaseModel):
    """One offending request parameter."""

    model_config = ConfigDict(populate_by_name=True)

    name: str = Field(description="the parameter's name as sent")
    in_: str = Field(alias="in", description="where it was sent: query, path, header, cookie, "
                                             "body")
    reason: str = Field(description="what is wrong with it")


class Problem(BaseModel):
    """An error (RFC 9457 problem details), the body of every 4xx and 5xx response."""

    type: str = Field("about:blank", description="the problem type: about:blank (the status "
                      "says it all) or one of this API's tag:kafka-audit,2026:problem:* types")
    title: str = Field(description="short summary of the problem type")
    status: int = Field(ge=400, le=599, description="the HTTP status code")
    detail: str = Field(description="what went wrong with this request")
    errors: list[ProblemParameter] | None = Field(
        None, description="invalid-parameters: each offending parameter")
    id: str | None = Field(None, description="internal-error: the id the server's log line "
                                             "carries too")


def _phrase(status: int) -> str:
    try:
        return HTTPStatus(status).phrase
    except ValueError:  # a status Python does not name
        return f"HTTP {status}"


def problem_responses(*statuses: int) -> dict[int | str, dict[str, Any]]:
    """``responses=`` for routes: each status answers a :class:`Problem`."""
    ref = {"schema": {"$ref": "#/components/schemas/Problem"}}
    return {s: {"description": _phrase(s), "content": {MEDIA_TYPE: ref}}
            for s in statuses}


#: every route that takes parameters can answer these: 400 a Host name not served, 503
#: beyond the concurrency limit (``guards.py``)
PROBLEM_RESPONSES = problem_responses(400, 422, 500, 503)


def problem(status: int, detail: str, *, type_: str = "about:blank", title: str | None = None,
            headers: dict[str, str] | None = None, **extensions: Any) -> JSONResponse:
    """A problem+json response."""
    body = Problem(type=type_, title=title or _phrase(status), status=status,
                   detail=detail, **extensions)
    return JSONResponse(body.model_dump(by_alias=True, exclude_none=True), status_code=status,
                        media_type=MEDIA_TYPE, headers=headers)


class ProblemError(Exception):
    """Raised by a route: answered as the problem it describes (e.g. an unknown topic)."""

    def __init__(self, status: int, detail: str, type_: str = "about:blank",
                 title: str | None = None) -> None:
        super().__init__(detail)
        self.status, self.detail, self.type, self.title = status, detail, type_, title


def bad_parameters(*errors: tuple[str, str]) -> RequestValidationError:
    """The error a route raises by hand for bad query parameters, ``(name, reason)`` each:
    answered like FastAPI's own validation errors."""
    return RequestValidationError([{"type": "value_error", "loc": ("query", name), "msg": reason}
                                   for name, reason in errors])


def _shown(value: Any) -> str:
    text = repr(value)
    return text if len(text) <= 60 else text[:57] + "..."


def _parameter(error: dict) -> ProblemParameter:
    loc = [str(x) for x in error.get("loc", ())]
    where, name = (loc[0], loc[1]) if len(loc) > 1 else ("query", loc[0] if loc else "")
    reason = error.get("msg", "invalid")
    if "input" in error and error.get("type") not in ("missing", "value_error"):
        reason = f"{reason} (got {_shown(error['input'])})"
    return ProblemParameter(name=name, in_=where, reason=reason)


async def _invalid(request: Request, exc: RequestValidationError) -> JSONResponse:
    params = [_parameter(e) for e in exc.errors()]
    by_reason: dict[str, list[str]] = {}  # one reason shared by several names is said once
    for p in params:
        by_reason.setdefault(p.reason, []).append(p.name)
    detail = "; ".join(f"{', '.join(names)}: {reason}" for reason, names in by_reason.items())
    return problem(422, f"invalid parameters: {detail}", type_=INVALID_PARAMETERS,
                   title="Invalid request parameters", errors=params)


async def _problem(request: Request, exc: ProblemError) -> JSONResponse:
    return problem(exc.status, exc.detail, type_=exc.type, title=exc.title)


async def _http(request: Request, exc: StarletteHTTPException) -> Response:
    status = exc.status_code
    if status < 400:  # not an error (none is raised today): no problem body
        return Response(status_code=status, headers=exc.headers)
    detail = exc.detail if isinstance(exc.detail, str) else _phrase(status)
    if status == 404 and detail == HTTPStatus.NOT_FOUND.phrase:
        detail = f"no such path: {request.url.path}"
    elif status == 405 and detail == HTTPStatus.METHOD_NOT_ALLOWED.phrase:
        allowed = (exc.headers or {}).get("Allow", "")
        detail = f"{request.method} is not allowed on {request.url.path} (allowed: {allowed})"
    return problem(status, detail, headers=exc.headers)


class ProblemOn500(HttpMiddleware):
    """Answers an unhandled exception with a problem 500 carrying an ``id``, logged with the
    traceback; the exception goes no further, so the server keeps the connection open."""

    async def http(self, scope: Scope, receive: Receive, send: Send) -> None:
        started = False

        async def sending(message: Message) -> None:
            nonlocal started
            started = started or message["type"] == "http.response.start"
            await send(message)

        try:
            await self.app(scope, receive, sending)
        except Exception:
            error_id = uuid.uuid4().hex
            log.exception("internal error id=%s on %s %s", error_id, scope.get("method"),
                          scope.get("path"))
            if started:  # half a response went out: nothing sound to add, let the server cut
                raise
            response = problem(500, f"internal error; the server's log has its details "
                                    f"under id {error_id}", type_=INTERNAL_ERROR, id=error_id)
            await response(scope, receive, send)


def install(app: FastAPI) -> None:
    """The handlers, the 500 middleware, and :class:`Problem` in the OpenAPI components."""
    app.add_exception_handler(RequestValidationError, _invalid)
    app.add_exception_handler(StarletteHTTPException, _http)
    app.add_exception_handler(ProblemError, _problem)
    app.add_middleware(ProblemOn500)

    generate = app.openapi

    def openapi() -> dict[str, Any]:
        first = app.openapi_schema is None
        schema = generate()  # FastAPI's, kept in app.openapi_schema
        if first:
            defs = Problem.model_json_schema(ref_template="#/components/schemas/{model}")
            schemas = schema.setdefault("components", {}).setdefault("schemas", {})
            schemas.update(defs.pop("$defs", {}))
            schemas["Problem"] = defs
        return schema

    app.openapi = openapi  # type: ignore[method-assign]
