"""Plain rows the verdict rules take and give: no Spark, no pandas."""

from __future__ import annotations

from dataclasses import dataclass, field
from datetime import datetime

__all__ = ["Ack", "Read", "ClusterEvent", "Finding", "StampKey"]

StampKey = tuple[str, str, int]  # (producer_id, run_id, seq)


@dataclass(frozen=True)
class Ack:
    """A successful delivery report: the broker put ``stamp`` at ``(topic, partition, offset)``."""

    topic: str
    partition: int
    offset: int
    producer_id: str
    run_id: str
    seq: int
    ack_time: datetime | None = None
    acks: str = "all"

    @property
    def stamp(self) -> StampKey:
        return (self.producer_id, self.run_id, self.seq)


@dataclass(frozen=True)
class Read:
    """A record the auditor's consumer read. ``producer_id`` is None for a foreign record."""

    topic: str
    partition: int
    offset: int
    producer_id: str | None
    run_id: str | None
    seq: int | None

    @property
    def stamp(self) -> StampKey | None:
        if self.producer_id is None or self.run_id is None or self.seq is None:
            return None
        return (self.producer_id, self.run_id, self.seq)


@dataclass(frozen=True)
class ClusterEvent:
    event_time: datetime
    topic: str
    partition: int
    kind: str
    leader: int | None = None
    previous_leader: int | None = None


@dataclass(frozen=True)
class Finding:
    kind: str
    topic: str
    partition: int
    count: int = 1
    subkind: str | None = None
    offset: int | None = None
    producer_id: str | None = None
    run_id: str | None = None
    seq: int | None = None
    ack_time: datetime | None = None
    cause: str | None = None
    evidence: dict = field(default_factory=dict, compare=False)

    @property
    def finding_id(self) -> str:
        if self.kind in ("confirmed", "pending"):
            return f"{self.kind}:{self.topic}:{self.partition}"
        return (f"{self.kind}:{self.topic}:{self.partition}:{self.offset}:"
                f"{self.producer_id}:{self.run_id}:{self.seq}")
