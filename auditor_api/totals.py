"""Per-topic and per-producer totals, computed once per table version.

The topics and producers resources, the metrics and the dashboard read these: each
is a pure function of Arrow tables (the ledger, committed findings, the consumed
stream, partition states), memoized by the reader on those tables' versions, so a
scrape or a page load costs a lookup while nothing committed.
"""

from __future__ import annotations

from dataclasses import dataclass, field
from datetime import datetime

import numpy as np
import pyarrow as pa
import pyarrow.compute as pc

from kafka_audit.auditor_api.folds import AckSums, ProducerSums
from kafka_audit.schemas.policy import ALLOWANCES, Durability
from kafka_audit.schemas.verdicts import ANNOTATIONS, LOSSES, PRIMARY, Kind

__all__ = ["TopicTotals", "ProducerTotals", "topic_totals", "producer_totals",
           "weighted_percentile", "ACKED_DOC", "ACKNOWLEDGED_DOC", "FAILED_DOC"]

#: what ``acked``, ``acknowledged`` and ``failed`` count, wherever the API gives them
ACKED_DOC = ("delivery reports in the ack ledger: acknowledged + failed (each gets a "
             "verdict; a failed one is rejected)")
ACKNOWLEDGED_DOC = ("writes the cluster acknowledged: acked - failed (what a producer counts "
                    "as sent)")
FAILED_DOC = "delivery reports of writes that failed (no ack)"

LOSS_KINDS = sorted(k.value for k in LOSSES)
VERDICTS = tuple(k.value for k in PRIMARY)
_DURABILITY = ["acks", "idempotence", "retries", "max_in_flight"]


@dataclass
class PartitionTotals:
    partition: int
    acked: int = 0
    lost: int = 0
    confirmed: int = 0
    judged: int = 0
    pending: int = 0
    unseen: int = 0
    frontier: int | None = None
    last_loss: datetime | None = None


@dataclass
class TopicTotals:
    topic: str
    acked: int = 0
    failed: int = 0
    verdicts: dict[str, int] = field(default_factory=dict)
    annotations: dict[str, int] = field(default_factory=dict)
    pending: int = 0
    unseen: int = 0
    lost: int = 0
    #: acknowledged writes whose delivery reports the ledger could not record (not in
    #: ``acked``, never judged: ``unrecorded`` findings)
    unrecorded: int = 0
    last_loss: datetime | None = None
    newest_ack: datetime | None = None
    durability: list[dict] = field(default_factory=list)
    unjudged: dict[str, int] = field(default_factory=dict)
    partitions: dict[int, PartitionTotals] = field(default_factory=dict)

    @property
    def acknowledged(self) -> int:
        return self.acked - self.failed

    @property
    def loss_ratio(self) -> float | None:
        return self.lost / self.acked if self.acked else None


def topic_totals(acks: AckSums, found: dict, partitions: list, unjudged: dict
                 ) -> dict[str, TopicTotals]:
    """Per topic: the ledger's writes, the committed verdicts, what is pending and unseen,
    the last loss, the durability settings seen, unjudged records, and per partition;
    from the running sums (``auditor_api/folds.py``: ``acks``, and ``found``: (topic,
    partition, kind) -> (writes, newest loss) of the committed passes)."""
    out: dict[str, TopicTotals] = {}

    def of(topic: str) -> TopicTotals:
        return out.setdefault(topic, TopicTotals(topic))

    def part(t: TopicTotals, partition: int) -> PartitionTotals:
        return t.partitions.setdefault(partition, PartitionTotals(partition))

    for (topic, partition), n in acks.by_partition.items():
        t = of(topic)
        t.acked += n
        part(t, partition).acked = n
    for topic, n in acks.failed.items():
        of(topic).failed = n
    for topic, newest in acks.newest_now.items():
        of(topic).newest_ack = newest
    for (topic, *settings), (writes, producers) in acks.durability.items():
        of(topic).durability.append({**dict(zip(_DURABILITY, settings, strict=True)),
                                     "writes": writes, "producers": len(producers)})

    annotations = {k.value for k in ANNOTATIONS}
    for (topic, partition, kind), (n, last) in found.items():
        t = of(topic)
        if kind == Kind.unrecorded:
            t.unrecorded += n
            continue
        bucket = t.annotations if kind in annotations else t.verdicts
        bucket[kind] = bucket.get(kind, 0) + n
        if kind not in VERDICTS:
            continue
        p = part(t, partition)
        p.judged += n
        if kind in LOSS_KINDS:
            p.lost += n
            if last is not None and (p.last_loss is None or last > p.last_loss):
                p.last_loss = last
            if last is not None and (t.last_loss is None or last > t.last_loss):
                t.last_loss = last
        elif kind == Kind.confirmed:
            p.confirmed += n

    for p in partitions:
        t = of(p.topic)
        pt = part(t, p.partition)
        pt.unseen, pt.frontier = p.unseen, p.frontier
        t.unseen += p.unseen
    for topic, reasons in unjudged.items():
        of(topic).unjudged = dict(reasons)

    for t in out.values():
        t.verdicts = {k: t.verdicts.get(k, 0) for k in VERDICTS}
        t.annotations = {k.value: t.annotations.get(k.value, 0) for k in sorted(ANNOTATIONS)}
        t.lost = sum(t.verdicts[k] for k in LOSS_KINDS)
        t.pending = t.acked - sum(t.verdicts.values())
        for p in t.partitions.values():
            p.pending = max(p.acked - p.judged, 0) if p.partition >= 0 else 0
        t.durability.sort(key=lambda d: -d["writes"])
    return dict(sorted(out.items()))


