"""Audit job: the streaming verdict engine on Spark, one incremental pass at a time.

* sources: the ``acks`` and ``consumed`` files added since the last pass
  (both tables are append-only, so the new rows are exactly the new files),
  plus ``audit_hot`` (the unsettled state the last pass kept) and
  ``cluster_events``; new files holding few rows are read with pyarrow;
* rule: :func:`kafka_audit.jobs.engine.step_partition` per ``(topic, partition)``
  with ``groupBy().applyInPandas``: the same pure function the unit and
  property tests exercise;
* sinks, in this order: ``findings`` (appended, tagged with the pass id),
  direct re-reads into ``consumed`` (``source = reread``), ``audit_hot``
  (the new state *and* the progress row appended as one generation, tagged with
  the pass id: this commit is the pass's commit point; every
  ``audit.hot_rewrite_passes`` passes it overwrites instead, dropping older
  generations), ``partition_state`` (frontier, pending and unseen per
  partition, delta-rs), ``dq_results`` (great-expectations over the new acks);
  findings and state go through :func:`~kafka_audit.jobs.sink.write_delta`
  (delta-rs from the driver when small, else Spark's Delta writer);
* exactly once: a pass first deletes findings whose pass id is above the
  committed one (a pass that died before its commit point), then redoes that
  pass. Re-read and state appends are idempotent Delta transactions keyed by
  the pass id. So a replayed or restarted pass writes no finding twice and
  misses none;
* trigger: a pass every ``audit.interval_seconds`` (``kafka-audit audit``) or
  one pass (``kafka-audit audit --once``).
"""

from __future__ import annotations

import functools
import json
import logging
import time
from concurrent.futures import ThreadPoolExecutor
from dataclasses import dataclass, field, replace
from datetime import UTC, datetime

import pandas as pd
import pyarrow as pa
import pyarrow.compute as pc

from kafka_audit.jobs import quality
from kafka_audit.jobs.engine import AuditConfig, PartitionHot, step_partition
from kafka_audit.jobs.io import (
    Progress,
    append_once,
    files_added_since,
    max_in_files,
    read_progress,
    read_table,
    table_exists,
    upgrade_tables,
)
from kafka_audit.jobs.model import AckRun, ClusterEvent, ReadRun, Reread
from kafka_audit.jobs.sink import write_delta
from kafka_audit.schemas.tables import arrow_schema, column_names, spark_schema
from kafka_audit.settings import Settings

__all__ = ["AuditSummary", "run_audit_pass", "audit_config", "ClusterLookups", "consumed_row"]

log = logging.getLogger(__name__)
REREAD_APP = "kafka_audit_reread"
STATE_APP = "kafka_audit_partition_state"
_EXTRA = ["row", "finding_id", "subkind", "evidence", "cause", "unseen", "settled"]


@dataclass(frozen=True)
class AuditSummary:
    at: datetime
    pass_id: int
    findings: dict[str, int]
    pending: int
    unseen: int
    rereads: int
    partitions: int
    quality_failures: int
    seconds: dict[str, float] = field(default_factory=dict)  # wall time per phase

    def line(self) -> str:
        kinds = ", ".join(f"{n} {k}" for k, n in sorted(self.findings.items())) or "no verdicts"
        return (f"audit pass {self.pass_id} at {self.at:%H:%M:%S}: {self.partitions} partitions; "
                f"{kinds}; {self.pending} pending ({self.unseen} unseen); "
                f"{self.rereads} ranges re-read; {self.quality_failures} failed expectations; "
                f"{sum(self.seconds.values()):.1f}s")


def audit_config(settings: Settings, compacted: frozenset[str] = frozenset(),
                 unknown: frozenset[str] = frozenset()) -> AuditConfig:
    a = settings.audit
    return AuditConfig(a.settle_seconds, a.lookback_seconds, a.unseen_after_seconds,
                       a.read_retention_seconds, compacted, unknown)


# ---- rows <-> model ------------------------------------------------------------------------

def _aware(v) -> datetime | None:
    # Spark hands pandas naive timestamps in the session time zone, which is UTC
    if v is None or v is pd.NaT or (isinstance(v, float) and pd.isna(v)):
        return None
    return pd.Timestamp(v).to_pydatetime().replace(tzinfo=UTC)


def _naive(v: datetime | None) -> datetime | None:
    return None if v is None else v.astimezone(UTC).replace(tzinfo=None)


