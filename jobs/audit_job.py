"""Audit job (first cut): judge every successful ack against what was read.

* sources: ``acks`` (delta-rs ledger), ``consumed`` (consume job),
  ``partition_state`` (earlier frontiers), ``cluster_events`` (watcher);
* rule: :func:`kafka_audit.jobs.rules.judge_partition`, run per
  ``(topic, partition)`` with ``cogroup().applyInPandas``: the same pure function
  the unit tests exercise;
* sinks: ``findings`` (replaced as a whole each pass: the verdicts as of now,
  idempotent), ``partition_state`` (one frontier observation per partition and
  pass), ``dq_results`` (great-expectations over the acks added since the last pass);
* trigger: a pass every ``audit.interval_seconds`` (``kafka-audit audit``) or
  one pass (``kafka-audit audit --once``).
"""

from __future__ import annotations

import json
from dataclasses import dataclass
from datetime import UTC, datetime

import pandas as pd

from kafka_audit.jobs import rules
from kafka_audit.jobs.io import table_exists
from kafka_audit.jobs.model import Ack, ClusterEvent, Read
from kafka_audit.schemas.tables import column_names, spark_schema
from kafka_audit.settings import Settings

__all__ = ["AuditSummary", "run_audit_pass"]


@dataclass(frozen=True)
class AuditSummary:
    at: datetime
    confirmed: int
    lost: int
    pending: int
    partitions: int
    quality_failures: int

    def line(self) -> str:
        return (f"audit {self.at:%H:%M:%S}: {self.partitions} partitions, "
                f"{self.confirmed} confirmed, {self.lost} lost, {self.pending} pending, "
                f"{self.quality_failures} failed expectations")


def _none(v):
    return None if v is None or (isinstance(v, float) and pd.isna(v)) or v is pd.NaT else v


def _utc(v) -> datetime | None:
    # Spark hands pandas naive timestamps in the session time zone, which is UTC
    v = _none(v)
    return None if v is None else pd.Timestamp(v).to_pydatetime().replace(tzinfo=UTC)


def _collected_utc(v: datetime) -> datetime:
    # DataFrame.collect() gives naive datetimes in the driver's *local* zone (not the session
    # zone); astimezone reads a naive value as local time, so this is right on any machine
    return v.astimezone(UTC)


def _naive(v: datetime | None) -> datetime | None:
    return None if v is None else v.astimezone(UTC).replace(tzinfo=None)


def _judge_fn(settled: dict[tuple[str, int], int], events: list[ClusterEvent],
              detected_at: datetime):
    cols = column_names("findings")

    def judge(key, acks_pdf: pd.DataFrame, reads_pdf: pd.DataFrame) -> pd.DataFrame:
        topic, partition = key[0], int(key[1])
        acks = [Ack(topic, partition, int(r.offset), r.producer_id, r.run_id, int(r.seq),
                    _utc(r.ack_time), r.acks)
                for r in acks_pdf.itertuples(index=False)]
        reads = [Read(topic, partition, int(r.offset), _none(r.producer_id), _none(r.run_id),
                      None if pd.isna(r.seq) else int(r.seq))
                 for r in reads_pdf.itertuples(index=False)]
        findings = rules.judge_partition(acks, reads, settled.get((topic, partition), 0),
                                         [e for e in events if e.topic == topic
                                          and e.partition == partition])
        rows = [{
            "finding_id": f.finding_id, "kind": f.kind, "subkind": f.subkind,
            "topic": topic, "partition": partition, "offset": f.offset,
            "producer_id": f.producer_id, "run_id": f.run_id, "seq": f.seq, "count": f.count,
            "ack_time": _naive(f.ack_time), "evidence": json.dumps(f.evidence, default=str),
            "cause": f.cause, "detected_at": _naive(detected_at),
        } for f in findings]
        return pd.DataFrame(rows, columns=cols)

    return judge


def run_audit_pass(spark, settings: Settings, now: datetime | None = None) -> AuditSummary:
    from pyspark.sql import functions as F

    from kafka_audit.jobs import quality

    now = now or datetime.now(UTC)
    acks_path, consumed_path = settings.table_path("acks"), settings.table_path("consumed")
    state_path = settings.table_path("partition_state")
    findings_path = settings.table_path("findings")

    dq_failures = quality.validate_new_acks(settings)
    if not table_exists(consumed_path) and not table_exists(acks_path):
        return AuditSummary(now, 0, 0, 0, 0, dq_failures)

    def load(path: str, table: str):
        if table_exists(path):
            return spark.read.format("delta").load(path)
        return spark.createDataFrame([], spark_schema(table))

    acks = (load(acks_path, "acks")
            .where(F.col("error_code").isNull() & F.col("offset").isNotNull()
                   & F.col("partition").isNotNull())
            .select("topic", "partition", "offset", "producer_id", "run_id", "seq",
                    "ack_time", "acks"))
    reads = (load(consumed_path, "consumed")
             .select("topic", "partition", "offset", "producer_id", "run_id", "seq"))

    # frontier history: earlier observations plus the one made now
    current = {(r.topic, r.partition): int(r.frontier) for r in
               reads.groupBy("topic", "partition").agg((F.max("offset") + 1).alias("frontier"))
               .collect()}
    history: dict[tuple[str, int], list[tuple[int, datetime]]] = {
        k: [(f, now)] for k, f in current.items()}
    if table_exists(state_path):
        for r in (spark.read.format("delta").load(state_path)
                  .groupBy("topic", "partition", "frontier")
                  .agg(F.min("observed_at").alias("first_seen")).collect()):
            history.setdefault((r.topic, r.partition), []).append(
                (int(r.frontier), _collected_utc(r.first_seen)))
    settled = {k: rules.settled_frontier(v, now, settings.audit.settle_seconds)
               for k, v in history.items()}
    events = []
    events_path = settings.table_path("cluster_events")
    if table_exists(events_path):
        events = [ClusterEvent(_collected_utc(r.event_time), r.topic, r.partition, r.kind,
                               r.leader, r.previous_leader)
                  for r in spark.read.format("delta").load(events_path)
                  .where(F.col("kind") == "leader_change").collect()]

    judged = (acks.groupBy("topic", "partition").cogroup(reads.groupBy("topic", "partition"))
              .applyInPandas(_judge_fn(settled, events, now), spark_schema("findings")))
    judged.write.format("delta").mode("overwrite").save(findings_path)

    findings = spark.read.format("delta").load(findings_path)
    totals = {r.kind: int(r.n) for r in
              findings.groupBy("kind").agg(F.sum("count").alias("n")).collect()}
    pending = {(r.topic, r.partition): int(r["count"]) for r in
               findings.where(F.col("kind") == "pending").collect()}
    state_rows = [(t, p, f, now, pending.get((t, p), 0)) for (t, p), f in current.items()]
    if state_rows:
        (spark.createDataFrame(state_rows, spark_schema("partition_state"))
         .write.format("delta").mode("append").save(state_path))
    return AuditSummary(now, totals.get("confirmed", 0), totals.get("lost", 0),
                        totals.get("pending", 0), len(current), dq_failures)
