"""One audit pass over one partition's hot state: pure, shared by Spark and memory.

The audit is incremental. For each partition it keeps a small *hot state*:
the ack runs not yet judged, the read runs that pending writes may still need,
the successful runs judged within the read retention (``judged``, for
``reordered``) and the
frontier observations of the last settle period. A pass adds what arrived
since the last one, judges what has settled (:func:`rules.judge_partition`)
and keeps only what is still needed: judged runs leave the hot state, so it is
bounded by the unsettled window, not by everything ever seen.

:func:`step_partition` is that pass. The Spark job runs it per partition with
``applyInPandas`` over the hot Delta table plus the new rows;
:class:`InMemoryAuditor` runs it over dicts, for tests and small tools.
"""

from __future__ import annotations

from collections import defaultdict
from collections.abc import Iterable, Sequence
from dataclasses import dataclass, field, replace
from datetime import datetime, timedelta

from kafka_audit.jobs.core import rules
from kafka_audit.jobs.core.model import AckRun, Clock, ClusterEvent, Finding, ReadRun, Reread
from kafka_audit.jobs.core.rabbit_rules import RabbitConfig, judge_rabbit, retained_rabbit_reads
from kafka_audit.schemas.systems import KAFKA, system_of

__all__ = ["AuditConfig", "PartitionHot", "StepResult", "step_partition", "InMemoryAuditor"]


@dataclass(frozen=True)
class AuditConfig:
    settle_seconds: float = 30.0
    lookback_seconds: float = 30.0
    unseen_after_seconds: float = 120.0
    read_retention_seconds: float = 600.0
    compacted_topics: frozenset[str] = frozenset()
    unknown_policy_topics: frozenset[str] = frozenset()
    beyond_end_seconds: float = 60.0
    #: how far apart a RabbitMQ publisher's and reader's clocks may be (the barrier rule)
    rabbit_margin_seconds: float = 1.0


@dataclass
class PartitionHot:
    """The hot state of one partition between passes."""

    acks: list[AckRun] = field(default_factory=list)
    reads: list[ReadRun] = field(default_factory=list)
    judged: list[tuple[AckRun, datetime]] = field(default_factory=list)  # run, judged at
    observations: list[tuple[int, datetime]] = field(default_factory=list)


@dataclass
class StepResult:
    hot: PartitionHot
    findings: list[Finding]
    rereads: list[Reread]
    clock: Clock
    pending: int
    unseen: int
    oldest_unseen: datetime | None
    #: when the writes that look lost now (another record read at their offsets) will all
    #: have settled, if later than ``now``: the loop starts a pass then (None: none)
    suspects_settle: datetime | None = None


def step_partition(topic: str, hot: PartitionHot, events: Sequence[ClusterEvent],
                   now: datetime, cfg: AuditConfig, log_end: int | None = None) -> StepResult:
    """One pass: observe the frontier, judge what settled, keep what is still needed.

    ``hot`` already holds the rows that arrived since the last pass; ``log_end``
    is the partition's log end now (None if unknown), the horizon of failed
    reports that have none yet, and the end writes acknowledged beyond it are judged
    against (:func:`rules.beyond_end`).

    A RabbitMQ queue or stream (``schemas/systems.py``) is judged by its own rules
    (:func:`~kafka_audit.jobs.core.rabbit_rules.judge_rabbit`: a confirm names no offset).
    """
    if system_of(topic) != KAFKA:
        return _step_rabbit(hot, events, now, cfg)
    acks = hot.acks if log_end is None else [
        a if a.placed or a.horizon is not None else replace(a, horizon=log_end)
        for a in hot.acks]
    observed = max((f for f, _ in hot.observations), default=0)
    stream = [r for r in hot.reads if r.source == "stream"]
    frontier = max([observed, *(r.end for r in stream)])
    # the frontier as the consume job saw it when it read (``read_time``), not when this
    # pass first saw the rows: the settle period runs from the read
    observations = [*hot.observations, *rules.read_observations(stream)]
    if frontier:
        observations.append((frontier, now))
    settled, settled_at = rules.settled_frontier(observations, now, cfg.settle_seconds)
    compacted = (None if topic in cfg.unknown_policy_topics
                 else topic in cfg.compacted_topics)
    clock = Clock(now, settled, frontier, cfg.lookback_seconds, cfg.unseen_after_seconds,
                  compacted, log_end, cfg.beyond_end_seconds)
    j = rules.judge_partition(acks, hot.reads, [a for a, _ in hot.judged], events, clock)
    cutoff = now - timedelta(seconds=cfg.settle_seconds)
    kept_obs = [o for o in observations if o[1] > cutoff]
    if settled_at is not None:
        kept_obs.append((settled, settled_at))
    kept = PartitionHot(
        acks=j.acks,
        reads=rules.retained_reads(hot.reads, j.acks, clock, cfg.read_retention_seconds),
        judged=[(a, t) for a, t in [*hot.judged, *((a, now) for a in j.judged)]
                if t >= now - timedelta(seconds=cfg.read_retention_seconds)],
        observations=sorted(set(kept_obs), key=lambda o: o[1]),
    )
    return StepResult(kept, j.findings, j.rereads, clock, j.pending, j.unseen, j.oldest_unseen,
                      _settles(observations, j.suspect_end, now, cfg.settle_seconds))