def _opt(v):
    return None if v is None or (isinstance(v, float) and pd.isna(v)) else v


def _opt_int(v) -> int | None:
    v = _opt(v)
    return None if v is None or v is pd.NA else int(v)


def _hot_from_rows(pdf: pd.DataFrame) -> PartitionHot:
    hot = PartitionHot()
    for r in pdf.itertuples(index=False):
        if r.kind == "ack":
            hot.acks.append(AckRun(r.topic, int(r.partition), r.producer_id, r.run_id,
                                   int(r.seq), int(r.count), _opt_int(r.offset), _aware(r.time1),
                                   _aware(r.time2), _opt(r.error_name), r.acks,
                                   _opt_int(r.horizon)))
        elif r.kind == "read":
            hot.reads.append(ReadRun(r.topic, int(r.partition), int(r.offset), int(r.count),
                                     _opt(r.producer_id), _opt(r.run_id), _opt_int(r.seq),
                                     _aware(r.time1), r.source, r.status,
                                     _opt_int(r.leader_epoch)))
        elif r.kind == "judged":
            t = _aware(r.time1)
            hot.judged.append((AckRun(r.topic, int(r.partition), r.producer_id, r.run_id,
                                      int(r.seq), int(r.count), int(r.offset), t, t), t))
        elif r.kind == "observation":
            hot.observations.append((int(r.offset), _aware(r.time1)))
    return hot


def _row(kind: str, topic: str, partition: int, **kw) -> dict:
    return {"kind": kind, "topic": topic, "partition": partition, **kw}


def _hot_rows(topic: str, partition: int, hot: PartitionHot) -> list[dict]:
    rows = [_row("ack", topic, partition, producer_id=a.producer_id, run_id=a.run_id,
                 seq=a.seq, count=a.count, offset=a.offset, time1=_naive(a.first_ack),
                 time2=_naive(a.last_ack), error_name=a.error, acks=a.acks, horizon=a.horizon)
            for a in hot.acks]
    rows += [_row("read", topic, partition, producer_id=r.producer_id, run_id=r.run_id,
                  seq=r.seq, count=r.count, offset=r.offset, time1=_naive(r.read_time),
                  source=r.source, status=r.status, leader_epoch=r.leader_epoch)
             for r in hot.reads]
    rows += [_row("judged", topic, partition, producer_id=a.producer_id, run_id=a.run_id,
                  seq=a.seq, count=a.count, offset=a.offset, time1=_naive(t))
             for a, t in hot.judged]
    rows += [_row("observation", topic, partition, offset=f, time1=_naive(t))
             for f, t in hot.observations]
    for r in rows:
        r["row"] = "hot"
    return rows


def _step_fn(events: dict[tuple[str, int], list[ClusterEvent]], now: datetime,
             cfg: AuditConfig, log_ends: dict[tuple[str, int], int]):
    from pyspark.sql.types import StringType, TimestampType

    cols = column_names("audit_hot") + _EXTRA
    # all-null columns would come out float (NaN) and fail Arrow's string/timestamp conversion
    fields = _out_schema().fields
    strings = [f.name for f in fields if isinstance(f.dataType, StringType)]
    times = [f.name for f in fields if isinstance(f.dataType, TimestampType)]

    def step(key, pdf):  # no hints: pyspark would try to infer an eval type from them
        topic, partition = key[0], int(key[1])
        res = step_partition(topic, _hot_from_rows(pdf), events.get((topic, partition), []),
                             now, cfg, log_ends.get((topic, partition)))
        rows = _hot_rows(topic, partition, res.hot)
        for f in res.findings:
            rows.append(_row(f.kind, topic, partition, row="finding", finding_id=f.finding_id,
                             producer_id=f.producer_id, run_id=f.run_id, seq=f.seq,
                             count=f.count, offset=f.offset, time1=_naive(f.ack_time),
                             subkind=f.subkind, cause=f.cause,
                             evidence=json.dumps(f.evidence, default=str)))
        for q in res.rereads:
            rows.append(_row("reread", topic, partition, row="reread", offset=q.offset,
                             count=q.end - q.offset, source=q.reason))
        rows.append(_row("status", topic, partition, row="status", offset=res.clock.stream_frontier,
                         settled=res.clock.settled_frontier, count=res.pending,
                         unseen=res.unseen, time1=_naive(res.oldest_unseen)))
        out = pd.DataFrame(rows, columns=cols)
        out[strings] = out[strings].astype("string")
        for c in times:
            out[c] = pd.to_datetime(out[c])
        return out

    return step


