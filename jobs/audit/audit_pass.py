"""One audit pass on Spark: new acks and reads in, findings and the next state out.

* sources: the rows appended to ``acks`` and ``consumed`` since the last committed pass
  (:func:`~kafka_audit.store.files_added_since`: the files the commits after the
  versions it consumed added as data changes, so a compaction never makes old rows look
  new; the pass's own re-read commits are left out: it judged them already),
  ``audit_hot`` (the state the last pass kept, :mod:`~kafka_audit.jobs.audit.hot_state`) and
  ``cluster_events`` (read incrementally across the passes of one loop, :class:`Warm`);
  new files holding few rows are read with pyarrow;
* rule: :func:`kafka_audit.jobs.core.engine.step_partition` per ``(topic, partition)``
  with ``groupBy().applyInPandas``: the same pure function the unit and
  property tests exercise;
* re-reads in the pass: the ranges the judge suspects are re-read directly (within
  ``steady.rejudge_timeout_seconds``) and the partitions they belong to are judged once
  more at once, on the driver, by the same function at the same ``now``: exactly a
  second pass at the same instant whose new rows are the re-reads. A loss is thus
  reported by the pass that first suspects it, not one pass later; a range not answered
  in time is asked again by the next pass, as before;
* sinks, in this order: ``findings`` (both judgements, tagged with the pass id),
  the re-reads into ``consumed`` (``source = reread``, as an idempotent transaction keyed
  by the pass id), ``audit_hot`` (the new state *and* the progress row appended as one
  generation, tagged with the pass id: this commit is the pass's commit point; every
  ``audit.hot_rewrite_passes`` passes it overwrites instead, dropping older
  generations), ``partition_state`` (frontier, pending and unseen per
  partition, delta-rs), ``dq_results`` (great-expectations over the new acks; in a loop,
  beside the passes: :mod:`~kafka_audit.jobs.upkeep.maintenance`);
  findings and state go through :func:`~kafka_audit.jobs.sink.write_delta`
  (delta-rs from the driver when small, else Spark's Delta writer);
* exactly once: a pass first deletes findings whose pass id is above the
  committed one (a pass that died before its commit point), then redoes that
  pass. Re-read and state appends are idempotent Delta transactions keyed by
  the pass id. So a replayed or restarted pass writes no finding twice and
  misses none. The re-reads of a pass that died are never taken in (later passes
  skip every re-read commit): the redone pass re-reads for itself;
* Spark's memory: the judged rows are a ``localCheckpoint``, released when the pass
  ends (:func:`~kafka_audit.jobs.sink.release`);
* stop: a pass run with a :class:`PassStop` ends when its ``stop`` is set, at its next
  phase (or partition judged on the driver), its Spark jobs cancelled, until it writes its
  first row; from then on it runs to its end.
"""

from __future__ import annotations

import json
import logging
import threading
import time
from collections.abc import Callable
from concurrent.futures import ThreadPoolExecutor
from contextlib import contextmanager
from dataclasses import dataclass, field, fields, replace
from datetime import UTC, datetime, timedelta

import pyarrow as pa
import pyarrow.compute as pc

from kafka_audit.jobs.audit import quality
from kafka_audit.jobs.audit.hot_state import (
    arrow_step_fn,
    consumed_row,
    hot_table,
    step_arrow_schema,
    step_fn,
    step_schema,
)
from kafka_audit.jobs.audit.lookups import ClusterLookups
from kafka_audit.jobs.core.engine import AuditConfig, PartitionHot
from kafka_audit.jobs.core.model import ClusterEvent, Finding, ReadRun, Reread
from kafka_audit.jobs.core.unrecorded import unrecorded_findings
from kafka_audit.jobs.sink import delete_where, release, write_delta
from kafka_audit.schemas.events import BLIND, BROKER_FENCED, BROKER_UNFENCED
from kafka_audit.schemas.tables import LEDGER_NOTES, arrow_schema, column_names, spark_schema
from kafka_audit.schemas.verdicts import Kind
from kafka_audit.settings import Settings
from kafka_audit.storage import spark_uri
from kafka_audit.store import (
    CommitNotes,
    Progress,
    append_once,
    check_table,
    committed_progress,
    files_added_since,
    max_in_files,
    one_snapshot_each,
    partition_slices,
    read_admitting,
    read_files,
    read_table,
    rows_in_files,
    table_exists,
    write_arrow,
)

__all__ = ["AuditSummary", "run_audit_pass", "audit_config", "Warm", "EventLog",
           "judge_on_driver", "widen", "PassStop", "PassInterrupted"]

log = logging.getLogger(__name__)
REREAD_APP = "kafka_audit_reread"
STATE_APP = "kafka_audit_partition_state"
_INPUTS = ("acks", "consumed", "cluster_events", "findings", "audit_hot", "partition_state")


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
    #: when the writes that look lost now will all have settled, the earliest over the
    #: partitions (None: none look lost): a pass started then judges them at once
    suspects_settle: datetime | None = None

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
                       a.read_retention_seconds, compacted, unknown, a.beyond_end_seconds,
                       a.rabbit_margin_seconds)


# ---- sources ----

# the new rows of acks and consumed as hot rows: column -> SQL over the table's columns
_ACK_AS_HOT = {"kind": "'ack'", "topic": "topic", "partition": "`partition`",
               "producer_id": "producer_id", "run_id": "run_id", "seq": "seq",
               "count": "`count`", "offset": "`offset`", "first_ack": "ack_time",
               "last_ack": "last_ack_time", "error_name": "error_name", "acks": "acks",
               "leader_epoch": "leader_epoch", "broker": "broker"}
