"""``GET /v1/findings``: anomalies and per-partition counts, filtered and paginated."""

from __future__ import annotations

import functools
import json
import operator
from datetime import datetime
from enum import StrEnum
from typing import Annotated

import pyarrow as pa
import pyarrow.compute as pc
from fastapi import APIRouter, HTTPException, Query
from pydantic import BaseModel

from kafka_audit.auditor_api.deps import ReaderDep, SettingsDep

router = APIRouter(prefix="/v1", tags=["findings"])


class Kind(StrEnum):
    lost = "lost"
    confirmed = "confirmed"
    pending = "pending"


class FindingOut(BaseModel):
    finding_id: str
    kind: str
    subkind: str | None
    topic: str
    partition: int
    offset: int | None
    producer_id: str | None
    run_id: str | None
    seq: int | None
    count: int
    ack_time: datetime | None
    cause: str | None
    evidence: dict
    detected_at: datetime


class FindingsPage(BaseModel):
    total: int
    page: int
    page_size: int
    items: list[FindingOut]


@router.get("/findings", response_model=FindingsPage)
def list_findings(
    reader: ReaderDep,
    settings: SettingsDep,
    topic: str | None = None,
    partition: Annotated[int | None, Query(ge=0)] = None,
    kind: Kind | None = None,
    since: Annotated[datetime | None, Query(description="ack_time >= since (ISO 8601)")] = None,
    until: Annotated[datetime | None, Query(description="ack_time < until (ISO 8601)")] = None,
    page: Annotated[int, Query(ge=1)] = 1,
    page_size: Annotated[int, Query(ge=1)] = 100,
) -> FindingsPage:
    if page_size > settings.api.page_size_max:
        raise HTTPException(422, f"page_size must be at most {settings.api.page_size_max}")
    for name, value in (("since", since), ("until", until)):
        if value is not None and value.tzinfo is None:
            raise HTTPException(422, f"{name} needs a timezone, e.g. 2026-01-01T00:00:00Z")
    if since and until and since >= until:
        raise HTTPException(422, "since must be before until")
    # the filter goes into the Delta scan rather than over a whole table read per request
    ts = pa.timestamp("us", tz="UTC")
    conditions = [
        pc.field("topic") == topic if topic is not None else None,
        pc.field("partition") == pa.scalar(partition, pa.int32()) if partition is not None
        else None,
        pc.field("kind") == kind.value if kind is not None else None,
        pc.field("ack_time") >= pa.scalar(since, ts) if since is not None else None,
        pc.field("ack_time") < pa.scalar(until, ts) if until is not None else None,
    ]
    given = [c for c in conditions if c is not None]
    where = functools.reduce(operator.and_, given) if given else None
    t = reader.read("findings", where).sort_by(
        [("topic", "ascending"), ("partition", "ascending"), ("kind", "ascending"),
         ("offset", "ascending"), ("finding_id", "ascending")])
    start = (page - 1) * page_size
    rows = t.slice(start, page_size).to_pylist()
    for r in rows:
        r["evidence"] = json.loads(r["evidence"] or "{}")
    return FindingsPage(total=t.num_rows, page=page, page_size=page_size,
                        items=[FindingOut(**r) for r in rows])