@functools.cache
def _out_schema():
    """``audit_hot``'s columns plus what the pandas step returns besides hot rows."""
    from pyspark.sql import types as T

    extra = [T.StructField("row", T.StringType()), T.StructField("finding_id", T.StringType()),
             T.StructField("subkind", T.StringType()), T.StructField("evidence", T.StringType()),
             T.StructField("cause", T.StringType()), T.StructField("unseen", T.LongType()),
             T.StructField("settled", T.LongType())]
    return T.StructType([T.StructField(f.name, f.dataType, True)
                         for f in spark_schema("audit_hot").fields] + extra)


def consumed_row(r: ReadRun, batch_id: int) -> dict:
    """A read run as a row of the ``consumed`` table (re-reads; recorded test histories)."""
    stamped = r.producer_id is not None
    return {"topic": r.topic, "partition": r.partition, "offset": r.offset, "count": r.count,
            "kafka_timestamp": None, "stamped": stamped,
            "stamp_error": None if stamped or r.status != "record" else "foreign or malformed",
            "producer_id": r.producer_id, "run_id": r.run_id, "seq": r.seq,
            "checksum_ok": True if stamped else None, "read_time": r.read_time,
            "batch_id": batch_id, "source": r.source, "status": r.status,
            "leader_epoch": r.leader_epoch}


# ---- sources -------------------------------------------------------------------------------

# the new rows of acks and consumed as hot rows: column -> SQL over the table's columns
_ACK_AS_HOT = {"kind": "'ack'", "topic": "topic", "partition": "`partition`",
               "producer_id": "producer_id", "run_id": "run_id", "seq": "seq",
               "count": "`count`", "offset": "`offset`", "time1": "ack_time",
               "time2": "last_ack_time", "error_name": "error_name", "acks": "acks",
               "leader_epoch": "leader_epoch"}
_STAMPED = "stamped AND coalesce(checksum_ok, true)"  # a bad checksum reads as foreign
_READ_AS_HOT = {"kind": "'read'", "topic": "topic", "partition": "`partition`",
                "producer_id": f"CASE WHEN {_STAMPED} THEN producer_id END",
                "run_id": f"CASE WHEN {_STAMPED} THEN run_id END",
                "seq": f"CASE WHEN {_STAMPED} THEN seq END", "count": "`count`",
                "offset": "`offset`", "time1": "read_time", "source": "source",
                "status": "status", "leader_epoch": "leader_epoch"}


def _new_rows(spark, settings: Settings, progress: Progress):
    """The rows added to acks and consumed since the last pass, as hot rows; the source
    versions they reach; by table, Arrow holding at least the new rows' key columns.

    The new files are many and small (a producer's ledger commits every second): when
    their rows are few (``spark.driver_rows``) pyarrow reads them on the driver in one
    threaded scan, handed to Spark as a local relation; else Spark scans them."""
    import pyarrow.dataset as ds

    schema = _out_schema()
    frames, versions, keys = [], {}, {}
    for table, since in (("acks", progress.acks_version), ("consumed", progress.consumed_version)):
        path = settings.table_path(table)
        if not table_exists(path):
            versions[table] = since
            continue
        versions[table], files, count = files_added_since(path, since)
        if not files:
            continue
        found = ds.dataset(files, format="parquet", schema=arrow_schema(table))
        if count is not None and count <= settings.spark.driver_rows:
            keys[table] = found.to_table()
            df = spark.createDataFrame(keys[table], schema=spark_schema(table))
        else:
            keys[table] = found.to_table(columns=_KEY_COLUMNS[table])
            df = spark.read.schema(spark_schema(table)).parquet(*files)
        # one projection as SQL (a column expression each costs the driver a JVM round trip)
        src = _ACK_AS_HOT if table == "acks" else _READ_AS_HOT
        frames.append(df.selectExpr(*[
            f"CAST({src.get(f.name, 'NULL')} AS {f.dataType.simpleString()}) AS `{f.name}`"
            for f in schema.fields]))
    return frames, versions, keys


_KEY_COLUMNS = {"acks": ["topic", "partition", "offset"], "consumed": ["topic", "partition"]}