_STAMPED = "stamped AND coalesce(checksum_ok, true)"  # a bad checksum reads as foreign
_READ_AS_HOT = {"kind": "'read'", "topic": "topic", "partition": "`partition`",
                "producer_id": f"CASE WHEN {_STAMPED} THEN producer_id END",
                "run_id": f"CASE WHEN {_STAMPED} THEN run_id END",
                # a RabbitMQ barrier's seq is when its publish began (rabbit_rules.py)
                "seq": f"CASE WHEN {_STAMPED} OR status = 'barrier' THEN seq END",
                "count": "`count`",
                "offset": "`offset`", "read_time": "read_time", "source": "source",
                "status": "status", "leader_epoch": "leader_epoch"}


class PassInterrupted(Exception):  # noqa: N818 - named for what happened, not "Error"
    """A pass stopped before its first write (the service is stopping): nothing of it was
    written, and the next start judges the same rows."""


class PassStop:
    """When a pass stops for the service's stop (``stop`` set): at its next phase, or next
    partition judged on the driver (:meth:`check`), and its running Spark jobs, started
    from the thread that carries :data:`TAG` (:meth:`tag`), cancelled (:meth:`cancel`), as
    long as it has written nothing (:meth:`writes`; a write before the judgement runs
    :meth:`shielded`). Once it writes it runs to its end: its writes are safe to cut (a
    killed pass is redone), but a pass cut between its findings and its commit point costs
    the next start a delete of those findings. Without it, a stop during a long judgement
    (95 s for a catch-up's, bench/catchup.py) outlived the service's
    ``stop_timeout_seconds``: the service then stopped Spark under the pass and exited
    with 1, logging the pass's failure and Spark's."""

    TAG = "kafka-audit-pass"

    def __init__(self, stop: threading.Event, spark=None) -> None:
        self.stop = stop
        self._sc = None if spark is None else spark.sparkContext
        # held while jobs are cancelled, and by what must not be: a write begun
        self._lock = threading.Lock()
        self._writing = False
        self._shielded = False
        self.cancelled = False  # Spark jobs of a pass were cancelled

    def tag(self) -> None:
        """Tag the Spark jobs the calling thread starts from now on (one thread: pyspark
        pins a Python thread to a JVM thread, whose properties the tag is)."""
        if self._sc is not None:
            self._sc.addJobTag(self.TAG)

    def begin(self) -> None:
        """A pass begins: nothing written yet."""
        with self._lock:
            self._writing = False
        self.check()

    def check(self) -> None:
        """Raise :class:`PassInterrupted` if the stop is set and the pass wrote nothing."""
        if self.stop.is_set() and not self._writing:
            raise PassInterrupted("interrupted before it wrote anything")

    def writes(self) -> None:
        """The pass is about to write (:meth:`check` first): it runs to its end now."""
        with self._lock:
            self.check()
            self._writing = True

    @contextmanager
    def shielded(self):
        """A write before the judgement (the findings of a pass that died), never cancelled:
        :meth:`check` first, and again after it."""
        with self._lock:
            self.check()
            self._shielded = True
        try:
            yield
        finally:
            with self._lock:
                self._shielded = False
        self.check()

    def cancel(self) -> bool:
        """Cancel the tagged Spark jobs running now, unless the pass writes (or runs a
        shielded write: nothing cancelled this time); whether the pass may still be
        cancelled (False: it writes, and runs to its end)."""
        with self._lock:  # a write cannot begin meanwhile
            if self._writing:
                return False
            if self._shielded:
                return True
            self.cancelled = True
            if self._sc is not None:
                self._sc.cancelJobsWithTag(self.TAG)
        return True

    def interrupted(self, exc: BaseException) -> bool:
        """Whether ``exc``, raised by a pass, is this stop's doing: a :class:`PassInterrupted`,
        or a Spark job's cancellation once jobs were cancelled (any other error is what it
        is)."""
        if not self.stop.is_set():
            return False
        if isinstance(exc, PassInterrupted):
            return True
        if not self.cancelled:
            return False
        try:
            text = str(exc)  # a Py4JJavaError asks the JVM for the Java exception's text
        except Exception:  # noqa: BLE001 - the JVM does not answer: not known to be ours
            return False
        return "cancel" in text.lower()


@dataclass(frozen=True)
class _Source:
    """The rows ``acks`` or ``consumed`` gained since the committed pass: the files holding
    them, their row count (None: unknown) and the table version they reach."""

    table: str
    version: int
    files: list[str]
    count: int | None
    #: the ledgers' notes of the commits taken in (``acks``: ``(version, note)``)
    notes: tuple = ()


def _sources(settings: Settings, progress: Progress) -> dict[str, _Source]:
    out = {}
    for table, since in (("acks", progress.acks_version), ("consumed", progress.consumed_version)):
        path = settings.table_path(table)
        if not table_exists(path):
            out[table] = _Source(table, since, [], 0)
            continue
        # re-read commits were judged by the pass that made them (or belong to one that
        # died, whose redo re-read for itself): never taken in again
        skip = (REREAD_APP,) if table == "consumed" else ()
        notes = CommitNotes(LEDGER_NOTES) if table == "acks" else None
        out[table] = _Source(table, *files_added_since(path, since, skip, notes),
                             tuple(notes.found) if notes is not None else ())
        if notes is not None and notes.unread:
            log.warning("acks: the commit files of versions %d-%d are gone (the log's "
                        "cleanup): what their ledgers noted of delivery reports they could "
                        "not record, if anything, is out of reach", min(notes.unread),
                        max(notes.unread))
    return out