def weighted_percentile(values: np.ndarray, weights: np.ndarray, q: float) -> float | None:
    """The ``q`` quantile (0..1) of ``values`` each counted ``weights`` times."""
    if len(values) == 0 or weights.sum() <= 0:
        return None
    order = np.argsort(values, kind="stable")
    cum = np.cumsum(weights[order])
    i = int(np.searchsorted(cum, q * cum[-1], side="left"))
    return float(values[order][min(i, len(values) - 1)])


@dataclass
class ProducerTotals:
    producer_id: str
    runs: int = 0
    topics: list[str] = field(default_factory=list)
    acked: int = 0
    failed: int = 0
    lost: int = 0
    duplicates: int = 0
    reordered: int = 0
    latency_p50_ms: float | None = None
    latency_p99_ms: float | None = None
    settings: list[dict] = field(default_factory=list)
    violations: int = 0

    @property
    def acknowledged(self) -> int:
        return self.acked - self.failed


def producer_totals(sums: ProducerSums, findings: pa.Table,
                    topic: str | None = None) -> dict[str, ProducerTotals]:
    """Per producer_id (its writes to ``topic`` only, if given): runs, topics, writes,
    losses and annotations, the ack latency of its runs (each run's first write: ack_time -
    send_time, weighted by the run's writes; from the running histogram, three significant
    digits), its durability settings and which anomalies they allow
    (``schemas/policy.py``); a finding the settings do not allow is a violation. From the
    ledger's running sums (``folds.ProducerSums``) and the committed ``findings``."""
    out: dict[str, ProducerTotals] = {}
    runs: dict[str, set] = {}
    latency: dict[str, dict] = {}
    for (pid, t), (acked, failed) in sums.writes.items():
        if topic is not None and t != topic:
            continue
        p = out.setdefault(pid, ProducerTotals(pid))
        p.topics.append(t)
        p.acked += acked
        p.failed += failed
        runs.setdefault(pid, set()).update(sums.runs.get((pid, t), ()))
        for us, n in sums.latency.get((pid, t), {}).items():
            hist = latency.setdefault(pid, {})
            hist[us] = hist.get(us, 0) + n
    for pid, p in out.items():
        p.runs, p.topics = len(runs[pid]), sorted(p.topics)
        hist = latency.get(pid, {})
        values = np.array(list(hist), dtype=float) / 1000.0
        weights = np.array(list(hist.values()), dtype=float)
        p.latency_p50_ms = weighted_percentile(values, weights, 0.5)
        p.latency_p99_ms = weighted_percentile(values, weights, 0.99)
    by_setting: dict[tuple, int] = {}
    for (pid, t, *settings), n in sums.settings.items():
        if pid in out and (topic is None or t == topic):
            by_setting[(pid, *settings)] = by_setting.get((pid, *settings), 0) + n
    for (pid, *settings), n in by_setting.items():
        d = Durability(*settings)
        out[pid].settings.append({**dict(zip(_DURABILITY, settings, strict=True)),
                                  "writes": n,
                                  "allows": [a.because for a in ALLOWANCES if a.when(d)]})
    allowed_by = {key: {k.value for d in found for a in ALLOWANCES if a.when(Durability(*d))
                        for k in a.kinds}
                  for key, found in sums.run_settings.items()}
    anomalies = pc.field("kind") != Kind.confirmed.value  # a confirmation counts nothing here
    findings = findings.filter(anomalies if topic is None
                               else anomalies & (pc.field("topic") == topic))
    for r in (findings.group_by(["producer_id", "run_id", "kind"])
              .aggregate([("count", "sum")]).to_pylist() if findings.num_rows else []):
        p = out.get(r["producer_id"])
        if p is None:
            continue
        n = int(r["count_sum"])
        if r["kind"] in LOSS_KINDS:
            p.lost += n
        elif r["kind"] == Kind.duplicate:
            p.duplicates += n
        elif r["kind"] == Kind.reordered:
            p.reordered += n
        anomaly = r["kind"] in LOSS_KINDS or r["kind"] in {k.value for k in ANNOTATIONS}
        if anomaly and r["kind"] not in allowed_by.get((r["producer_id"], r["run_id"]), set()):
            p.violations += n
    for p in out.values():
        p.settings.sort(key=lambda d: -d["writes"])
    return dict(sorted(out.items()))