def _events(settings: Settings) -> dict[tuple[str, int], list[ClusterEvent]]:
    """Every cluster event, by partition: leader changes for the re-read gates, ISR sizes
    for the exposure gate (a small table, read on the driver with delta-rs)."""
    def opt(v):
        return tuple(v) if v is not None else None

    out: dict[tuple[str, int], list[ClusterEvent]] = {}
    for r in read_table(settings.table_path("cluster_events"), "cluster_events").to_pylist():
        out.setdefault((r["topic"], r["partition"]), []).append(ClusterEvent(
            r["event_time"].astimezone(UTC), r["topic"], r["partition"], r["kind"],
            r["leader"], r["previous_leader"], opt(r["isr"]), opt(r["previous_isr"]),
            opt(r["replicas"])))
    return out


def _partitions(settings: Settings, progress: Progress,
                new: dict[str, pa.Table]) -> dict[tuple[str, int], bool]:
    """Every partition the pass judges, and whether it holds a failed write without a
    horizon yet (its log end is needed). Read on the driver from the key columns of the
    committed state and of the new rows: no Spark job for a handful of columns."""
    hot = read_table(settings.table_path("audit_hot"), "audit_hot",
                     ["kind", "topic", "partition", "offset", "horizon"],
                     where=_generation(progress) & (pc.field("kind") != "progress"))
    tables = [hot]
    if "acks" in new:
        acks = new["acks"].select(_KEY_COLUMNS["acks"])
        tables.append(acks.append_column("kind", pa.array(["ack"] * acks.num_rows, pa.string()))
                      .append_column("horizon", pa.nulls(acks.num_rows, pa.int64())))
    if "consumed" in new:
        reads = new["consumed"].select(_KEY_COLUMNS["consumed"])
        tables.append(reads.append_column("kind",
                                          pa.array(["read"] * reads.num_rows, pa.string())))
    out: dict[tuple[str, int], bool] = {}
    for t in tables:
        cols = {c: t.column(c).to_pylist() for c in t.column_names}
        n = t.num_rows
        unplaced = [k == "ack" and o is None and h is None and p >= 0 for k, o, h, p in zip(
            cols["kind"], cols.get("offset", [None] * n), cols.get("horizon", [None] * n),
            cols["partition"], strict=True)]
        for topic, partition, u in zip(cols["topic"], cols["partition"], unplaced, strict=True):
            out[(topic, partition)] = out.get((topic, partition), False) or u
    return out


def _generation(progress: Progress) -> pc.Expression:
    """The committed state's rows of ``audit_hot`` (those of its generation)."""
    g = pc.field("pass_id")
    return g.is_null() if progress.generation is None else g == progress.generation


def _died_after(path: str, committed: int) -> bool:
    """Whether ``findings`` holds rows of a pass after the committed one (it died before its
    commit point). Answered from the Delta log's file statistics; a scan only if some file
    lacks them."""
    try:
        top = max_in_files(path, "pass_id")
    except LookupError:
        return True  # cannot tell without reading: let the delete scan
    return top is not None and top > committed


class ClusterLookups:
    """What a pass asks the audited cluster: cleanup policies, log ends, direct re-reads.

    Every answer may be partial: a topic whose policy cannot be read is
    *unknown* (verdicts that rest on it wait), a partition whose log end cannot
    be read gets none this pass, a range that cannot be re-read is asked again
    next pass. Tests that replay recorded histories pass their own lookups.
    """

    def __init__(self, settings: Settings) -> None:
        self.settings = settings
        self._client = None

    def _admin(self):
        """One admin client for every pass that shares these lookups (kept referenced while
        its futures resolve)."""
        if self._client is None:
            from confluent_kafka.admin import AdminClient

            from kafka_audit.clients import client_logger

            self._client = AdminClient({"bootstrap.servers": self.settings.cluster.bootstrap,
                                        "logger": client_logger()})
        return self._client

    def policies(self, topics: set[str]) -> tuple[frozenset[str], frozenset[str]]:
        """(compacted topics, topics whose policy is unknown)."""
        from confluent_kafka.admin import ConfigResource

        if not topics:
            return frozenset(), frozenset()
        admin = self._admin()
        compacted, unknown = set(), set()
        futures = admin.describe_configs([ConfigResource("topic", t) for t in sorted(topics)])
        for res, fut in futures.items():
            try:
                policy = fut.result(timeout=10).get("cleanup.policy")
            except Exception as exc:  # noqa: BLE001 - unknown this pass; verdicts wait
                log.warning("cleanup.policy of %s unknown: %s", res.name, exc)
                unknown.add(res.name)
                continue
            if policy is not None and "compact" in (policy.value or ""):
                compacted.add(res.name)
        return frozenset(compacted), frozenset(unknown)

    def log_ends(self, partitions: list[tuple[str, int]]) -> dict[tuple[str, int], int]:
        """The high watermark of each partition that answers."""
        from confluent_kafka import TopicPartition
        from confluent_kafka.admin import OffsetSpec

        if not partitions:
            return {}
        admin = self._admin()
        futures = admin.list_offsets({TopicPartition(t, p): OffsetSpec.latest()
                                      for t, p in partitions}, request_timeout=10)
        out = {}
        for tp, fut in futures.items():
            try:
                out[(tp.topic, tp.partition)] = int(fut.result(timeout=15).offset)
            except Exception as exc:  # noqa: BLE001 - no horizon this pass; asked again
                log.warning("log end of %s/%s unknown: %s", tp.topic, tp.partition, exc)
        return out

    def reread(self, requests: list[Reread]) -> list[ReadRun]:
        from kafka_audit.jobs.reread import reread

        return reread(self.settings.cluster.bootstrap, requests,
                      self.settings.audit.reread_timeout_seconds)


