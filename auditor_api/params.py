"""Query parameters, typed once: their bounds and formats are in the OpenAPI schema and
anything else is a 422 that names the parameter (``problems.py``).

* :data:`Partition`: 0..2^31-1 (a Kafka partition is a signed 32-bit number);
* :data:`Instant`: an RFC 3339 date-time (ISO 8601 with a zone), exactly what the
  schema's ``format: date-time`` admits; never a bare number (pydantic would take it
  for an epoch); parsed to microseconds since the epoch, so every year 0000-9999 and
  every offset is exact (no ``datetime`` overflow at the edges);
* :func:`declared_query_only`: a dependency that refuses query parameters the route
  does not declare (``?bogus=1``, ``?limit=5``), naming them.
"""

from __future__ import annotations

import base64
import json
import re
from typing import Annotated, Literal

import pyarrow.compute as pc
from fastapi import Query, Request
from fastapi.routing import APIRoute
from pydantic import AfterValidator, WithJsonSchema
from pydantic_core import PydanticCustomError

from kafka_audit.auditor_api.problems import bad_parameters
from kafka_audit.schemas.systems import RABBITMQ

__all__ = ["INT32_MAX", "PAGE_MAX", "Partition", "System", "SystemName", "of_system",
           "Instant", "parse_instant", "declared_query_only"]

INT32_MAX = 2**31 - 1
#: the last page one may ask for: (page - 1) * page_size stays far inside 64 bits
PAGE_MAX = INT32_MAX

Partition = Annotated[int | None, Query(ge=0, le=INT32_MAX, description="partition number")]

#: the messaging system a topic key belongs to (``schemas/systems.py``)
SystemName = Literal["kafka", "rabbitmq"]
System = Annotated[SystemName | None, Query(
    description="kafka or rabbitmq: only that system's topics (a RabbitMQ queue's key is "
                "rabbitmq:queue:<vhost>:<queue>, docs/rabbitmq.md)")]


def of_system(system: str | None) -> pc.Expression | None:
    """The rows whose ``topic`` belongs to ``system`` (None: every row)."""
    if system is None:
        return None
    rabbit = pc.starts_with(pc.field("topic"), pattern=f"{RABBITMQ}:")
    return rabbit if system == RABBITMQ else pc.invert(rabbit)

_RFC3339 = re.compile(
    r"(?P<y>[0-9]{4})-(?P<mo>[0-9]{2})-(?P<d>[0-9]{2})[Tt]"
    r"(?P<h>[0-9]{2}):(?P<mi>[0-9]{2}):(?P<s>[0-9]{2})(?:\.(?P<frac>[0-9]+))?"
    r"(?P<zone>[Zz]|(?P<sign>[+-])(?P<oh>[0-9]{2}):(?P<om>[0-9]{2}))?")
_EXAMPLE = "e.g. 2026-01-01T00:00:00Z or 2026-01-01T01:00:00+01:00"


def _days_from_civil(y: int, m: int, d: int) -> int:
    """Days since 1970-01-01 of a proleptic Gregorian date (H. Hinnant's algorithm)."""
    y -= m <= 2
    era = y // 400
    yoe = y - era * 400
    doy = (153 * (m + (-3 if m > 2 else 9)) + 2) // 5 + d - 1
    doe = yoe * 365 + yoe // 4 - yoe // 100 + doy
    return era * 146097 + doe - 719468


def _month_days(y: int, m: int) -> int:
    if m == 2:
        return 29 if y % 4 == 0 and (y % 100 != 0 or y % 400 == 0) else 28
    return 30 if m in (4, 6, 9, 11) else 31


