"""``write_delta``: the driver (delta-rs) and Spark paths write the same table."""

import json
from datetime import UTC, datetime

import pandas as pd
from deltalake import DeltaTable

from kafka_audit.jobs.audit.hot_state import consumed_row
from kafka_audit.jobs.core.model import ReadRun
from kafka_audit.jobs.sink import ArrowBatches, write_delta, write_stream
from kafka_audit.scenarios.cluster import wait_until
from kafka_audit.schemas.tables import column_names, spark_schema
from kafka_audit.store import read_table, write_arrow_stream


def frame(spark, first: int, n: int):
    t = datetime(2026, 11, 22, 9, 0, tzinfo=UTC)
    rows = [consumed_row(ReadRun("t", p, first + 10 * i, 10, f"p{p}", "r", first + 10 * i, t,
                                 "stream", "record"), 7) for i in range(n) for p in (0, 1)]
    return spark.createDataFrame(pd.DataFrame(rows, columns=column_names("consumed")),
                                 spark_schema("consumed"))


def rows_of(path):
    return sorted(read_table(path, "consumed").to_pylist(), key=lambda r: (r["partition"],
                                                                           r["offset"]))


def marks(path):
    return [c.get("userMetadata") for c in reversed(DeltaTable(path).history())
            if c.get("operation") in ("WRITE", "CREATE TABLE AS SELECT")]


def test_driver_and_spark_writes_give_the_same_table(spark, tmp_path):
    driver, spark_path = str(tmp_path / "driver"), str(tmp_path / "spark")
    for path, limit in ((driver, 1000), (spark_path, 0)):
        assert write_delta(frame(spark, 0, 5), path, "consumed", limit,
                           user_metadata=json.dumps({"batch": 0})) == 10
        assert write_delta(frame(spark, 50, 3), path, "consumed", limit, rows=6,
                           user_metadata=json.dumps({"batch": 1})) == 6
        version = DeltaTable(path).version()
        assert write_delta(frame(spark, 0, 0), path, "consumed", limit) == 0
        assert DeltaTable(path).version() == version  # an empty append commits nothing
    assert rows_of(driver) == rows_of(spark_path)
    assert len(rows_of(driver)) == 16
    assert marks(driver) == marks(spark_path) == ['{"batch": 0}', '{"batch": 1}']
    # each path reads and appends to what the other wrote, and overwrites it
    write_delta(frame(spark, 100, 1), driver, "consumed", 0)
    write_delta(frame(spark, 100, 1), spark_path, "consumed", 1000)
    assert rows_of(driver) == rows_of(spark_path) and len(rows_of(driver)) == 18
    for path, limit in ((driver, 1000), (spark_path, 0)):
        write_delta(frame(spark, 200, 2), path, "consumed", limit, mode="overwrite")
        assert [r["offset"] for r in rows_of(path)] == [200, 210, 200, 210]
        assert spark.read.format("delta").load(path).count() == 4


def test_a_streamed_write_gives_the_table_a_collected_one_gives(spark, tmp_path):
    """``write_stream``: the rows handed from the tasks as they end, in one commit with its
    mark, appended to a table either writer made; the same rows as the collected write."""
    streamed, collected = str(tmp_path / "streamed"), str(tmp_path / "collected")
    spark.conf.set("spark.sql.execution.arrow.maxRecordsPerBatch", "7")  # batches of a task
    try:
        for path, mark in ((streamed, "0"), (collected, "0")):
            write_delta(frame(spark, 0, 5), path, "consumed", 0, user_metadata=mark)
        many = frame(spark, 1000, 40).repartition(3)  # 80 rows in three tasks
        assert write_stream(many, streamed, "consumed", user_metadata="1") == 80
        write_delta(many, collected, "consumed", 1000, user_metadata="1")
    finally:
        spark.conf.unset("spark.sql.execution.arrow.maxRecordsPerBatch")
    assert rows_of(streamed) == rows_of(collected) and len(rows_of(streamed)) == 90
    assert marks(streamed) == ["0", "1"]
    assert write_stream(frame(spark, 0, 0), str(tmp_path / "new"), "consumed") == 0
    assert rows_of(str(tmp_path / "new")) == []  # an empty append to a new table makes it


def test_a_job_that_fails_midway_commits_none_of_its_rows(spark, tmp_path):
    """A task that fails after others handed their rows: the stream raises the job's error
    before it ends, and the table stays as it was (no part taken for the whole)."""
    from pyspark.sql import functions as F

    path = str(tmp_path / "t")
    write_delta(frame(spark, 0, 2), path, "consumed", 1000)
    version = DeltaTable(path).version()
    rows = frame(spark, 1000, 30).repartition(3)
    failing = rows.withColumn("offset", F.when(
        (F.spark_partition_id() == 2) & (F.col("offset") >= 0),
        F.raise_error(F.lit("a task failed"))).otherwise(F.col("offset")))
    handed = []

    def counted():  # write_stream's source, each batch it hands over counted
        for batch in ArrowBatches(failing):
            handed.append(batch.num_rows)
            yield batch

    try:
        write_arrow_stream(path, "consumed", counted)
    except Exception as exc:  # noqa: BLE001 - what matters is that it was raised
        assert "a task failed" in str(exc), exc
    else:
        raise AssertionError("a failed job's stream ended as if whole")
    assert sum(handed) > 0, "no task handed its rows before the failure: not midway"
    assert DeltaTable(path).version() == version
    assert len(rows_of(path)) == 4


def test_a_stream_closed_before_its_end_cancels_its_job(spark, tmp_path):
    """A reader that stops (delta-rs failing midway) closes the batches: their job, begun
    when they were made, is cancelled rather than left running for no one."""
    from pyspark.sql.functions import udf

    @udf("long")
    def slow(x):  # a task that would run for ten minutes
        import time

        time.sleep(600)
        return x

    tracker = spark.sparkContext.statusTracker()
    # one job (no shuffle: a shuffle's stage runs as a job of its own first)
    batches = ArrowBatches(frame(spark, 0, 30).withColumn("offset", slow("offset")))
    wait_until(lambda: tracker.getActiveStageIds(), 60, "the job's tasks to start")
    batches.close()
    wait_until(lambda: not tracker.getActiveJobsIds(), 60, "the job to be cancelled")
