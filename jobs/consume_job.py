"""Consume job: what is really in the audited topics, into the ``consumed`` table.

* source: Spark Kafka source, reaching the cluster through the connection
  profile, ``subscribePattern`` (default: the audited topics, :func:`audited_pattern`:
  the profile's include/exclude patterns, or else the topics the instrumented
  producers wrote to, from the ack ledger; never a topic starting with ``_``
  unless included by name), ``startingOffsets=earliest``,
  ``includeHeaders=true``, ``failOnDataLoss=false`` (truncated offsets are what we
  audit, not an error);
* sink: ``<warehouse>/consumed`` (Delta), one row per run of records
  (:func:`~kafka_audit.jobs.transforms.fold_read_runs`: one pass per task on the
  JVM, equal to the SQL definition in ``read_runs``), appended in ``foreachBatch``
  (:func:`~kafka_audit.jobs.sink.write_delta`: from the driver with delta-rs when
  the batch's runs are few, as they are for batched producers); each commit names
  its query and batch in Delta's ``userMetadata``;
* exactly once: Spark re-runs a micro-batch only when the process died after its
  sink ran and before the checkpoint recorded it, so only the first batch a run
  executes can be a replay. That one is skipped if the table's history already holds
  this query's commit of it. (Delta's own idempotent append, ``txnAppId``, rebuilds the
  table state for every commit: 0.4-0.5 s a micro-batch here, measured);
* checkpoint: ``<home>/checkpoints/consume``;
* trigger: ``processingTime`` every ``spark.consume_trigger_seconds``, or
  ``availableNow`` with ``--once`` (read to the current end, then stop);
* outages: :func:`run_consume` restarts a query that stopped on an error (every
  broker unreachable for longer than the Kafka source retries) with a capped
  doubling wait, logged once when it starts failing and once when it reads
  again; ``<home>/status/consume.json`` holds the last progress and the lag in
  offsets (health reads it).

Command: ``kafka-audit consume [--once] [--topics PATTERN]``.
"""

from __future__ import annotations

import json
import logging
import threading
from collections.abc import Callable

from kafka_audit.jobs.sink import write_delta
from kafka_audit.jobs.transforms import fold_read_runs
from kafka_audit.profile import spark_kafka_options
from kafka_audit.settings import Settings
from kafka_audit.store import check_table, commit_metadata

__all__ = ["start_consume", "run_consume", "consume_app_id", "last_batch_written",
           "QUERY_NAME", "DEFAULT_PATTERN"]

log = logging.getLogger(__name__)

QUERY_NAME = "kafka_audit_consume"
#: every topic whose name does not start with "_" (internal and the auditor's own topics).
#: Anchored: Spark finds a subscribe pattern anywhere in a name, so "[^_].*" alone
#: matched "_kafka_audit_probe" from its second character
DEFAULT_PATTERN = "^[^_].*$"


class LedgerTopics:
    """The topics the ack ledger holds, kept from one look to the next: a look reads the
    topic column of the files appended since the last one, not the whole ledger (the
    consume job looks every ``spark.topic_refresh_seconds``, and a day's ledger at 5,000
    msg/s is millions of rows). ``files_read`` and ``full_reads`` count the two kinds of
    read (for tests)."""

    def __init__(self, path: str) -> None:
        self.path, self.version, self.topics = path, -1, set()
        self.files_read = self.full_reads = 0

    def read(self) -> set[str]:
        import pyarrow.parquet as pq

        from kafka_audit.store import files_added_since, latest_version, read_table, table_exists

        if not table_exists(self.path) or latest_version(self.path, self.version) == \
                self.version:
            return self.topics
        try:
            version, files, _ = files_added_since(self.path, self.version)
            for f in files:  # topics are never removed: what was seen stays
                self.topics.update(pq.read_table(f, columns=["topic"]).column("topic")
                                   .unique().to_pylist())
            self.files_read += len(files)
        except Exception as exc:  # noqa: BLE001 - a file vacuumed meanwhile: read it all
            log.info("ledger topics read whole (%s)", exc)
            version = latest_version(self.path)
            ledger = read_table(self.path, "acks", columns=["topic"], version=version)
            self.topics = set(ledger.column("topic").unique().to_pylist())
            self.full_reads += 1
        self.version = version
        return self.topics