def _new_rows(spark, settings: Settings, sources: dict[str, _Source]):
    """The new rows of acks and consumed as hot rows (Spark); by table, Arrow holding at
    least the new rows' key columns.

    The new files are many and small (a producer's ledger commits every second): when
    their rows are few (``spark.driver_rows``) pyarrow reads them on the driver in one
    threaded scan, handed to Spark as a local relation; else Spark scans them."""
    schema = step_schema()
    frames, keys = [], {}
    for table, src in sources.items():
        if not src.files:
            continue
        if src.count is not None and src.count <= settings.spark.driver_rows:
            keys[table] = read_files(src.files, table)
            df = spark.createDataFrame(keys[table], schema=spark_schema(table))
        else:
            keys[table] = read_files(src.files, table, _KEY_COLUMNS[table])
            df = spark.read.schema(spark_schema(table)).parquet(*map(spark_uri, src.files))
        # one projection as SQL (a column expression each costs the driver a JVM round trip)
        hot = _ACK_AS_HOT if table == "acks" else _READ_AS_HOT
        frames.append(df.selectExpr(*[
            f"CAST({hot.get(f.name, 'NULL')} AS {f.dataType.simpleString()}) AS `{f.name}`"
            for f in schema.fields]))
    return frames, keys


def _as_hot(table: str, data: pa.Table) -> pa.Table:
    """New rows of ``acks`` or ``consumed`` as hot rows, on the driver: the projection of
    :data:`_ACK_AS_HOT` / :data:`_READ_AS_HOT` in pyarrow (a read whose stamp is absent,
    malformed or fails its checksum reads as foreign: no producer, run or seq)."""
    schema = step_arrow_schema()
    n = data.num_rows
    if table == "acks":
        kind = "ack"
        cols = {"topic": "topic", "partition": "partition", "producer_id": "producer_id",
                "run_id": "run_id", "seq": "seq", "count": "count", "offset": "offset",
                "first_ack": "ack_time", "last_ack": "last_ack_time",
                "error_name": "error_name", "acks": "acks", "leader_epoch": "leader_epoch",
                "broker": "broker"}
        mask = None
    else:
        kind = "read"
        cols = {"topic": "topic", "partition": "partition", "producer_id": "producer_id",
                "run_id": "run_id", "seq": "seq", "count": "count", "offset": "offset",
                "read_time": "read_time", "source": "source", "status": "status",
                "leader_epoch": "leader_epoch"}
        mask = pc.fill_null(pc.and_kleene(data.column("stamped"),
                                          pc.fill_null(data.column("checksum_ok"), True)), False)
    arrays = []
    for f in schema:
        if f.name == "kind":
            arrays.append(pa.array([kind] * n, pa.string()))
        elif f.name in cols:
            col = data.column(cols[f.name]).cast(f.type)
            if mask is not None and f.name in ("producer_id", "run_id", "seq"):
                keep = mask if f.name != "seq" else pc.or_(mask, pc.fill_null(pc.equal(
                    data.column("status"), "barrier"), False))
                col = pc.if_else(keep, col, pa.nulls(n, f.type))
            arrays.append(col)
        else:
            arrays.append(pa.nulls(n, f.type))
    return pa.Table.from_arrays(arrays, schema=schema)


_KEY_COLUMNS = {"acks": ["topic", "partition", "offset"], "consumed": ["topic", "partition"]}


_LOG_END = "log_end" in {f.name for f in fields(ClusterEvent)}


class EventLog:
    """``cluster_events`` as read so far: each refresh reads only the rows appended since
    the last (the table is append-only; :func:`~kafka_audit.store.files_added_since`),
    so a pass's cost does not grow with the table. One per loop (:class:`Warm`); a new one
    reads the whole table once."""

    def __init__(self) -> None:
        self.version = -1
        self.by_partition: dict[tuple[str, int], list[ClusterEvent]] = {}
        self.gaps: dict[datetime, datetime | None] = {}  # the watcher's blind gaps: start -> end
        self.brokers: list[ClusterEvent] = []  # brokers fenced and unfenced, cluster-wide

    def refresh(self, settings: Settings) -> _Broadcast:
        """Every cluster event, by partition: leader changes for the re-read gates, ISR sizes
        for the exposure gate, the watcher's gaps and the brokers' fencing in every
        partition's list (:func:`~kafka_audit.jobs.core.rules.partition_events`)."""
        path = settings.table_path("cluster_events")
        if table_exists(path):
            current, files, _ = files_added_since(path, self.version)
            if files:
                self._add(read_files(files, "cluster_events").to_pylist())
            self.version = current
        blind = [ClusterEvent(start, "", -1, BLIND, until=until)
                 for start, until in self.gaps.items()]
        return _Broadcast(self.by_partition, [*blind, *self.brokers])

    def _add(self, rows: list[dict]) -> None:
        def opt(v):
            return tuple(v) if v is not None else None

        for r in rows:
            if r["kind"] == BLIND:  # an open row, later closed by another with the same start
                until = r["until"] and r["until"].astimezone(UTC)
                start = r["event_time"].astimezone(UTC)
                self.gaps[start] = max(filter(None, [self.gaps.get(start), until]),
                                       default=None)
                continue
            if r["kind"] in (BROKER_FENCED, BROKER_UNFENCED):
                self.brokers.append(_broker_event(r))
                continue
            extra = {"log_end": r.get("log_end")} if _LOG_END else {}
            self.by_partition.setdefault((r["topic"], r["partition"]), []).append(ClusterEvent(
                r["event_time"].astimezone(UTC), r["topic"], r["partition"], r["kind"],
                r["leader"], r["previous_leader"], opt(r["isr"]), opt(r["previous_isr"]),
                opt(r["replicas"]), previous_elr=opt(r.get("previous_eligible_leader_replicas")),
                **extra))


