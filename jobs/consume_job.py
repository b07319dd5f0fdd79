"""Consume job: what is really in the audited topics, into the ``consumed`` table.

* source: Spark Kafka source, ``subscribePattern`` (default: every topic not
  starting with ``_``), ``startingOffsets=earliest``, ``includeHeaders=true``,
  ``failOnDataLoss=false`` (truncated offsets are what we audit, not an error);
* sink: ``<warehouse>/consumed`` (Delta), one row per run of records
  (:func:`~kafka_audit.jobs.transforms.fold_read_runs`: one pass per task on the
  JVM, equal to the SQL definition in ``read_runs``), appended in ``foreachBatch`` with
  ``txnAppId``/``txnVersion=batch_id`` so a replayed micro-batch writes nothing twice;
* checkpoint: ``<home>/checkpoints/consume``;
* trigger: ``processingTime`` every ``spark.consume_trigger_seconds``, or
  ``availableNow`` with ``--once`` (read to the current end, then stop).

Command: ``kafka-audit consume [--once] [--topics PATTERN]``.
"""

from __future__ import annotations

from kafka_audit.jobs.io import upgrade_table
from kafka_audit.jobs.transforms import fold_read_runs
from kafka_audit.settings import Settings

__all__ = ["start_consume", "QUERY_NAME", "DEFAULT_PATTERN"]

QUERY_NAME = "kafka_audit_consume"
DEFAULT_PATTERN = "[^_].*"


def start_consume(spark, settings: Settings, pattern: str = DEFAULT_PATTERN,
                  once: bool = False):
    """Start the consume query; return the StreamingQuery."""
    table = settings.table_path("consumed")
    upgrade_table(table, "consumed")
    app_id = f"{QUERY_NAME}:{settings.checkpoints / 'consume'}"

    def write_batch(batch_df, batch_id: int) -> None:
        (fold_read_runs(batch_df, batch_id).write.format("delta").mode("append")
         .option("txnAppId", app_id).option("txnVersion", batch_id).save(table))

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