# ---- the pass ------------------------------------------------------------------------------

def run_audit_pass(spark, settings: Settings, now: datetime | None = None,
                   lookups: ClusterLookups | None = None) -> AuditSummary:
    """One pass; ``lookups`` defaults to asking the audited cluster (a caller that runs
    passes in a loop passes one ``ClusterLookups`` to all of them).

    Spark work is kept to the judge (``groupBy().applyInPandas``, checkpointed), one
    collect of what the driver needs from it (verdict totals, row counts, re-reads,
    status) and two Delta appends (findings, then the state as the commit point), each
    committed from the driver with delta-rs when small. The partitions to look
    up are read on the driver, and the great-expectations check of the new acks runs there
    alongside the Spark work."""
    upgrade_tables(settings, ("acks", "consumed", "cluster_events", "findings", "audit_hot",
                              "partition_state"))
    with ThreadPoolExecutor(1, thread_name_prefix="kafka-audit-dq") as pool:
        dq = pool.submit(quality.validate_new_acks, settings)  # delta-rs + pandas, no Spark
        summary = _judge_and_commit(spark, settings, now or datetime.now(UTC),
                                    lookups or ClusterLookups(settings))
        t = time.perf_counter()
        failures = dq.result()
        summary.seconds["quality wait"] = round(time.perf_counter() - t, 3)
    return replace(summary, quality_failures=failures)