def parse_instant(text: str) -> int:
    """Microseconds since 1970-01-01T00:00:00Z of an RFC 3339 date-time; ``ValueError``
    saying what is wrong otherwise. A leap second (``:60``) is admitted at 23:59 UTC only,
    as JSON Schema's ``date-time`` does, and read as the next minute's first instant."""
    m = _RFC3339.fullmatch(text)
    if m is None:
        if re.fullmatch(r"[+-]?[0-9]+(\.[0-9]*)?([eE][+-]?[0-9]+)?", text.strip()):
            raise ValueError(f"a number is not a time: give an ISO 8601 date-time with a zone, "
                             f"{_EXAMPLE}")
        raise ValueError(f"not an ISO 8601 date-time with a zone (RFC 3339), {_EXAMPLE}")
    if m["zone"] is None:
        raise ValueError(f"needs a timezone, {_EXAMPLE}")
    y, mo, d, h, mi, s = (int(m[k]) for k in ("y", "mo", "d", "h", "mi", "s"))
    offset = 0
    if m["sign"]:
        oh, om = int(m["oh"]), int(m["om"])
        if oh > 23 or om > 59:
            raise ValueError(f"offset {m['zone']} out of range (-23:59..+23:59)")
        offset = (oh * 60 + om) * (1 if m["sign"] == "+" else -1)
    if not 1 <= mo <= 12 or not 1 <= d <= _month_days(y, mo):
        raise ValueError(f"no such date: {y:04d}-{mo:02d}-{d:02d}")
    if h > 23 or mi > 59 or s > 60:
        raise ValueError(f"no such time: {m['h']}:{m['mi']}:{m['s']}")
    if s == 60 and (h * 60 + mi - offset) % 1440 != 23 * 60 + 59:
        raise ValueError("a leap second (:60) exists only at 23:59 UTC")
    micros = int((m["frac"] or "0")[:6].ljust(6, "0"))
    seconds = (_days_from_civil(y, mo, d) * 1440 + h * 60 + mi - offset) * 60 + s
    return seconds * 1_000_000 + micros


def _instant(text: str) -> int:
    try:
        return parse_instant(text)
    except ValueError as exc:
        raise PydanticCustomError("date_time", str(exc)) from None


#: an RFC 3339 date-time as microseconds since the epoch (UTC)
Instant = Annotated[str, AfterValidator(_instant), WithJsonSchema(
    {"type": "string", "format": "date-time",
     "description": f"ISO 8601 (RFC 3339) with a zone, {_EXAMPLE}"})]


def _query_names(route: APIRoute) -> frozenset[str]:
    names: set[str] = set()
    todo = [route.dependant]
    while todo:
        dependant = todo.pop()
        names.update(field.alias for field in dependant.query_params)
        todo.extend(dependant.dependencies)
    return frozenset(names)


def declared_query_only(request: Request) -> None:
    """Refuse query parameters the route does not declare: a 422 naming each, with the
    parameters the route takes (a typo must not silently widen a query)."""
    route = request.scope.get("route")
    if not isinstance(route, APIRoute):
        return
    names = _query_names(route)  # a walk over a few fields: not worth a cache
    unknown = sorted({k for k in request.query_params.keys() if k not in names})
    if unknown:
        takes = ", ".join(sorted(names)) or "no query parameters"
        raise bad_parameters(*[(name, f"unknown parameter; {request.url.path} takes: {takes}")
                               for name in unknown])


def pack_cursor(data: dict) -> str:
    """A page's ``next_cursor``: ``data`` as URL-safe base64 JSON (opaque to clients)."""
    raw = json.dumps(data, separators=(",", ":"))
    return base64.urlsafe_b64encode(raw.encode()).decode().rstrip("=")


def unpack_cursor(cursor: str, check) -> dict:
    """What :func:`pack_cursor` packed, where ``check(data)`` holds (it may raise
    ``KeyError``, ``TypeError`` or ``ValueError`` too); else a 422 naming ``cursor``."""
    try:
        data = json.loads(base64.urlsafe_b64decode(cursor + "=" * (-len(cursor) % 4)))
        ok = isinstance(data, dict) and check(data)
    except (ValueError, TypeError, KeyError, UnicodeDecodeError):
        ok = False
    if not ok:
        raise bad_parameters(("cursor", "not a cursor this API gave: pass next_cursor of the "
                                        "previous page as it is"))
    return data


def other_filters_cursor():
    """The 422 of a cursor given with other filters than its first page's."""
    return bad_parameters(("cursor", "this cursor belongs to a query with other filters: "
                                     "send the same filters as its first page"))