def _broker_event(r: dict) -> ClusterEvent:
    """A ``broker_*`` row as a cluster-wide event; its broker from the row's detail (a row
    without one still counts as the event, naming no broker)."""
    try:
        broker = json.loads(r["detail"] or "{}").get("broker")
    except (TypeError, ValueError, AttributeError):
        broker = None
    return ClusterEvent(r["event_time"].astimezone(UTC), "", -1, r["kind"],
                        broker=broker if isinstance(broker, int) else None)


@dataclass
class Warm:
    """What a loop keeps between its passes: the cluster events read so far."""

    events: EventLog = field(default_factory=EventLog)


class _Broadcast(dict):
    """Events by partition, with the watcher's gaps (cluster-wide) in every partition's."""

    def __init__(self, by_partition: dict, everywhere: list[ClusterEvent]) -> None:
        super().__init__({k: [*v, *everywhere] for k, v in by_partition.items()})
        self.everywhere = everywhere

    def get(self, key, default=None):  # noqa: D401 - dict.get, gaps for unseen partitions
        return super().get(key, self.everywhere if self.everywhere else default)


def _partitions(settings: Settings, progress: Progress, new: dict[str, pa.Table],
                state: pa.Table | None = None, now: datetime | None = None
                ) -> dict[tuple[str, int], bool]:
    """Every partition the pass judges, and whether its log end is needed: it holds a failed
    write without a horizon yet, or a pending write acknowledged more than
    ``audit.beyond_end_seconds`` before ``now`` (it may lie past the log's end,
    ``rules.beyond_end``). Read on the driver from the key columns of the committed state
    (``state`` when the judge read it already) and of the new rows: no Spark job for a
    handful of columns."""
    columns = ["kind", "topic", "partition", "offset", "horizon", "last_ack"]
    hot = state.select(columns) if state is not None else _committed_state(
        settings.table_path("audit_hot"), progress, columns)
    tables = [hot]
    if "acks" in new:
        acks = new["acks"].select(_KEY_COLUMNS["acks"])
        tables.append(acks.append_column("kind", pa.array(["ack"] * acks.num_rows, pa.string()))
                      .append_column("horizon", pa.nulls(acks.num_rows, pa.int64())))
    if "consumed" in new:
        reads = new["consumed"].select(_KEY_COLUMNS["consumed"])
        tables.append(reads.append_column("kind",
                                          pa.array(["read"] * reads.num_rows, pa.string())))
    before = None if now is None else pa.scalar(
        now - timedelta(seconds=settings.audit.beyond_end_seconds), pa.timestamp("us", "UTC"))
    out: dict[tuple[str, int], bool] = {}
    for t in tables:
        old = None  # the state's placed acks old enough to lie past the log's end, in Arrow
        if before is not None and "last_ack" in t.column_names:
            old = pc.fill_null(pc.and_(pc.is_valid(t.column("offset")), pc.less(
                pc.cast(t.column("last_ack"), pa.timestamp("us", "UTC")), before)), False)
            t = t.drop_columns(["last_ack"])
        cols = {c: t.column(c).to_pylist() for c in t.column_names}
        n = t.num_rows
        unplaced = [k == "ack" and o is None and h is None and p >= 0 for k, o, h, p in zip(
            cols["kind"], cols.get("offset", [None] * n), cols.get("horizon", [None] * n),
            cols["partition"], strict=True)]
        if old is not None:
            unplaced = [u or o for u, o in zip(unplaced, old.to_pylist(), strict=True)]
        for topic, partition, u in zip(cols["topic"], cols["partition"], unplaced, strict=True):
            out[(topic, partition)] = out.get((topic, partition), False) or u
    return out


def _committed_state(path: str, progress: Progress,
                     columns: list[str] | None = None) -> pa.Table:
    """The committed state's rows of ``audit_hot``: its generation's files alone when the
    log's statistics name them, else a scan of the table (none before the first pass)."""
    if progress.generation is None:
        return read_files([], "audit_hot", columns)
    try:
        return read_admitting(path, "audit_hot", "pass_id", progress.generation, columns,
                              pc.field("kind") != "progress")
    except LookupError:
        return read_table(path, "audit_hot", columns,
                          where=_generation(progress) & (pc.field("kind") != "progress"))


def _generation(progress: Progress) -> pc.Expression:
    """The committed state's rows of ``audit_hot`` (those of its generation)."""
    return pc.field("pass_id") == pa.scalar(progress.generation, pa.int64())


def _died_after(path: str, committed: int) -> bool:
    """Whether ``findings`` holds rows of a pass after the committed one (it died before its
    commit point). Answered from the Delta log's file statistics; a scan only if some file
    lacks them."""
    try:
        top = max_in_files(path, "pass_id")
    except LookupError:
        return True  # cannot tell without reading: let the delete scan
    return top is not None and top > committed


# ---- the pass ----

def run_audit_pass(spark, settings: Settings, now: datetime | None = None,
                   lookups: ClusterLookups | None = None, warm: Warm | None = None,
                   quality: bool = True, stop: PassStop | None = None) -> AuditSummary:
    """One pass; ``lookups`` defaults to asking the audited cluster and ``warm`` to a fresh
    :class:`Warm` (a caller that runs passes in a loop passes one of each to all of them).
    ``quality``: also check the new acks with great-expectations, in a thread beside the
    Spark work (a loop does that beside its passes instead).

    Spark work is kept to the judge (``groupBy().applyInPandas``, checkpointed), one
    collect of what the driver needs from it (verdict totals, row counts, re-reads,
    status) and two Delta appends (findings, then the state as the commit point), each
    committed from the driver with delta-rs when small. The partitions to look
    up are read on the driver; the suspects' second judgement runs on the driver.
    ``stop``: when the pass may end early (:class:`PassStop`)."""
    stop = stop or PassStop(threading.Event())
    stop.begin()
    for table in _INPUTS:
        check_table(settings.table_path(table), table)
    now = now or datetime.now(UTC)
    lookups = lookups or ClusterLookups(settings)
    warm = warm or Warm()
    if not quality:
        return _judge_and_commit(spark, settings, now, lookups, warm, stop)
    with ThreadPoolExecutor(1, thread_name_prefix="kafka-audit-dq") as pool:
        dq = pool.submit(quality_check, settings)  # delta-rs + pandas, no Spark
        summary = _judge_and_commit(spark, settings, now, lookups, warm, stop)
        t = time.perf_counter()
        failures = dq.result()
        summary.seconds["quality wait"] = round(time.perf_counter() - t, 3)
    return replace(summary, quality_failures=failures)