def _judge_and_commit(spark, settings: Settings, now: datetime,
                      lookups: ClusterLookups) -> AuditSummary:
    from delta.tables import DeltaTable
    from pyspark.sql import functions as F

    paths = {t: settings.table_path(t) for t in
             ("findings", "audit_hot", "consumed", "partition_state")}
    clock = _PhaseClock()
    progress = read_progress(settings)
    pass_id = progress.pass_id + 1
    if _died_after(paths["findings"], progress.pass_id):
        DeltaTable.forPath(spark, paths["findings"]).delete(F.col("pass_id") >= pass_id)

    frames, versions, new = _new_rows(spark, settings, progress)
    schema = _out_schema()
    hot_cols = set(column_names("audit_hot"))
    # the committed state: the rows of its generation (null-safe: tables from before them)
    parts = [spark.read.format("delta").load(paths["audit_hot"])
             .where(F.col("pass_id").eqNullSafe(F.lit(progress.generation).cast("long"))
                    & (F.col("kind") != "progress"))
             .select(*[F.col(f.name) if f.name in hot_cols
                       else F.lit(None).cast(f.dataType).alias(f.name) for f in schema.fields])
             ] if table_exists(paths["audit_hot"]) else []
    parts += frames
    if not parts:
        return AuditSummary(now, progress.pass_id, {}, 0, 0, 0, 0, 0)
    rows = parts[0]
    for p in parts[1:]:
        rows = rows.unionByName(p)
    clock.mark("prepare")
    keys = _partitions(settings, progress, new)
    cfg = audit_config(settings, *lookups.policies({t for t, _ in keys}))
    log_ends = lookups.log_ends([k for k, unplaced in keys.items() if unplaced])
    clock.mark("lookups")
    out = (rows.groupBy("topic", "partition")
           .applyInPandas(_step_fn(_events(settings), now, cfg, log_ends), schema)
           .localCheckpoint())
    # one collect: verdict totals, rows by use, re-read requests, per-partition status
    small = (out.where(F.col("row") == "finding").groupBy("kind")
             .agg(F.sum("count").alias("count"))
             .select(F.lit("total").alias("row"), "kind", "count")
             .unionByName(out.groupBy("row").agg(F.count(F.lit(1)).alias("count"))
                          .select(F.lit("rows").alias("row"), F.col("row").alias("kind"), "count"))
             .unionByName(out.where(F.col("row").isin("reread", "status")),
                          allowMissingColumns=True)
             .collect())
    out_rows = {r.kind: int(r["count"]) for r in small if r.row == "rows"}
    clock.mark("judge")
    # 1. findings of this pass
    detected = now.astimezone(UTC).strftime("%Y-%m-%d %H:%M:%S.%f")  # session zone is UTC
    findings = (out.where(F.col("row") == "finding")
                .selectExpr("finding_id", "kind", "subkind", "topic", "`partition`", "`offset`",
                            "producer_id", "run_id", "seq", "`count`", "time1 AS ack_time",
                            "coalesce(evidence, '{}') AS evidence", "cause",
                            f"TIMESTAMP '{detected}' AS detected_at",
                            f"CAST({pass_id} AS BIGINT) AS pass_id"))
    counts = {r.kind: int(r["count"]) for r in small if r.row == "total"}
    write_delta(findings, paths["findings"], "findings", settings.spark.driver_rows,
                rows=out_rows.get("finding", 0))

    clock.mark("findings")
    # 2. direct re-reads: consumed rows the next pass judges with
    requests = [Reread(r.topic, r.partition, r.offset, r.offset + r["count"], r.source)
                for r in small if r.row == "reread"]
    answers = lookups.reread(requests)
    append_once(paths["consumed"], "consumed", [consumed_row(a, pass_id) for a in answers],
                REREAD_APP, pass_id)

    clock.mark("reread")
    # 3. the commit point: the new state and the progress row, one generation, one commit.
    # An append; every hot_rewrite_passes passes, and over a table from before
    # generations, an overwrite that drops the older generations (through Spark's
    # writer, for a state too large for the driver, an append is one job, an overwrite five).
    done = Progress(pass_id, versions.get("acks", -1), versions.get("consumed", -1))
    fields = spark_schema("audit_hot").fields
    marker = spark.range(1).select(F.lit("progress").alias("kind"), F.lit("").alias("topic"),
                                   F.lit(-1).alias("partition"),
                                   F.lit(done.to_json()).alias("progress"))
    hot = (out.where(F.col("row") == "hot").select(*[f.name for f in fields if f.name != "pass_id"])
           .unionByName(marker, allowMissingColumns=True)
           .selectExpr(*[f"CAST({pass_id if f.name == 'pass_id' else f'`{f.name}`'} "
                         f"AS {f.dataType.simpleString()}) AS `{f.name}`" for f in fields]))
    rewrite = pass_id % settings.audit.hot_rewrite_passes == 0 or (
        progress.pass_id > 0 and progress.generation is None)
    write_delta(hot.coalesce(1),  # one small file: the state is bounded by the unsettled window
                paths["audit_hot"], "audit_hot", settings.spark.driver_rows,
                rows=out_rows.get("hot", 0) + 1, mode="overwrite" if rewrite else "append")

    clock.mark("commit")
    # 4. per-partition status for the API (a few rows: delta-rs, idempotent by pass id)
    status = [r for r in small if r.row == "status"]
    append_once(paths["partition_state"], "partition_state", [
        {"topic": r.topic, "partition": r.partition, "frontier": int(r.offset),
         "settled_frontier": int(r.settled), "observed_at": now, "pending": int(r["count"]),
         "unseen": int(r.unseen), "oldest_unseen": r.time1 and r.time1.astimezone(UTC),
         "pass_id": pass_id} for r in status], STATE_APP, pass_id)
    clock.mark("status")
    return AuditSummary(now, pass_id, counts, sum(int(r["count"]) for r in status),
                        sum(int(r.unseen) for r in status), len(requests), len(status),
                        0, clock.seconds)


class _PhaseClock:
    def __init__(self) -> None:
        self.seconds: dict[str, float] = {}
        self._t = time.perf_counter()

    def mark(self, phase: str) -> None:
        t = time.perf_counter()
        self.seconds[phase] = round(t - self._t, 3)
        self._t = t
