"""``GET /v1/topics``, ``/v1/topics/{topic}``: per topic, what was acked and what became of it.

Totals come from :mod:`kafka_audit.auditor_api.totals`, computed once per version of
the tables they read (the ledger, findings, the consumed stream, partition states,
the audit's progress), so a dashboard's refresh or a scrape costs a lookup.
"""

from __future__ import annotations

from datetime import datetime
from typing import Annotated

import pyarrow.compute as pc
from fastapi import APIRouter, Path
from pydantic import BaseModel, Field

from kafka_audit.auditor_api.deps import ReaderDep
from kafka_audit.auditor_api.folds import known_topics
from kafka_audit.auditor_api.params import System, SystemName
from kafka_audit.auditor_api.problems import UNKNOWN_TOPIC, ProblemError, problem_responses
from kafka_audit.auditor_api.routes.findings import committed_finding_sums, example
from kafka_audit.auditor_api.routes.partitions import latest_partitions
from kafka_audit.auditor_api.totals import ACKED_DOC, ACKNOWLEDGED_DOC, TopicTotals, topic_totals
from kafka_audit.schemas.systems import system_of

__all__ = ["router", "all_topics", "TopicOut"]

router = APIRouter(prefix="/v1", tags=["topics"])


class DurabilitySeen(BaseModel):
    """One combination of producer durability settings seen in the ledger for a topic."""

    acks: str
    idempotence: bool
    retries: int
    max_in_flight: int
    writes: int = Field(description="successful writes acknowledged with these settings")
    producers: int = Field(description="distinct producer_ids that used them")


class TopicOut(BaseModel):
    """One topic: the ledger's writes and the committed verdicts on them."""

    topic: str
    system: SystemName = Field(description="the system the topic key names: kafka, or "
                                           "rabbitmq for a queue's or a stream's key "
                                           "(rabbitmq:queue:<vhost>:<queue>)")
    acked: int = Field(description=ACKED_DOC)
    acknowledged: int = Field(description=ACKNOWLEDGED_DOC)
    failed: int = Field(description="of which the delivery failed (no ack)")
    confirmed: int = Field(description="writes confirmed in the log")
    pending: int = Field(description="acked writes not judged yet: acked - sum(verdicts)")
    unseen: int = Field(description="pending writes unread longer than "
                                    "audit.unseen_after_seconds")
    lost: int = Field(description="writes lost (lost and lost_after_seen)")
    loss_ratio: float | None = Field(description="lost / acked (null: nothing acked)")
    last_loss: datetime | None = Field(description="ack time of the newest lost write")
    duplicates: int = Field(description="writes found at two or more offsets")
    reordered: int
    unrecorded: int = Field(description="acknowledged writes whose delivery reports the "
                                        "producers' ack ledgers could not record: not in "
                                        "acked, never judged (the unrecorded findings)")
    verdicts: dict[str, int] = Field(description="writes per verdict kind")
    durability: list[DurabilitySeen] = Field(
        description="producer durability settings seen in the ledger, most writes first")
    unjudged_records: dict[str, int] = Field(
        description="stream records the auditor cannot judge, by reason (foreign: no_stamp, "
                    "unknown_producer; malformed: malformed_stamp, bad_checksum; forged: "
                    "forged_stamp, a stamp without its MAC while stamp.key_file is set)")


class PartitionTotalsOut(BaseModel):
    partition: int = Field(description="-1: failed writes no partition was chosen for")
    acked: int
    confirmed: int
    lost: int
    pending: int
    unseen: int
    frontier: int | None = Field(description="highest offset read + 1 (last committed pass)")
    last_loss: datetime | None
    leader: int | None = Field(description="leader as last observed by the watcher")
    isr: list[int] | None = Field(description="in-sync replicas as last observed")


class TopicDetail(TopicOut):
    partitions: list[PartitionTotalsOut]


TOPIC_EXAMPLE = {
    "topic": "orders", "system": "kafka", "acked": 543552, "acknowledged": 543552, "failed": 0,
    "confirmed": 541039,
    "pending": 0,
    "unseen": 0, "lost": 2513, "loss_ratio": 0.00462, "last_loss": "2026-11-22T07:51:02.6Z",
    "duplicates": 0, "reordered": 0, "unrecorded": 0,
    "verdicts": {"confirmed": 541039, "lost": 2414, "lost_after_seen": 99, "indeterminate": 0,
                 "rejected": 0, "unverified": 0},
    "durability": [{"acks": "1", "idempotence": False, "retries": 2, "max_in_flight": 5,
                    "writes": 543552, "producers": 1}],
    "unjudged_records": {"no_stamp": 0, "malformed_stamp": 0, "forged_stamp": 0,
                         "bad_checksum": 0, "unknown_producer": 0}}


