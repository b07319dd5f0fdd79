"""Spark column logic shared by the jobs: stamp parsing from Kafka headers.

Parses the ``kaudit`` header laid out in ``schemas/stamp.py`` with SQL
functions only (no Python UDF), so parsing runs in the JVM at source speed.
A record without the header, or with a malformed one, stays in the output
with ``stamped = false`` and a ``stamp_error``: counted, never dropped.
"""

from __future__ import annotations

from pyspark.sql import Column, DataFrame
from pyspark.sql import functions as F

from kafka_audit.schemas.stamp import HEADER, VERSION
from kafka_audit.schemas.tables import column_names

__all__ = ["parse_kafka_records"]


def _uint(binary: Column, pos: int | Column, length: int | Column) -> Column:
    """Big-endian unsigned integer of ``length`` bytes at 1-based ``pos``."""
    return F.conv(F.hex(F.substring(binary, pos, length)), 16, 10)


def parse_kafka_records(df: DataFrame, batch_id: int) -> DataFrame:
    """Kafka source rows (with ``includeHeaders``) to rows of the ``consumed`` table."""
    stamp = F.element_at(F.filter("headers", lambda h: h["key"] == F.lit(HEADER)), 1)["value"]
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
        F.when(well_formed, _uint(s, 2, 8).cast("decimal(20,0)").cast("long")).alias("seq"),
        F.when(well_formed, checksum).alias("checksum"),
        F.when(well_formed, F.crc32(F.coalesce(F.col("value"), F.lit(b"").cast("binary")))
               == checksum).alias("checksum_ok"),
        F.current_timestamp().alias("read_time"),
        F.lit(batch_id).cast("long").alias("batch_id"),
    )
    return parsed.select(*column_names("consumed"))