def _step_rabbit(hot: PartitionHot, events: Sequence[ClusterEvent], now: datetime,
                 cfg: AuditConfig) -> StepResult:
    """:func:`step_partition` for a RabbitMQ key: its writes judged by the barrier rule, the
    reads it may still need kept (no frontier; a re-read is a lookup in ``consumed``)."""
    rc = RabbitConfig(cfg.settle_seconds, cfg.rabbit_margin_seconds, cfg.unseen_after_seconds,
                      cfg.read_retention_seconds)
    j = judge_rabbit(hot.acks, hot.reads, now, rc, events)
    kept = PartitionHot(acks=j.acks, reads=retained_rabbit_reads(hot.reads, j.acks, now, rc))
    return StepResult(kept, j.findings, j.rereads, Clock(now), j.pending, j.unseen,
                      j.oldest_unseen)


def _settles(observations: list[tuple[int, datetime]], end: int | None, now: datetime,
             settle_seconds: float) -> datetime | None:
    """When the frontier first observed at or past ``end`` will be a settle period old
    (None: no ``end``, none observed yet, or already so)."""
    if end is None:
        return None
    seen = min((t for f, t in observations if f >= end), default=None)
    at = None if seen is None else seen + timedelta(seconds=settle_seconds)
    return at if at is not None and at > now else None


class InMemoryAuditor:
    """The streaming audit with its state in memory: same steps as the Spark job."""

    def __init__(self, cfg: AuditConfig) -> None:
        self.cfg = cfg
        self.hot: dict[tuple[str, int], PartitionHot] = defaultdict(PartitionHot)
        self.events: list[ClusterEvent] = []
        self.findings: list[Finding] = []
        self.rereads: list[Reread] = []
        self.status: dict[tuple[str, int], StepResult] = {}

    def run_pass(self, now: datetime, acks: Iterable[AckRun] = (),
                 reads: Iterable[ReadRun] = (), events: Iterable[ClusterEvent] = (),
                 log_ends: dict[tuple[str, int], int] | None = None) -> list[Finding]:
        for a in acks:
            self.hot[(a.topic, a.partition)].acks.append(a)
        for r in reads:
            self.hot[(r.topic, r.partition)].reads.append(r)
        self.events.extend(events)
        new: list[Finding] = []
        for key in sorted(self.hot):
            evs = rules.partition_events(self.events, key)
            res = step_partition(key[0], self.hot[key], evs, now, self.cfg,
                                 (log_ends or {}).get(key))
            self.hot[key] = res.hot
            self.status[key] = res
            new.extend(res.findings)
            self.rereads.extend(res.rereads)
        self.findings.extend(new)
        return new