def audited_pattern(settings: Settings, ledger: LedgerTopics | None = None) -> str:
    """The subscribe pattern of the audited topics: the profile's ``topics.include``
    patterns less its ``exclude`` ones, or, with no ``include``, the topics the ack ledger
    holds (a pattern naming each; it grows as producers write to new topics), as
    ``ledger`` has seen them (a fresh read without). Topics starting with ``_`` are
    audited only when an include pattern names them."""
    from kafka_audit.profile import audited, topic_pattern

    sel = settings.profile.topics
    if sel.include:
        inc = "|".join(f"(?:{p})" for p in sel.include)
        exc = "|".join(f"(?:{p})" for p in sel.exclude)
        return f"^(?!(?:{exc})$)(?:{inc})$" if exc else f"^(?:{inc})$"
    ledger = ledger or LedgerTopics(settings.table_path("acks"))
    return topic_pattern(audited(sel, sorted(ledger.read())))


def consume_app_id(settings: Settings) -> str:
    """The consume query's name in the commits it writes (one per checkpoint)."""
    return f"{QUERY_NAME}:{settings.checkpoints / 'consume'}"


def _marker(app_id: str, batch_id: int) -> str:
    return json.dumps({"app": app_id, "batch": batch_id})


def last_batch_written(table: str, app_id: str) -> int | None:
    """The last micro-batch of query ``app_id`` committed to ``table`` (newest commit first;
    None if it never wrote one)."""
    for meta in commit_metadata(table):
        try:
            mark = json.loads(meta or "null")
        except ValueError:
            continue
        if isinstance(mark, dict) and mark.get("app") == app_id:
            return int(mark["batch"])
    return None


def start_consume(spark, settings: Settings, pattern: str | None = None, once: bool = False,
                  on_commit: Callable[[], None] | None = None):
    """Start the consume query on ``pattern`` (default: :func:`audited_pattern`); return the
    StreamingQuery. ``on_commit`` is called after each micro-batch committed to the table
    (``kafka-audit run`` wakes the audit loop with it)."""
    pattern = pattern or audited_pattern(settings)
    table = settings.table_path("consumed")
    check_table(table, "consumed")
    app_id = consume_app_id(settings)
    first = [True]

    def write_batch(batch_df, batch_id: int) -> None:
        if first[0]:
            first[0] = False
            done = last_batch_written(table, app_id)
            if done is not None and done >= batch_id:
                log.warning("consume batch %d was written before a restart: not again",
                            batch_id)
                return
        write_delta(fold_read_runs(batch_df, batch_id), table, "consumed",
                    settings.spark.driver_rows, user_metadata=_marker(app_id, batch_id))
        if on_commit is not None:
            on_commit()

    source = (
        spark.readStream.format("kafka")
        # a request to a broker that is up but not serving yet (restarting after a crash)
        # waits out request.timeout.ms (30 s by default) before the client asks another: the
        # whole micro-batch with it, and every loss of that fault for as long. The profile's
        # java properties (below) override these
        .option("kafka.request.timeout.ms", "2000")
        # the driver asks each micro-batch's end offsets with an admin client whose call,
        # once its partition's leader is SIGKILLed, keeps trying that dead node until this
        # timeout, however soon a new leader is elected: with 15 s here every leader kill
        # stalled the stream (and delayed its losses) 15 s (bench/latency.py), with 5 s a
        # kill of the leader that was also the active controller (elected 7-9 s later)
        # waited out two calls: its first read came 11-13 s after the kill. A call that
        # fails is made again half a second later (fetchOffset.retryIntervalMs) by a new
        # admin client, with fresh metadata, up to fetchOffset.numRetries times (20: about
        # 50 s) before the query fails (and is restarted). On the executors the same
        # timeout bounds a consumer's wait for a partition's position; a task that fails on
        # it is tried again (spark.local_task_attempts), not the whole micro-batch
        .option("kafka.default.api.timeout.ms", "2000")
        .option("fetchOffset.numRetries", "20")
        .option("fetchOffset.retryIntervalMs", "500")
        .options(**spark_kafka_options(settings.profile, settings.cluster.bootstrap))
        .option("subscribePattern", pattern)
        .option("startingOffsets", "earliest")
        .option("includeHeaders", "true")
        .option("failOnDataLoss", "false")
        .option("maxOffsetsPerTrigger", settings.spark.max_offsets_per_trigger)
        # find new topics and partitions quickly
        .option("kafka.metadata.max.age.ms", "2000")
        .load()
    )
    writer = (source.writeStream.queryName(QUERY_NAME).foreachBatch(write_batch)
              .option("checkpointLocation", str(settings.checkpoints / "consume")))
    if once:
        writer = writer.trigger(availableNow=True)
    else:
        writer = writer.trigger(processingTime=f"{settings.spark.consume_trigger_seconds} seconds")
    return writer.start()


