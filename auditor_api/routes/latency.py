"""``GET /v1/latency``: how soon losses were reported, from their ack to their detection.

Per loss finding of committed passes (``lost``, ``lost_after_seen``), the time from its
first ack to the pass that judged it (``detected_at``); served as percentiles by
:func:`kafka_audit.latency.loss_latency`. Wired in ``main.py`` with the other ``/v1``
routers (unknown query parameters refused, problem+json errors).
"""

from __future__ import annotations

from datetime import datetime
from typing import Annotated

import pyarrow as pa
import pyarrow.compute as pc
from fastapi import APIRouter, Query
from pydantic import BaseModel, Field

from kafka_audit.auditor_api.deps import ReaderDep
from kafka_audit.auditor_api.params import Instant
from kafka_audit.auditor_api.problems import UNKNOWN_TOPIC, ProblemError, problem_responses
from kafka_audit.auditor_api.routes.findings import committed_finding_sums
from kafka_audit.latency import LOSS_KINDS, loss_latency

__all__ = ["router", "LossLatencyOut"]

router = APIRouter(prefix="/v1", tags=["latency"])

#: a Kafka topic name: at most 249 of these characters
TOPIC = r"^[A-Za-z0-9._-]{1,249}$"


class LossLatencyOut(BaseModel):
    """Ack-to-detection time of the loss findings: nearest-rank percentiles, in seconds
    (null when there is no loss finding)."""

    topic: str | None = Field(description="the topic (null: every topic)")
    since: datetime | None = Field(description="findings detected at or after this only")
    findings: int = Field(description="loss findings (lost, lost_after_seen) of committed "
                                      "passes")
    writes: int = Field(description="lost writes those findings hold")
    p50_seconds: float | None = Field(description="median, from a finding's first ack to "
                                                  "its detection")
    p95_seconds: float | None
    max_seconds: float | None


@router.get("/latency", response_model=LossLatencyOut, responses=problem_responses(404))
def latency(reader: ReaderDep,
            topic: Annotated[str | None, Query(pattern=TOPIC, description="one topic "
                                               "(default: every topic)")] = None,
            since: Annotated[Instant | None, Query(
                description="only findings detected at or after this time")] = None,
            ) -> LossLatencyOut:
    """How soon losses were reported: per loss finding, the time from its first ack to
    the audit pass that found it, as p50, p95 and max. An unknown topic is a 404."""
    ts = pa.timestamp("us", tz="UTC")
    on_topic = pc.field("topic") == topic if topic is not None else None
    committed = pc.field("pass_id") <= pa.scalar(reader.committed_pass(), pa.int64())
    where = committed & pc.field("kind").isin(list(LOSS_KINDS))
    if on_topic is not None:
        where = where & on_topic
    if since is not None:
        where = where & (pc.field("detected_at") >= pa.scalar(since, ts))
    found = reader.read("findings", where,
                        columns=["kind", "topic", "count", "ack_time", "detected_at"])
    if (topic is not None and found.num_rows == 0
            and topic not in reader.snapshots.fold("ack_sums").acked
            and not any(t == topic for t, _p, _k in committed_finding_sums(
                reader, reader.committed_pass()))):
        raise ProblemError(404, f"unknown topic {topic!r}: no acked write or finding names it",
                           type_=UNKNOWN_TOPIC, title="Unknown topic")
    stats = loss_latency(found)
    return LossLatencyOut(
        topic=topic, since=None if since is None else pa.scalar(since, ts).as_py(),
        findings=stats.count if stats else 0, writes=stats.writes if stats else 0,
        p50_seconds=stats and stats.p50, p95_seconds=stats and stats.p95,
        max_seconds=stats and stats.max)
