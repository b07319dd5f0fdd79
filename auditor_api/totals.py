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

from kafka_audit.auditor_api.folds import AckSums
from kafka_audit.schemas.policy import ALLOWANCES, Durability
from kafka_audit.schemas.verdicts import ANNOTATIONS, LOSSES, Kind

__all__ = ["TopicTotals", "ProducerTotals", "topic_totals", "producer_totals",
           "weighted_percentile"]

PRIMARY = tuple(k.value for k in Kind if k not in ANNOTATIONS)
LOSS_KINDS = sorted(k.value for k in LOSSES)
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
    last_loss: datetime | None = None
    newest_ack: datetime | None = None
    durability: list[dict] = field(default_factory=list)
    unjudged: dict[str, int] = field(default_factory=dict)
    partitions: dict[int, PartitionTotals] = field(default_factory=dict)

    @property
    def loss_ratio(self) -> float | None:
        return self.lost / self.acked if self.acked else None


def _sums(t: pa.Table, keys: list[str], value: str = "count") -> list[dict]:
    if t.num_rows == 0:
        return []
    return t.group_by(keys).aggregate([(value, "sum")]).to_pylist()


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
        bucket = t.annotations if kind in annotations else t.verdicts
        bucket[kind] = bucket.get(kind, 0) + n
        if kind not in PRIMARY:
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
        t.verdicts = {k: t.verdicts.get(k, 0) for k in PRIMARY}
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


def producer_totals(acks: pa.Table, findings: pa.Table) -> dict[str, ProducerTotals]:
    """Per producer_id: runs, topics, writes, losses and annotations, the ack latency of
    its runs (each run's first write: ack_time - send_time, weighted by the run's writes),
    its durability settings and which anomalies they allow (``schemas/policy.py``); a
    finding the settings do not allow is a violation."""
    out: dict[str, ProducerTotals] = {}
    if acks.num_rows:
        for r in acks.group_by("producer_id").aggregate(
                [("count", "sum"), ("run_id", "count_distinct"), ("topic", "distinct")]
        ).to_pylist():
            out[r["producer_id"]] = ProducerTotals(
                r["producer_id"], runs=int(r["run_id_count_distinct"]),
                topics=sorted(r["topic_distinct"]), acked=int(r["count_sum"]))
        failed = acks.filter(pc.is_valid(acks.column("error_name")))
        for r in _sums(failed, ["producer_id"]):
            out[r["producer_id"]].failed = int(r["count_sum"])
        ok = acks.filter(pc.is_null(acks.column("error_name")))
        micros = pc.cast(pc.subtract(pc.cast(ok.column("ack_time"), pa.int64()),
                                     pc.cast(ok.column("send_time"), pa.int64())), pa.int64())
        lat = np.asarray(micros.to_numpy(zero_copy_only=False), dtype=float) / 1000.0
        weights = np.asarray(ok.column("count").to_numpy(zero_copy_only=False), dtype=float)
        ids = np.asarray(ok.column("producer_id").to_pylist(), dtype=object)
        for pid in out:
            mask = ids == pid
            out[pid].latency_p50_ms = weighted_percentile(lat[mask], weights[mask], 0.5)
            out[pid].latency_p99_ms = weighted_percentile(lat[mask], weights[mask], 0.99)
        for r in (acks.group_by(["producer_id", *_DURABILITY])
                  .aggregate([("count", "sum")]).to_pylist()):
            d = Durability(r["acks"], r["idempotence"], r["retries"], r["max_in_flight"])
            out[r["producer_id"]].settings.append({
                **{k: r[k] for k in _DURABILITY}, "writes": int(r["count_sum"]),
                "allows": [a.because for a in ALLOWANCES if a.when(d)]})
    allowed_by: dict[tuple, set[str]] = {}
    for r in (acks.group_by(["producer_id", "run_id", *_DURABILITY]).aggregate([]).to_pylist()
              if acks.num_rows else []):
        d = Durability(r["acks"], r["idempotence"], r["retries"], r["max_in_flight"])
        allowed_by[(r["producer_id"], r["run_id"])] = {
            k.value for a in ALLOWANCES if a.when(d) for k in a.kinds}
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