def quality_check(settings: Settings) -> int:
    """great-expectations over the acks appended since the last check: failed expectations."""
    return quality.validate_new_acks(settings)


@dataclass
class _Judged:
    """What the driver knows of a pass's judgement: verdict totals, rows by use, and the
    status rows by partition."""

    counts: dict[str, int]
    rows: dict[str, int]
    status: dict[tuple[str, int], dict]


def _status_of(r, aware) -> dict:
    return {"frontier": int(r["frontier"]), "settled_frontier": int(r["settled_frontier"]),
            "pending": int(r["pending"]), "unseen": int(r["unseen"]),
            "oldest_unseen": aware(r["oldest_unseen"]),
            "suspects_settle": aware(r["suspects_settle"])}


def _judge_and_commit(spark, settings: Settings, now: datetime, lookups: ClusterLookups,
                      warm: Warm, stop: PassStop) -> AuditSummary:
    # the pass's own tables loaded once each (on an object store a load is a listing and a
    # checkpoint read): audit_hot is asked three times before the judge, findings once
    with one_snapshot_each():
        return _judge_and_commit_once(spark, settings, now, lookups, warm, stop)


def _judge_and_commit_once(spark, settings: Settings, now: datetime, lookups: ClusterLookups,
                           warm: Warm, stop: PassStop) -> AuditSummary:
    from pyspark.sql import functions as F

    paths = {t: settings.table_path(t) for t in
             ("findings", "audit_hot", "consumed", "partition_state")}
    clock = _PhaseClock(stop.check)
    progress = committed_progress(settings)
    pass_id = progress.pass_id + 1
    if _died_after(paths["findings"], progress.pass_id):
        with stop.shielded():  # a write: never cut by the stop's cancel
            delete_where(spark, paths["findings"], F.col("pass_id") >= pass_id)

    sources = _sources(settings, progress)
    versions = {t: src.version for t, src in sources.items()}
    state = _state_rows(paths["audit_hot"], progress)
    counts = [state, *(src.count for src in sources.values())]
    if None not in counts and sum(counts) <= settings.spark.driver_rows:
        judge: _Backend = _Driver(settings, progress, sources)
    else:
        judge = _Spark(spark, settings, progress, sources)
    if judge.empty:
        return AuditSummary(now, progress.pass_id, {}, 0, 0, 0, 0, 0)
    judge.check = stop.check
    clock.mark("prepare")
    keys = _partitions(settings, progress, judge.new, judge.state, now)
    cfg = audit_config(settings, *lookups.policies({t for t, _ in keys}))
    log_ends = lookups.log_ends([k for k, unplaced in keys.items() if unplaced])
    events = warm.events.refresh(settings)
    clock.mark("lookups")
    judge.judge(events, now, cfg, log_ends)
    gaps = _unrecorded(sources)
    try:
        return _commit(judge, settings, now, lookups, warm, clock, pass_id, versions, cfg,
                       log_ends, paths, gaps, stop)
    finally:
        judge.release()


def _state_rows(path: str, progress: Progress) -> int | None:
    """How many rows the committed state holds (from the Delta log's statistics; None:
    unknown)."""
    if progress.generation is None or not table_exists(path):
        return 0
    try:
        return rows_in_files(path, "pass_id", progress.generation)
    except LookupError:
        return None


def _unrecorded(sources: dict[str, _Source]) -> list[Finding]:
    """The ``unrecorded`` findings of the ledgers' notes in the acks taken in, each said in
    a line (a note that is not of the ledger's shape: skipped, said too)."""
    found, problems = unrecorded_findings(sources["acks"].notes if "acks" in sources else ())
    for problem in problems:
        log.warning("acks: a ledger note %s", problem)
    for f in found:
        log.error("ack ledger %s could not record %d delivery reports of producer %s run %s, "
                  "%s/%d, seqs %d-%d, acked %s to %s: reported as an unrecorded finding "
                  "(never judged)", f.evidence["ledger"], f.count, f.producer_id, f.run_id,
                  f.topic, f.partition, f.seq, f.evidence["last_seq"], f.evidence["first_ack"],
                  f.evidence["last_ack"])
    return found


def _write_unrecorded(gaps: list[Finding], path: str, pass_id: int, detected: datetime) -> None:
    """The pass's ``unrecorded`` findings, one append beside its judged ones (a pass that
    dies before its commit point has them deleted with the rest of its findings)."""
    if not gaps:
        return
    at = detected.astimezone(UTC)
    write_arrow(path, "findings", pa.Table.from_pylist([
        {"finding_id": f.finding_id, "kind": f.kind, "subkind": None, "topic": f.topic,
         "partition": f.partition, "offset": None, "producer_id": f.producer_id,
         "run_id": f.run_id, "seq": f.seq, "count": f.count, "ack_time": f.ack_time,
         "evidence": json.dumps(f.evidence, sort_keys=True), "cause": None,
         "detected_at": at, "pass_id": pass_id} for f in gaps], schema=arrow_schema("findings")))