def all_topics(reader) -> dict[str, TopicTotals]:
    """Every topic's totals (memoized per version of the tables they come from), from the
    running sums: the same cost whatever the tables hold."""
    def compute(acks, _findings, consumed, _state, _hot):
        found = committed_finding_sums(reader, reader.committed_pass())
        sums, stream = acks.folds["ack_sums"], consumed.folds["stream_sums"]
        unjudged = {t: stream.unjudged(t, sums.runs) for t in known_topics(sums, found, stream)}
        return topic_totals(sums, found, latest_partitions(reader), unjudged)

    return reader.memo("topic_totals", ("acks", "findings", "consumed", "partition_state",
                                        "audit_hot"), compute)


def _out(t: TopicTotals) -> dict:
    return {"topic": t.topic, "system": system_of(t.topic), "acked": t.acked,
            "acknowledged": t.acknowledged,
            "failed": t.failed,
            "confirmed": t.verdicts.get("confirmed", 0), "pending": t.pending,
            "unseen": t.unseen, "lost": t.lost, "loss_ratio": t.loss_ratio,
            "last_loss": t.last_loss, "duplicates": t.annotations.get("duplicate", 0),
            "reordered": t.annotations.get("reordered", 0), "unrecorded": t.unrecorded,
            "verdicts": t.verdicts,
            "durability": t.durability,
            "unjudged_records": t.unjudged or {"no_stamp": 0, "malformed_stamp": 0,
                                               "forged_stamp": 0, "bad_checksum": 0,
                                               "unknown_producer": 0}}


def _leaders(reader) -> dict[tuple[str, int], tuple[int | None, list[int] | None]]:
    def compute(events):
        t = events.data.filter(pc.is_valid(events.data.column("isr")))
        if t.num_rows == 0:
            return {}
        t = t.sort_by([("event_time", "ascending")])
        out = {}
        for topic, part, leader, isr in zip(t.column("topic").to_pylist(),
                                            t.column("partition").to_pylist(),
                                            t.column("leader").to_pylist(),
                                            t.column("isr").to_pylist(), strict=True):
            out[(topic, part)] = (leader, isr)
        return out

    return reader.memo("leaders", ("cluster_events",), compute)


@router.get("/topics", response_model=list[TopicOut], responses=example([TOPIC_EXAMPLE]))
def topics(reader: ReaderDep, system: System = None) -> list:
    """Every topic the ledger, the findings or the consumed stream names (RabbitMQ's queues
    and streams among them, by their keys): acked, confirmed, pending, unseen and lost
    writes, the loss ratio, the last loss, the producer durability settings seen, and
    records that cannot be judged."""
    return [_out(t) for name, t in all_topics(reader).items()
            if system is None or system_of(name) == system]


@router.get("/topics/{topic}", response_model=TopicDetail,
            responses={**problem_responses(404), **example({**TOPIC_EXAMPLE, "partitions": [
                {"partition": 0, "acked": 181203, "confirmed": 178690, "lost": 2513,
                 "pending": 0, "unseen": 0, "frontier": 181260,
                 "last_loss": "2026-11-22T07:51:02.6Z", "leader": 2, "isr": [2, 1, 3]}]})})
def topic(reader: ReaderDep, topic: Annotated[str, Path(
        description="the topic", max_length=255, examples=["orders"])]) -> dict:
    """One topic's totals and, per partition, its writes, losses, what is pending, the
    frontier read, and the leader and ISR last observed. An unknown topic is a 404."""
    t = all_topics(reader).get(topic)
    if t is None:
        raise ProblemError(404, f"unknown topic {topic!r}: no acked write, consumed record or "
                                f"finding names it", type_=UNKNOWN_TOPIC, title="Unknown topic")
    leaders = _leaders(reader)
    parts = [{"partition": p.partition, "acked": p.acked, "confirmed": p.confirmed,
              "lost": p.lost, "pending": p.pending, "unseen": p.unseen, "frontier": p.frontier,
              "last_loss": p.last_loss,
              "leader": leaders.get((topic, p.partition), (None, None))[0],
              "isr": leaders.get((topic, p.partition), (None, None))[1]}
             for p in sorted(t.partitions.values(), key=lambda p: p.partition)]
    return {**_out(t), "partitions": parts}