def run_consume(spark, settings: Settings, pattern: str | None = None, once: bool = False,
                stop: threading.Event | None = None,
                on_commit: Callable[[], None] | None = None) -> None:
    """Run the consume query until ``stop`` (or, with ``once``, until it has read to the
    end), restarting it after an error; its progress goes to the status file. Without a
    ``pattern``, the audited topics are looked up every ``spark.topic_refresh_seconds``:
    when they change (a producer wrote to a new topic), the query restarts on the new
    pattern from its checkpoint (the new topic's partitions start at their beginning).
    ``on_commit``: see :func:`start_consume`."""
    import time

    from kafka_audit.status import Outage, StatusWriter

    stop = stop or threading.Event()
    restarts = 0  # queries started again after an error, shown in the status file
    outage = Outage("consume", StatusWriter(settings.home_dir, "consume"), log,
                    settings.outage.retry_seconds, settings.outage.max_backoff_seconds)
    ledger = LedgerTopics(settings.table_path("acks"))
    while not stop.is_set():
        query = None
        try:
            current = pattern or audited_pattern(settings, ledger)
            query = start_consume(spark, settings, current, once=once, on_commit=on_commit)
            seen, looked = None, time.monotonic()
            while not stop.is_set():
                done = query.awaitTermination(2)  # raises the query's error, if it failed
                progress = query.lastProgress
                if progress is not None and progress["timestamp"] != seen:
                    seen = progress["timestamp"]
                    outage.succeeded(restarts=restarts, **_progress_detail(progress))
                if done:
                    if once:
                        return  # read to the end
                    raise RuntimeError("the consume query stopped")  # restarted below
                if pattern is None and time.monotonic() - looked > \
                        settings.spark.topic_refresh_seconds:
                    looked = time.monotonic()
                    if audited_pattern(settings, ledger) != current:
                        log.warning("consume: the audited topics changed; restarting on them")
                        query.stop()
                        break
            else:
                query.stop()
                return
        except Exception as exc:  # noqa: BLE001 - restarted after a wait, never dies of it
            if once:
                raise
            if query is not None:
                try:
                    query.stop()
                except Exception:  # noqa: BLE001 - it is being replaced anyway
                    pass
            stop.wait(outage.failed(exc))
            restarts += 1


def _progress_detail(progress) -> dict:
    """Batch, time and lag in offsets (latest offsets minus the batch's end) of a progress."""
    detail: dict = {"batch": progress["batchId"], "progress_at": progress["timestamp"]}
    lag = 0
    for source in progress["sources"] or []:
        try:
            end = json.loads(source["endOffset"] or "{}")
            latest = json.loads(source["latestOffset"] or "{}")
        except (TypeError, ValueError):
            continue
        for topic, parts in latest.items():
            for part, offset in parts.items():
                lag += max(0, int(offset) - int(end.get(topic, {}).get(part, offset)))
    detail["lag_offsets"] = lag
    return detail