def _commit(judge: _Backend, settings: Settings, now: datetime, lookups: ClusterLookups,
            warm: Warm, clock: _PhaseClock, pass_id: int, versions: dict, cfg, log_ends,
            paths: dict, gaps: list[Finding], stop: PassStop) -> AuditSummary:
    # what the driver needs: verdict totals, rows by use, re-read requests, status
    judged, requests = judge.collect()
    clock.mark("judge")
    stop.writes()  # the last moment the pass may stop: from here on it runs to its end
    # 1. findings of this pass (detected: when they are written, on the pass's clock)
    judge.write_findings(judge.first, settings, paths["findings"], pass_id,
                         now + timedelta(seconds=clock.elapsed), judged.rows.get("finding", 0))
    _write_unrecorded(gaps, paths["findings"], pass_id, now + timedelta(seconds=clock.elapsed))
    if gaps:
        judged.counts[Kind.unrecorded.value] = (judged.counts.get(Kind.unrecorded.value, 0)
                                                + sum(f.count for f in gaps))
    clock.mark("findings")
    # the suspects, re-read now and judged again at once (the rest: next pass), at the
    # time of the re-read: what settled since the pass began is judged too (writes that
    # looked lost when it began, re-read for that, have their fresh view)
    answers = lookups.reread(requests)
    clock.mark("reread")
    if answers:
        first = judged.rows.get("finding", 0)
        second = judge.again(answers, warm.events.refresh(settings),
                             now + timedelta(seconds=clock.elapsed), cfg, log_ends, judged)
        judge.write_findings(second, settings, paths["findings"], pass_id,
                             now + timedelta(seconds=clock.elapsed),
                             judged.rows.get("finding", 0) - first)
        clock.mark("judge again")
    # 2. the re-reads, kept in consumed (evidence; later passes skip them: judged here)
    append_once(paths["consumed"], "consumed", [consumed_row(a, pass_id) for a in answers],
                REREAD_APP, pass_id)
    clock.mark("reread write")
    # 3. the commit point: the new state and the progress row, one generation, one commit.
    # An append; every hot_rewrite_passes passes, and over a table from before
    # generations, an overwrite that drops the older generations (through Spark's
    # writer, for a state too large for the driver, an append is one job, an overwrite five).
    done = Progress(pass_id, versions.get("acks", -1), versions.get("consumed", -1))
    rewrite = pass_id % settings.audit.hot_rewrite_passes == 0
    judge.write_state(settings, paths["audit_hot"], pass_id, done.to_json(),
                      judged.rows.get("hot", 0) + 1, "overwrite" if rewrite else "append")
    clock.mark("commit")
    # 4. per-partition status for the API (a few rows: delta-rs, idempotent by pass id)
    append_once(paths["partition_state"], "partition_state", [
        {"topic": topic, "partition": partition, "observed_at": now, "pass_id": pass_id,
         **{k: v for k, v in st.items() if k != "suspects_settle"}}
        for (topic, partition), st in judged.status.items()], STATE_APP, pass_id)
    clock.mark("status")
    return AuditSummary(now, pass_id, judged.counts,
                        sum(st["pending"] for st in judged.status.values()),
                        sum(st["unseen"] for st in judged.status.values()), len(requests),
                        len(judged.status), 0, clock.seconds,
                        min((st["suspects_settle"] for st in judged.status.values()
                             if st["suspects_settle"] is not None), default=None))


def _aware_utc(v):
    return None if v is None else v.astimezone(UTC)


def _step_again(held: pa.Table, answers: list[ReadRun], events, now: datetime, cfg,
                log_ends) -> pa.Table:
    """The partitions that got re-read answers, judged once more with them: the state the
    first judgement kept for them (``held``: its ``hot`` rows, Arrow) plus the answers,
    through the same step function at the same ``now``. Returns the second judgement's
    rows (Arrow, :func:`~kafka_audit.jobs.audit.hot_state.step_arrow_schema`)."""
    schema = step_arrow_schema()
    held = held.select(schema.names).cast(schema)
    step = arrow_step_fn(events, now, cfg, log_ends)
    topics, parts = held.column("topic").to_pylist(), held.column("partition").to_pylist()
    results = []
    for key in sorted({(a.topic, a.partition) for a in answers}):
        answered = [a for a in answers if (a.topic, a.partition) == key]
        kept = held.filter(pa.array([(t, p) == key for t, p in zip(topics, parts,
                                                                   strict=True)]))
        fresh = hot_table(*key, PartitionHot(reads=answered), schema)
        results.append(step(key, pa.concat_tables([kept, fresh])))
    return pa.concat_tables(results)


def _account_again(judged: _Judged, held_rows: int, again: pa.Table) -> None:
    """Update the first judgement's totals with the second's (its findings add up; its
    state and status replace the first's for the partitions judged again)."""
    counts, rows, status = _summed(again)
    for kind, n in counts.items():
        judged.counts[kind] = judged.counts.get(kind, 0) + n
    judged.rows["finding"] = judged.rows.get("finding", 0) + rows.get("finding", 0)
    judged.rows["hot"] = judged.rows.get("hot", 0) - held_rows + rows.get("hot", 0)
    judged.status.update(status)


def _summed(out: pa.Table) -> tuple[dict[str, int], dict[str, int], dict]:
    """Of a judgement's rows (Arrow): writes per finding kind, rows by use, status by
    partition."""
    row = out.column("row")
    found = out.filter(pc.equal(row, "finding"))
    counts = {r["kind"]: int(r["count_sum"]) for r in
              found.group_by("kind").aggregate([("count", "sum")]).to_pylist()}
    rows = {r["values"]: int(r["counts"]) for r in pc.value_counts(row).to_pylist()}
    status = {(r["topic"], r["partition"]): _status_of(r, _aware_utc)
              for r in out.filter(pc.equal(row, "status")).to_pylist()}
    return counts, rows, status


