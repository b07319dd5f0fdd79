"""Loss latency: how soon the audit reported each loss, from the ack to the detection.

Every loss finding (``lost``, ``lost_after_seen``) carries ``ack_time`` (the first ack of
its range of writes) and ``detected_at`` (when the pass that judged it wrote it): their
difference is the finding's ack-to-detection time, an upper bound for each write of the
range (the later ones were acked a little later). :func:`loss_latency` sums them up
as percentiles (nearest rank) over the findings; pure over Arrow tables or plain rows
of the ``findings`` table, as :mod:`kafka_audit.store` reads them.

``GET /v1/latency`` serves it (``auditor_api/routes/latency.py``); ``bench/latency.py``
measures the other end, kill to REST answer, from outside.
"""

from __future__ import annotations

import math
from collections.abc import Iterable, Sequence
from dataclasses import dataclass

import pyarrow as pa
import pyarrow.compute as pc

from kafka_audit.schemas.verdicts import LOSSES

__all__ = ["LossLatency", "ack_to_detection", "loss_latency", "nearest_rank", "LOSS_KINDS"]

#: the finding kinds that are losses
LOSS_KINDS = tuple(sorted(k.value for k in LOSSES))


@dataclass(frozen=True)
class LossLatency:
    """Ack-to-detection time over ``count`` loss findings (``writes`` lost writes), in
    seconds."""

    count: int
    writes: int
    p50: float
    p95: float
    max: float


def nearest_rank(values: Sequence[float], q: float) -> float:
    """The ``q`` quantile (0 < q <= 1) of ``values`` by nearest rank: the smallest value
    with at least ``q`` of them at or below it (an observed value, never interpolated)."""
    if not values:
        raise ValueError("no values")
    s = sorted(values)
    return s[max(0, math.ceil(q * len(s)) - 1)]


def _table(findings: pa.Table | Iterable[dict]) -> pa.Table:
    if isinstance(findings, pa.Table):
        return findings
    rows = list(findings)
    cols = ("kind", "topic", "count", "ack_time", "detected_at")
    return pa.Table.from_pylist([{c: r.get(c) for c in cols} for r in rows], schema=pa.schema([
        ("kind", pa.string()), ("topic", pa.string()), ("count", pa.int64()),
        ("ack_time", pa.timestamp("us", tz="UTC")),
        ("detected_at", pa.timestamp("us", tz="UTC"))]))


def ack_to_detection(findings: pa.Table | Iterable[dict], topic: str | None = None
                     ) -> tuple[list[float], int]:
    """Per loss finding (of ``topic``, or every topic), seconds from its ack to its
    detection, and the writes those findings hold. Findings without an ack time (none
    are losses today) are left out."""
    t = _table(findings)
    keep = pc.is_in(t.column("kind"), value_set=pa.array(LOSS_KINDS))
    if topic is not None:
        keep = pc.and_(keep, pc.equal(t.column("topic"), topic))
    keep = pc.and_(keep, pc.and_(pc.is_valid(t.column("ack_time")),
                                 pc.is_valid(t.column("detected_at"))))
    t = t.filter(keep)
    if t.num_rows == 0:
        return [], 0
    micros = pc.subtract(t.column("detected_at").cast(pa.int64()),
                         t.column("ack_time").cast(pa.int64()))
    return ([m / 1e6 for m in micros.to_pylist()],
            int(pc.sum(t.column("count")).as_py() or 0))


def loss_latency(findings: pa.Table | Iterable[dict], topic: str | None = None
                 ) -> LossLatency | None:
    """p50, p95 and max of :func:`ack_to_detection` (None: no loss finding)."""
    seconds, writes = ack_to_detection(findings, topic)
    if not seconds:
        return None
    return LossLatency(len(seconds), writes, nearest_rank(seconds, 0.5),
                       nearest_rank(seconds, 0.95), max(seconds))
