"""Consume job: what is really in the audited topics, into the ``consumed`` table.

* source: Spark Kafka source, ``subscribePattern`` (default: every topic not
  starting with ``_``), ``startingOffsets=earliest``, ``includeHeaders=true``,
  ``failOnDataLoss=false`` (truncated offsets are what we audit, not an error);
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
  ``availableNow`` with ``--once`` (read to the current end, then stop).

Command: ``kafka-audit consume [--once] [--topics PATTERN]``.
"""

from __future__ import annotations

import json
import logging

from kafka_audit.jobs.io import table_exists, upgrade_table
from kafka_audit.jobs.sink import write_delta
from kafka_audit.jobs.transforms import fold_read_runs
from kafka_audit.settings import Settings

__all__ = ["start_consume", "consume_app_id", "last_batch_written", "QUERY_NAME",
           "DEFAULT_PATTERN"]

log = logging.getLogger(__name__)

QUERY_NAME = "kafka_audit_consume"
DEFAULT_PATTERN = "[^_].*"


def consume_app_id(settings: Settings) -> str:
    """The consume query's name in the commits it writes (one per checkpoint)."""
    return f"{QUERY_NAME}:{settings.checkpoints / 'consume'}"


def _marker(app_id: str, batch_id: int) -> str:
    return json.dumps({"app": app_id, "batch": batch_id})


def last_batch_written(table: str, app_id: str) -> int | None:
    """The last micro-batch of query ``app_id`` committed to ``table`` (newest commit first;
    None if it never wrote one). Commits written with ``txnAppId`` by earlier versions of
    this job count too."""
    from deltalake import DeltaTable

    if not table_exists(table):
        return None
    dt = DeltaTable(table)
    legacy = dt.transaction_version(app_id)
    for commit in dt.history():  # newest first
        try:
            mark = json.loads(commit.get("userMetadata") or "null")
        except ValueError:
            continue
        if isinstance(mark, dict) and mark.get("app") == app_id:
            return max(int(mark["batch"]), -1 if legacy is None else legacy)
    return legacy


def start_consume(spark, settings: Settings, pattern: str = DEFAULT_PATTERN,
                  once: bool = False):
    """Start the consume query; return the StreamingQuery."""
    table = settings.table_path("consumed")
    upgrade_table(table, "consumed")
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

    source = (
        spark.readStream.format("kafka")
        .option("kafka.bootstrap.servers", settings.cluster.bootstrap)
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