_FINDING_COLUMNS = ("finding_id", "kind", "subkind", "topic", "partition", "offset",
                    "producer_id", "run_id", "seq", "count", "ack_time", "evidence", "cause")


class _Backend:
    """Where a pass's judgement runs and is held: :class:`_Spark` (a checkpointed
    DataFrame) or :class:`_Driver` (Arrow on the driver, when the state and the new rows
    fit in ``spark.driver_rows``). Both run the same step function per partition and
    write the same rows in the same order."""

    empty: bool
    new: dict[str, pa.Table]
    #: the committed state's rows when read on the driver (None: Spark scans them)
    state: pa.Table | None = None
    first: object  # the rows of the first judgement
    #: called between partitions judged on the driver: raises to stop the pass
    check: Callable[[], None] = staticmethod(lambda: None)

    def judge(self, events, now, cfg, log_ends) -> None: ...
    def collect(self) -> tuple[_Judged, list[Reread]]: ...
    def again(self, answers, events, now, cfg, log_ends, judged: _Judged): ...
    def write_findings(self, rows, settings, path, pass_id, detected, count) -> None: ...
    def write_state(self, settings, path, pass_id, progress_json, rows, mode) -> None: ...
    def release(self) -> None: ...


class _Driver(_Backend):
    """The judgement on the driver, in Arrow: no Spark job. On a loaded machine a Spark
    job costs seconds whatever its size; here a pass costs the step function's own work."""

    def __init__(self, settings: Settings, progress: Progress,
                 sources: dict[str, _Source]) -> None:
        self.new = {}
        self.state = None  # the committed state, read once (its keys serve _partitions)
        parts = []
        if progress.generation is not None:
            self.state = _committed_state(settings.table_path("audit_hot"), progress)
            parts.append(widen(self.state))
        for table, src in sources.items():
            if src.files:
                self.new[table] = read_files(src.files, table)
                parts.append(_as_hot(table, self.new[table]))
        self.rows = pa.concat_tables(parts) if parts else None
        self.empty = not parts

    def judge(self, events, now, cfg, log_ends) -> None:
        t, self.rows = self.rows, None
        self.out = self.first = judge_on_driver(t, arrow_step_fn(events, now, cfg, log_ends),
                                                self.check)

    def collect(self):
        counts, rows, status = _summed(self.out)
        requests = [Reread(r["topic"], r["partition"], r["offset"], r["offset"] + r["count"],
                           r["reason"], r["producer_id"], r["run_id"])
                    for r in self.out.filter(pc.equal(self.out.column("row"), "reread"))
                    .select(["topic", "partition", "offset", "count", "reason", "producer_id",
                             "run_id"]).to_pylist()]
        return _Judged(counts, rows, status), requests

    def again(self, answers, events, now, cfg, log_ends, judged):
        keys = {(a.topic, a.partition) for a in answers}
        mine = pa.array([k in keys for k in zip(self.out.column("topic").to_pylist(),
                                                 self.out.column("partition").to_pylist(),
                                                 strict=True)])
        held = self.out.filter(pc.and_(mine, pc.equal(self.out.column("row"), "hot")))
        again = _step_again(held, answers, events, now, cfg, log_ends)
        _account_again(judged, held.num_rows, again)
        self.out = pa.concat_tables([self.out.filter(pc.invert(mine)), again])
        return again

    def write_findings(self, rows, settings, path, pass_id, detected, count) -> None:
        if not count:
            return
        t = rows.filter(pc.equal(rows.column("row"), "finding")).select(list(_FINDING_COLUMNS))
        t = t.set_column(t.schema.get_field_index("evidence"), "evidence",
                         pc.fill_null(t.column("evidence"), "{}"))
        ts = pa.timestamp("us", tz="UTC")
        t = t.append_column("detected_at", pa.array([detected.astimezone(UTC)] * t.num_rows,
                                                    ts))
        t = t.append_column("pass_id", pa.array([pass_id] * t.num_rows, pa.int64()))
        write_arrow(path, "findings", t)

    def write_state(self, settings, path, pass_id, progress_json, rows, mode) -> None:
        names = [f.name for f in arrow_schema("audit_hot") if f.name != "pass_id"]
        t = self.out.filter(pc.equal(self.out.column("row"), "hot")).select(names)
        marker = {n: None for n in names} | {"kind": "progress", "topic": "", "partition": -1,
                                             "progress": progress_json}
        t = pa.concat_tables([t, pa.Table.from_pylist([marker], schema=t.schema)])
        t = t.append_column("pass_id", pa.array([pass_id] * t.num_rows, pa.int64()))
        write_arrow(path, "audit_hot", t, mode)

    def release(self) -> None:
        self.out = self.first = self.state = None


def judge_on_driver(t: pa.Table, step, between: Callable[[], None] = lambda: None
                    ) -> pa.Table:
    """``step`` (:func:`~kafka_audit.jobs.audit.hot_state.arrow_step_fn`) over each partition's
    rows of ``t`` (:func:`step_arrow_schema`), its outputs as one table; ``between()`` before
    each partition (it may raise to stop)."""
    t = t.take(pc.sort_indices(t, [("topic", "ascending"), ("partition", "ascending")]))
    outs = []
    for key, rows in partition_slices(t):
        between()
        outs.append(step(key, rows))
    return pa.concat_tables(outs) if outs else step_arrow_schema().empty_table()


def widen(state: pa.Table) -> pa.Table:
    """``audit_hot`` rows with the step's further columns (null)."""
    schema = step_arrow_schema()
    n = state.num_rows
    return pa.Table.from_arrays(
        [state.column(f.name).cast(f.type) if f.name in state.column_names
         else pa.nulls(n, f.type) for f in schema], schema=schema)


