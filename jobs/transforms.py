"""Spark column logic shared by the jobs: stamp parsing and read runs.

Parses the ``kaudit`` header laid out in ``schemas/stamp.py`` with SQL
functions only (no Python UDF), so parsing runs in the JVM at source speed.
A record without the header, or with a malformed one, stays in the output
with ``stamped = false`` and a ``stamp_error``: counted, never dropped.

:func:`read_runs` then folds the records into runs (the range ledger's read
side): consecutive offsets holding consecutive seqs of one producer run, or
consecutive foreign records sharing one reason; any gap, change of producer,
seq jump or bad checksum starts a new run.

These two are the readable definition. The consume job runs
:func:`fold_read_runs`, the same fold in one pass per task on the JVM
(``deploy/jvm/src/kafka_audit/spark/ReadRuns.java``): no per-record SQL
expressions, no sort. ``tests/integration`` holds the two equal on real
records (stamped, foreign, malformed, bad checksums, gaps).
"""

from __future__ import annotations

from pyspark.sql import Column, DataFrame
from pyspark.sql import functions as F

from kafka_audit.schemas.stamp import HEADER, VERSION
from kafka_audit.schemas.tables import column_names

__all__ = ["parse_kafka_records", "read_runs", "fold_read_runs"]


def _uint(binary: Column, pos: int | Column, length: int | Column) -> Column:
    """Big-endian unsigned integer of ``length`` bytes at 1-based ``pos``."""
    return F.conv(F.hex(F.substring(binary, pos, length)), 16, 10)


def parse_kafka_records(df: DataFrame, batch_id: int) -> DataFrame:
    """Kafka source rows (with ``includeHeaders``) to rows of the ``consumed`` table."""
    # try_: a record with headers, none of them ours, leaves an empty array (ANSI would fail)
    stamp = F.try_element_at(F.filter("headers", lambda h: h["key"] == F.lit(HEADER)),
                             F.lit(1))["value"]
    with_stamp = df.withColumn("_s", stamp)
    s = F.col("_s")
    p_len = _uint(s, 14, 1).cast("int")
    r_len_pos = F.lit(15) + p_len
    r_len = F.when(F.length(s) >= r_len_pos, _uint(s, r_len_pos, 1).cast("int"))
    well_formed = (
        s.isNotNull()
        & (F.length(s) >= 15)
        & (_uint(s, 1, 1).cast("int") == VERSION)
        & (p_len > 0)
        & r_len.isNotNull()
        & (r_len > 0)
        & (F.length(s) == F.lit(15) + p_len + r_len)
        & (_uint(s, 2, 1).cast("int") < 128)  # a seq past 2^63 - 1 fits no long column
    )
    error = (F.when(s.isNull(), F.lit(f"no {HEADER} header"))
             .when(~well_formed, F.lit("malformed stamp")))
    checksum = _uint(s, 10, 4).cast("long")
    parsed = with_stamp.select(
        F.col("topic"),
        F.col("partition").cast("int").alias("partition"),
        F.col("offset").cast("long").alias("offset"),
        F.col("timestamp").alias("kafka_timestamp"),
        F.coalesce(well_formed, F.lit(False)).alias("stamped"),
        error.alias("stamp_error"),
        F.when(well_formed, F.substring(s, 15, p_len).cast("string")).alias("producer_id"),
        F.when(well_formed, F.substring(s, F.lit(16) + p_len, r_len).cast("string"))
        .alias("run_id"),
        F.when(well_formed, _uint(s, 2, 8).cast("long")).alias("seq"),
        F.when(well_formed, F.crc32(F.coalesce(F.col("value"), F.lit(b"").cast("binary")))
               == checksum).alias("checksum_ok"),
        F.current_timestamp().alias("read_time"),
        F.lit(batch_id).cast("long").alias("batch_id"),
    )
    return parsed


def read_runs(records: DataFrame) -> DataFrame:
    """Parsed records (:func:`parse_kafka_records`) to rows of the ``consumed`` table."""
    from pyspark.sql.window import Window

    keys = ["topic", "partition", "stamped", "stamp_error", "producer_id", "run_id",
            "checksum_ok", "read_time", "batch_id"]
    # along a run both offset - seq and offset - (row number) stay constant
    diagonal = F.when(F.col("stamped"), F.col("offset") - F.col("seq")).otherwise(F.lit(0))
    w = Window.partitionBy(*keys, "_diag").orderBy("offset")
    runs = (records.withColumn("_diag", diagonal)
            .withColumn("_island", F.col("offset") - F.row_number().over(w))
            .groupBy(*keys, "_diag", "_island")
            .agg(F.min("offset").alias("offset"), F.count(F.lit(1)).alias("count"),
                 F.min("seq").alias("seq"),
                 F.min_by("kafka_timestamp", "offset").alias("kafka_timestamp")))
    return (runs.withColumn("source", F.lit("stream")).withColumn("status", F.lit("record"))
            .withColumn("leader_epoch", F.lit(None).cast("int"))
            .select(*column_names("consumed")))


def fold_read_runs(kafka: DataFrame, batch_id: int) -> DataFrame:
    """Kafka source rows (with ``includeHeaders``) to ``consumed`` rows, on the JVM in one pass.

    Same rows as ``read_runs(parse_kafka_records(kafka, batch_id))`` but for runs that a
    task edge splits in two; ``read_time`` is the time of this call.
    """
    from datetime import UTC, datetime

    from kafka_audit.schemas.tables import spark_schema

    spark = kafka.sparkSession
    jschema = spark._jsparkSession.parseDataType(spark_schema("consumed").json())
    micros = int(datetime.now(UTC).timestamp() * 1_000_000)
    jdf = spark._jvm.kafka_audit.spark.ReadRuns.fold(kafka._jdf, jschema, batch_id, micros)
    return DataFrame(jdf, spark)
