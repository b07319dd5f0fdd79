"""Plain rows the verdict rules take and give: no Spark, no pandas.

Acks and reads are *runs* (the range ledger): one row stands for ``count``
consecutive sequence numbers of one producer run at ``count`` consecutive
offsets of one partition. A single message is a run of one.
"""

from __future__ import annotations

from dataclasses import dataclass, field
from datetime import datetime

__all__ = ["AckRun", "ReadRun", "ClusterEvent", "Finding", "Clock", "Reread", "StampKey"]

StampKey = tuple[str, str, int]  # (producer_id, run_id, seq)

@dataclass(frozen=True)
class AckRun:
    """Delivery reports for seqs ``seq .. seq+count-1`` of one producer run.

    On success (``error`` None) the broker put them at offsets ``offset ..
    offset+count-1`` of ``(topic, partition)``. On failure ``offset`` is None
    and ``error`` is the librdkafka error name shared by the whole run.
    ``first_ack`` and ``last_ack`` bound when the reports arrived.
    """

    topic: str
    partition: int
    producer_id: str
    run_id: str
    seq: int
    count: int
    offset: int | None
    first_ack: datetime
    last_ack: datetime
    error: str | None = None
    acks: str = "all"
    #: a failed (or offset-less) run's *horizon*: the partition's log end as seen by the
    #: first audit pass after the report. Every record appended before the report lies
    #: below it, so once the settled frontier passes it, absence is a verdict.
    horizon: int | None = None
    #: the broker that acknowledged the run, where the client said (the kaudit plugin)
    broker: int | None = None

    @property
    def placed(self) -> bool:
        """A successful report that names its offset (acks=0 and some retries do not)."""
        return self.error is None and self.offset is not None

    @property
    def end(self) -> int:
        """One past the last offset (success only)."""
        assert self.offset is not None
        return self.offset + self.count

    def piece(self, start: int, stop: int) -> AckRun:
        """The messages ``start .. stop-1`` (indices into the run) as a run of their own."""
        # built field by field: dataclasses.replace looks the fields up on every call, and
        # a pass over interleaved producers cuts hundreds of thousands of pieces
        return AckRun(self.topic, self.partition, self.producer_id, self.run_id,
                      self.seq + start, stop - start,
                      None if self.offset is None else self.offset + start,
                      self.first_ack, self.last_ack, self.error, self.acks, self.horizon,
                      self.broker)


@dataclass(frozen=True)
class ReadRun:
    """What the auditor saw at offsets ``offset .. offset+count-1`` at ``read_time``.

    ``status``: ``record`` (records; ``producer_id`` None for foreign or
    malformed ones, else seqs ``seq ..`` of that producer run), ``absent`` (a
    re-read scanned these offsets inside the log and found no record:
    compacted, a transaction marker), ``truncated`` (at or past the log end
    now, although the consumed frontier had passed them) or ``expired``
    (below the log start: retention).
    ``source``: ``stream`` (the consume job) or ``reread`` (a direct re-read).
    A RabbitMQ key's reads (``jobs/core/rabbit_rules.py``): ``offset`` is the reader's
    position, ``status`` ``record``, ``redelivered`` or ``barrier``; ``lookup`` (``source``
    ``reread``): seqs ``seq ..`` (``count`` of them) of that run were looked up in
    ``consumed``, and what it found comes beside it.
    """

    topic: str
    partition: int
    offset: int
    count: int
    producer_id: str | None
    run_id: str | None
    seq: int | None
    read_time: datetime
    source: str = "stream"
    status: str = "record"
    leader_epoch: int | None = None

    @property
    def end(self) -> int:
        return self.offset + self.count

    @property
    def stamped(self) -> bool:
        return self.status == "record" and self.producer_id is not None and self.seq is not None

    def stamp_at(self, offset: int) -> StampKey | None:
        """The stamp read at ``offset`` (None: foreign record or no record)."""
        if not self.stamped:
            return None
        return (self.producer_id, self.run_id, self.seq + offset - self.offset)  # type: ignore


@dataclass(frozen=True)
class ClusterEvent:
    event_time: datetime
    topic: str
    partition: int
    kind: str
    leader: int | None = None
    previous_leader: int | None = None
    isr: tuple[int, ...] | None = None
    previous_isr: tuple[int, ...] | None = None
    replicas: tuple[int, ...] | None = None  # None: unknown, taken as replicated
    until: datetime | None = None  # watcher_blind: the end of the gap (None: still blind)
    log_end: int | None = None  # log_end_drop: the log end it went back to
    broker: int | None = None  # broker_fenced / broker_unfenced: which (cluster-wide rows)
    #: the eligible leader replicas (KIP-966) before the change (None: not known)
    previous_elr: tuple[int, ...] | None = None


@dataclass(frozen=True)
class Clock:
    """What a pass knows about time for one partition.

    ``settled_frontier``: the consumed frontier as observed at least the settle
    period ago (0 if no such observation).
    ``compacted`` None means the topic's cleanup policy is unknown this pass:
    verdicts that would rest on it wait. ``log_end``: the partition's log end (high
    watermark) asked this pass (None: not asked, or no answer), for writes acknowledged
    beyond it (:func:`~kafka_audit.jobs.core.rules.beyond_end`).
    """

    now: datetime
    settled_frontier: int = 0
    stream_frontier: int = 0
    lookback_seconds: float = 30.0
    unseen_after_seconds: float = 120.0
    compacted: bool | None = False  # None: the topic's cleanup.policy could not be read
    log_end: int | None = None
    beyond_end_seconds: float = 60.0


@dataclass(frozen=True)
class Reread:
    """A request to read ``offset .. end-1`` of a partition again, directly. For a RabbitMQ
    key (a queue cannot be read again): a lookup in ``consumed`` of what the reader read of
    seqs ``offset .. end-1`` of producer run ``(producer_id, run_id)``."""

    topic: str
    partition: int
    offset: int
    end: int
    reason: str
    producer_id: str | None = None
    run_id: str | None = None


@dataclass(frozen=True)
class Finding:
    """One anomaly (or confirmed range): ``count`` writes from ``seq``/``offset`` on.

    ``offset`` is the first acked offset (None for failed writes); the writes
    are seqs ``seq .. seq+count-1`` at offsets ``offset .. offset+count-1``.
    """

    kind: str
    topic: str
    partition: int
    producer_id: str | None = None
    run_id: str | None = None
    seq: int | None = None
    offset: int | None = None
    count: int = 1
    subkind: str | None = None
    ack_time: datetime | None = None
    cause: str | None = None
    evidence: dict = field(default_factory=dict, compare=False)

    @property
    def finding_id(self) -> str:
        return (f"{self.kind}:{self.topic}:{self.partition}:{self.producer_id}:"
                f"{self.run_id}:{self.seq}")