class _Spark(_Backend):
    """The judgement on Spark: ``groupBy().applyInPandas``, checkpointed, released at the
    end of the pass."""

    def __init__(self, spark, settings: Settings, progress: Progress,
                 sources: dict[str, _Source]) -> None:
        from pyspark.sql import functions as F

        self.spark = spark
        frames, self.new = _new_rows(spark, settings, sources)
        schema = step_schema()
        hot_cols = set(column_names("audit_hot"))
        # the committed state: the rows of its generation
        parts = [spark.read.format("delta").load(spark_uri(settings.table_path("audit_hot")))
                 .where((F.col("pass_id") == F.lit(progress.generation))
                        & (F.col("kind") != "progress"))
                 .select(*[F.col(f.name) if f.name in hot_cols
                           else F.lit(None).cast(f.dataType).alias(f.name)
                           for f in schema.fields])
                 ] if progress.generation is not None else []
        parts += frames
        self.empty = not parts
        self.rows = None
        if parts:
            self.rows = parts[0]
            for p in parts[1:]:
                self.rows = self.rows.unionByName(p)
        self.out = self.first = None

    def judge(self, events, now, cfg, log_ends) -> None:
        self.out = self.first = self._checkpoint = (
            self.rows.groupBy("topic", "partition")
            .applyInPandas(step_fn(events, now, cfg, log_ends), step_schema())
            .localCheckpoint())

    def collect(self):
        from pyspark.sql import functions as F

        out = self.out
        small = (out.where(F.col("row") == "finding").groupBy("kind")
                 .agg(F.sum("count").alias("count"))
                 .select(F.lit("total").alias("row"), "kind", "count")
                 .unionByName(out.groupBy("row").agg(F.count(F.lit(1)).alias("count"))
                              .select(F.lit("rows").alias("row"), F.col("row").alias("kind"),
                                      "count"))
                 .unionByName(out.where(F.col("row").isin("reread", "status")),
                              allowMissingColumns=True)
                 .collect())
        judged = _Judged(
            counts={r.kind: int(r["count"]) for r in small if r.row == "total"},
            rows={r.kind: int(r["count"]) for r in small if r.row == "rows"},
            # Spark hands timestamps back naive in this process's zone: astimezone reads so
            status={(r.topic, r.partition): _status_of(r, lambda v: v and v.astimezone(UTC))
                    for r in small if r.row == "status"})
        requests = [Reread(r.topic, r.partition, r.offset, r.offset + r["count"], r.reason,
                           r.producer_id, r.run_id)
                    for r in small if r.row == "reread"]
        return judged, requests

    def again(self, answers, events, now, cfg, log_ends, judged):
        from pyspark.sql import functions as F

        keys = sorted({(a.topic, a.partition) for a in answers})
        # Kafka's topic names hold no ":" (letters, digits, ".", "_" and "-"); a RabbitMQ
        # key does, always partition 0, and percent-encodes the ":" of its names
        key = F.concat_ws(":", F.col("topic"), F.col("partition").cast("string"))
        mine = key.isin([f"{t}:{p}" for t, p in keys])
        held = self.out.where((F.col("row") == "hot") & mine).toArrow()
        again = _step_again(held, answers, events, now, cfg, log_ends)
        _account_again(judged, held.num_rows, again)
        second = self.spark.createDataFrame(again, schema=step_schema())
        self.out = self.out.where(~mine).unionByName(second)
        return second

    def write_findings(self, rows, settings, path, pass_id, detected, count) -> None:
        from pyspark.sql import functions as F

        findings = (rows.where(F.col("row") == "finding")
                    .selectExpr(*[f"`{c}`" if c != "evidence"
                                  else "coalesce(evidence, '{}') AS evidence"
                                  for c in _FINDING_COLUMNS],
                                f"TIMESTAMP '{detected.astimezone(UTC):%Y-%m-%d %H:%M:%S.%f}' "
                                "AS detected_at",  # the session's zone is UTC
                                f"CAST({pass_id} AS BIGINT) AS pass_id"))
        write_delta(findings, path, "findings", settings.spark.driver_rows, rows=count)

    def write_state(self, settings, path, pass_id, progress_json, rows, mode) -> None:
        from pyspark.sql import functions as F

        fields_ = spark_schema("audit_hot").fields
        marker = self.spark.range(1).select(
            F.lit("progress").alias("kind"), F.lit("").alias("topic"),
            F.lit(-1).alias("partition"), F.lit(progress_json).alias("progress"))
        hot = (self.out.where(F.col("row") == "hot")
               .select(*[f.name for f in fields_ if f.name != "pass_id"])
               .unionByName(marker, allowMissingColumns=True)
               .selectExpr(*[f"CAST({pass_id if f.name == 'pass_id' else f'`{f.name}`'} "
                             f"AS {f.dataType.simpleString()}) AS `{f.name}`"
                             for f in fields_]))
        # one small file: the state is bounded by the unsettled window
        write_delta(hot.coalesce(1), path, "audit_hot", settings.spark.driver_rows, rows=rows,
                    mode=mode)

    def release(self) -> None:
        if self.first is not None:
            release(self.first)  # its blocks, now: not at the JVM's next full GC


class _PhaseClock:
    """The seconds of each phase of a pass; ``check()`` at the end of each (it may raise to
    stop the pass)."""

    def __init__(self, check: Callable[[], None] = lambda: None) -> None:
        self.seconds: dict[str, float] = {}
        self._t = self._start = time.perf_counter()
        self._check = check

    @property
    def elapsed(self) -> float:
        return time.perf_counter() - self._start

    def mark(self, phase: str) -> None:
        t = time.perf_counter()
        self.seconds[phase] = round(t - self._t, 3)
        self._t = t
        self._check()
