"""``GET /v1/findings``, ``/v1/summary``, ``/v1/partitions``: verdicts and what is pending.

Only findings of committed audit passes are served: a pass that died before
its commit point is redone, and its findings are replaced, never shown twice.
"""

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
from kafka_audit.jobs.io import read_progress

router = APIRouter(prefix="/v1", tags=["findings"])


class Kind(StrEnum):
    confirmed = "confirmed"
    lost = "lost"
    lost_after_seen = "lost_after_seen"
    duplicate = "duplicate"
    reordered = "reordered"
    indeterminate = "indeterminate"
    rejected = "rejected"
    unverified = "unverified"


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
    pass_id: int


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
    kind: Annotated[list[Kind] | None, Query(description="one or more kinds")] = None,
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
    where = _committed(reader, [
        pc.field("topic") == topic if topic is not None else None,
        pc.field("partition") == pa.scalar(partition, pa.int32()) if partition is not None
        else None,
        pc.field("kind").isin([k.value for k in kind]) if kind else None,
        pc.field("ack_time") >= pa.scalar(since, ts) if since is not None else None,
        pc.field("ack_time") < pa.scalar(until, ts) if until is not None else None,
    ])
    t = reader.read("findings", where).sort_by(
        [("topic", "ascending"), ("partition", "ascending"), ("kind", "ascending"),
         ("offset", "ascending"), ("finding_id", "ascending")])
    start = (page - 1) * page_size
    rows = t.slice(start, page_size).to_pylist()
    for r in rows:
        r["evidence"] = json.loads(r["evidence"] or "{}")
    return FindingsPage(total=t.num_rows, page=page, page_size=page_size,
                        items=[FindingOut(**r) for r in rows])


def _committed(reader, conditions: list) -> pc.Expression:
    """AND of the given conditions and "written by a committed audit pass"."""
    committed = read_progress(reader.settings).pass_id
    given = [c for c in conditions if c is not None]
    given.append(pc.field("pass_id") <= pa.scalar(committed, pa.int64()))
    return functools.reduce(operator.and_, given)


class Summary(BaseModel):
    topic: str | None
    writes: dict[str, int]
    lost: int
    pending: int
    unseen: int


@router.get("/summary", response_model=Summary)
def summary(reader: ReaderDep, topic: str | None = None) -> Summary:
    """Writes per verdict kind (sum of ``count``), losses, and what is still pending."""
    t = reader.read("findings", _committed(
        reader, [pc.field("topic") == topic if topic is not None else None]))
    by_kind = t.group_by("kind").aggregate([("count", "sum")]).to_pylist()
    writes = {r["kind"]: int(r["count_sum"]) for r in by_kind}
    parts = [p for p in latest_partitions(reader) if topic is None or p.topic == topic]
    return Summary(topic=topic, writes=writes,
                   lost=writes.get("lost", 0) + writes.get("lost_after_seen", 0),
                   pending=sum(p.pending for p in parts), unseen=sum(p.unseen for p in parts))


class PartitionOut(BaseModel):
    topic: str
    partition: int
    frontier: int
    settled_frontier: int
    pending: int
    unseen: int
    oldest_unseen: datetime | None
    observed_at: datetime
    pass_id: int


def latest_partitions(reader) -> list[PartitionOut]:
    """The rows of the last committed pass (it writes one per partition it holds state for;
    a partition with nothing pending and nothing retained is absent)."""
    committed = read_progress(reader.settings).pass_id
    t = reader.read("partition_state", pc.field("pass_id") == pa.scalar(committed, pa.int64()))
    rows = sorted(t.to_pylist(), key=lambda r: (r["topic"], r["partition"]))
    return [PartitionOut(**r) for r in rows]


@router.get("/partitions", response_model=list[PartitionOut])
def partitions(reader: ReaderDep, topic: str | None = None) -> list[PartitionOut]:
    """Per partition, as of the last committed pass: frontier, settled frontier, pending
    writes, and ``unseen`` ones (unread longer than ``audit.unseen_after_seconds``)."""
    return [p for p in latest_partitions(reader) if topic is None or p.topic == topic]
