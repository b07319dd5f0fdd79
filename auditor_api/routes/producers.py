"""``GET /v1/producers``: per producer, its durability settings and what became of its writes.

Which anomalies a producer's settings allow comes from ``schemas/policy.py`` (kept apart
from detection): a loss with ``acks=1`` is allowed, still reported; a loss with
``acks=all``, or a duplicate with idempotence, is a violation.
"""

from __future__ import annotations

from typing import Annotated

import pyarrow as pa
from fastapi import APIRouter, Query
from pydantic import BaseModel, Field

from kafka_audit.auditor_api.deps import ReaderDep
from kafka_audit.auditor_api.routes.findings import committed_findings, example
from kafka_audit.auditor_api.totals import (
    ACKED_DOC,
    ACKNOWLEDGED_DOC,
    FAILED_DOC,
    producer_totals,
)

__all__ = ["router"]

router = APIRouter(prefix="/v1", tags=["producers"])


class ProducerSettingsSeen(BaseModel):
    acks: str
    idempotence: bool
    retries: int
    max_in_flight: int
    writes: int = Field(description="writes (failed ones included) sent with these settings")
    allows: list[str] = Field(description="anomalies these settings allow, and why "
                                          "(schemas/policy.py); empty: none is allowed")


class ProducerOut(BaseModel):
    """One producer (a stable producer_id over its runs)."""

    producer_id: str
    runs: int = Field(description="process lifetimes (run_id) in the ledger")
    topics: list[str]
    acked: int = Field(description=ACKED_DOC)
    acknowledged: int = Field(description=ACKNOWLEDGED_DOC)
    failed: int = Field(description=FAILED_DOC)
    lost: int = Field(description="writes lost (lost and lost_after_seen)")
    duplicates: int
    reordered: int
    violations: int = Field(description="writes with an anomaly their producer's settings "
                                        "do not allow (a broken promise of the cluster)")
    ack_latency_p50_ms: float | None = Field(
        description="ack latency, median: each run's first write (ack_time - send_time), "
                    "weighted by the run's writes")
    ack_latency_p99_ms: float | None
    settings: list[ProducerSettingsSeen] = Field(description="durability settings seen, "
                                                             "most writes first")


@router.get("/producers", response_model=list[ProducerOut], responses=example([{
    "producer_id": "demo", "runs": 1, "topics": ["orders"], "acked": 543552,
    "acknowledged": 543552, "failed": 0,
    "lost": 2513, "duplicates": 0, "reordered": 0, "violations": 0,
    "ack_latency_p50_ms": 3.1, "ack_latency_p99_ms": 41.7,
    "settings": [{"acks": "1", "idempotence": False, "retries": 2, "max_in_flight": 5,
                  "writes": 543552, "allows": [
                      "acks=0/1: acknowledged before any follower held the write"]}]}]))
def producers(reader: ReaderDep, topic: Annotated[str | None, Query(
        description="only producers that wrote to this topic (their totals on it)",
        examples=["orders"])] = None) -> list:
    """Every producer in the ack ledger: runs, topics, writes, losses, duplicates and
    reorders, ack latency p50/p99, durability settings and what they allow, and
    violations (anomalies its settings do not allow)."""
    if topic is not None and topic not in reader.known_partitions():
        return []  # nothing computed or kept for a topic no table names

    def compute(acks, _findings, _hot, _rollups):
        found, dropped = committed_findings(reader), reader.dropped("findings")
        if dropped is not None:  # the anomalies retention dropped, summed
            found = pa.concat_tables([found, dropped.cast(found.schema)])
        return producer_totals(acks.folds["producer_sums"], found, topic)

    totals = reader.memo(("producer_totals", topic), ("acks", "findings", "audit_hot",
                                                      "rollups"), compute)
    return [{**{k: getattr(p, k) for k in ("producer_id", "runs", "topics", "acked",
                                           "acknowledged", "failed", "lost", "duplicates",
                                           "reordered", "violations", "settings")},
             "ack_latency_p50_ms": p.latency_p50_ms, "ack_latency_p99_ms": p.latency_p99_ms}
            for p in totals.values()]
