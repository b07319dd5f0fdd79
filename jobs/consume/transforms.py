"""Spark column logic shared by the jobs: stamp parsing and read runs.

Parses the ``kaudit`` header laid out in ``schemas/stamp.py``, by the stamp
rule defined there, with SQL functions only (no Python UDF), so parsing runs
in the JVM at source speed. A record without the header, or with a malformed
one (or, with a stamp key, a forged one: no ``kaudit-mac`` that verifies), stays in
the output with ``stamped = false`` and a ``stamp_error``: counted, never dropped.

:func:`read_runs` then folds the records into runs (the range ledger's read
side): consecutive offsets holding consecutive seqs of one producer run, or
consecutive foreign records sharing one reason; any gap, change of producer,
seq jump or bad checksum starts a new run.

These two are the readable definition. The consume job runs
:func:`fold_read_runs`, the same fold in one pass per task on the JVM
(``jobs/consume/ReadRuns.java``): no per-record SQL expressions, no sort.
``tests/cluster/test_read_runs.py`` holds the two equal on real records (stamped,
foreign, malformed, bad checksums, gaps) and ``tests/spark/test_stamp_rule.py``
holds both equal to ``schemas/stamp.py``'s rule on a corpus of stamps.
"""

from __future__ import annotations

from collections.abc import Callable

from pyspark.sql import Column, DataFrame
from pyspark.sql import functions as F

from kafka_audit.schemas.stamp import (
    FORGED,
    HEADER,
    MAC_HEADER,
    MAC_LENGTH,
    MALFORMED,
    MIN_LENGTHS,
    NO_STAMP,
    VERSION,
    VERSION_XXH64,
    StampMac,
)
from kafka_audit.schemas.systems import KAFKA
from kafka_audit.schemas.tables import column_names

__all__ = ["parse_kafka_records", "read_runs", "fold_read_runs", "offset_span"]


def _uint(binary: Column, pos: int | Column, length: int | Column) -> Column:
    """Big-endian unsigned integer of ``length`` bytes at 1-based ``pos``."""
    return F.conv(F.hex(F.substring(binary, pos, length)), 16, 10)


def _mac_ok(s: Column, mac: StampMac) -> Column:
    """Whether the record holds exactly one ``kaudit-mac`` header, the MAC of stamp ``s``:
    HMAC-SHA256 as RFC 2104 defines it, two SHA-256 hashes behind the key's inner and outer
    blocks, its first :data:`MAC_LENGTH` bytes."""
    macs = F.filter("headers", lambda h: h["key"] == F.lit(MAC_HEADER))
    given = F.try_element_at(macs, F.lit(1))["value"]
    ipad, opad = (F.lit(bytearray(b)) for b in mac.blocks)
    inner = F.unhex(F.sha2(F.concat(ipad, s), 256))
    want = F.substring(F.unhex(F.sha2(F.concat(opad, inner), 256)), 1, MAC_LENGTH)
    return F.coalesce((F.coalesce(F.size(macs), F.lit(0)) == 1) & (given == want),
                      F.lit(False))


def parse_kafka_records(df: DataFrame, batch_id: int, mac: StampMac | None = None
                        ) -> DataFrame:
    """Kafka source rows (with ``includeHeaders``) to rows of the ``consumed`` table.

    The stamp rule of ``schemas/stamp.py``, check by check: no ``kaudit`` header is no
    stamp; two or more, a null or empty value, a version other than 1 and 2, too short
    for its version, an empty id, lengths that do not add up, an id that is not UTF-8 or
    a seq of 2^63 or more is a malformed one; with the stamp key's ``mac``, a well-formed
    stamp without its one MAC is a forged one. The checksum is CRC32 (``crc32``) for a
    version 1 stamp and XXH64 with seed 42 (``xxhash64``, whose seed is 42) for version 2.
    """
    ours = F.filter("headers", lambda h: h["key"] == F.lit(HEADER))
    # null headers (a record without any) leave a null array: no header of ours
    n_stamps = F.coalesce(F.size(ours), F.lit(0))
    # try_: a record with headers, none of them ours, leaves an empty array (ANSI would fail)
    stamp = F.try_element_at(ours, F.lit(1))["value"]
    with_stamp = df.withColumn("_n", n_stamps).withColumn("_s", stamp)
    n, s = F.col("_n"), F.col("_s")
    version = _uint(s, 1, 1).cast("int")
    # the version's fixed part plus the two id lengths; the producer id's length byte is
    # the one before it (1-based positions)
    fixed = (F.when(version == VERSION_XXH64, F.lit(MIN_LENGTHS[VERSION_XXH64]))
             .otherwise(F.lit(MIN_LENGTHS[VERSION])))
    p_len = _uint(s, fixed - 1, 1).cast("int")
    r_len_pos = fixed + p_len
    r_len = F.when(F.length(s) >= r_len_pos, _uint(s, r_len_pos, 1).cast("int"))
    producer = F.substring(s, fixed, p_len)
    run = F.substring(s, fixed + 1 + p_len, r_len)
    # a binary cast to string copies the bytes unchecked: validity is asked for explicitly
    # (Spark's validation is strict UTF-8, as Python's and Java's REPORT decoders are)
    well_formed = F.coalesce(
        (n == 1)
        & s.isNotNull()
        & version.isin(VERSION, VERSION_XXH64)
        & (F.length(s) >= fixed)
        & (p_len > 0)
        & r_len.isNotNull()
        & (r_len > 0)
        & (F.length(s) == fixed + p_len + r_len)
        & F.is_valid_utf8(producer.cast("string"))
        & F.is_valid_utf8(run.cast("string"))
        & (_uint(s, 2, 1).cast("int") < 128),  # a seq past 2^63 - 1 fits no long column
        F.lit(False))
    error = (F.when(n <= 0, F.lit(NO_STAMP))
             .when(~well_formed, F.lit(MALFORMED)))
    stamped = well_formed
    if mac is not None:  # a forged stamp is no producer's
        mac_ok = _mac_ok(s, mac)
        error = error.when(~mac_ok, F.lit(FORGED))
        stamped = well_formed & mac_ok
    value = F.coalesce(F.col("value"), F.lit(b"").cast("binary"))  # null counts as empty
    crc_ok = F.crc32(value) == _uint(s, 10, 4).cast("long")
    # hex of a long is its two's complement: the stamp's unsigned 64 bits, byte for byte
    xxh64_ok = F.lpad(F.hex(F.xxhash64(value)), 16, "0") == F.hex(F.substring(s, 10, 8))
    parsed = with_stamp.select(
        F.col("topic"),
        F.col("partition").cast("int").alias("partition"),
        F.col("offset").cast("long").alias("offset"),
        F.col("timestamp").alias("kafka_timestamp"),
        stamped.alias("stamped"),
        error.alias("stamp_error"),
        F.when(stamped, producer.cast("string")).alias("producer_id"),
        F.when(stamped, run.cast("string")).alias("run_id"),
        F.when(stamped, _uint(s, 2, 8).cast("long")).alias("seq"),
        F.when(stamped, F.when(version == VERSION_XXH64, xxh64_ok).otherwise(crc_ok))
        .alias("checksum_ok"),
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
            .withColumn("system", F.lit(KAFKA))
            .select(*column_names("consumed")))


def fold_read_runs(kafka: DataFrame, batch_id: int, mac: StampMac | None = None,
                   source: bool = False) -> DataFrame:
    """Kafka source rows (with ``includeHeaders``) to ``consumed`` rows, on the JVM in one pass.

    Same rows as ``read_runs(parse_kafka_records(kafka, batch_id, mac))`` but for runs that
    a task edge splits in two; ``read_time`` is the time of this call. ``mac``: the stamp
    key's (its key goes to the tasks: ``javax.crypto.Mac`` there). ``source``: ``kafka`` is
    the Kafka source's own micro-batch, unchanged (the consume job's ``foreachBatch``): the
    tasks then read its offset ranges with the source's consumers and fold the client's
    records, without the rows the source would make of them (``ReadRuns.foldSource``: the
    same rows, less CPU a record; a plan that is not such a read is folded from its rows).
    """
    spark = kafka.sparkSession
    fold = spark._jvm.kafka_audit.spark.ReadRuns.foldSource if source \
        else spark._jvm.kafka_audit.spark.ReadRuns.fold
    return DataFrame(fold(*_fold_args(kafka, batch_id, mac)), spark)


def _fold_args(kafka: DataFrame, batch_id: int, mac: StampMac | None) -> tuple:
    """``ReadRuns.fold``'s first arguments: the batch, the ``consumed`` schema, the batch id,
    the read time (now) and the stamp key."""
    from datetime import UTC, datetime

    from kafka_audit.schemas.tables import spark_schema

    spark = kafka.sparkSession
    jschema = spark._jsparkSession.parseDataType(spark_schema("consumed").json())
    micros = int(datetime.now(UTC).timestamp() * 1_000_000)
    return kafka._jdf, jschema, batch_id, micros, None if mac is None else bytearray(mac.key)


def offset_span(kafka: DataFrame) -> int | None:
    """The offsets the micro-batch ``kafka`` (Spark's Kafka source) spans, summed over its
    partitions: a bound of its records, so of the rows :func:`fold_read_runs` makes of it,
    known without reading one (``ReadRuns.offsetSpan``). None when not known."""
    span = kafka.sparkSession._jvm.kafka_audit.spark.ReadRuns.offsetSpan(kafka._jdf)
    return None if span < 0 else int(span)


def kafka_source_schema():
    """The rows of Spark's Kafka source with ``includeHeaders`` (what the fold reads)."""
    from pyspark.sql import types as T

    return T.StructType([
        T.StructField("key", T.BinaryType()),
        T.StructField("value", T.BinaryType()),
        T.StructField("topic", T.StringType()),
        T.StructField("partition", T.IntegerType()),
        T.StructField("offset", T.LongType()),
        T.StructField("timestamp", T.TimestampType()),
        T.StructField("timestampType", T.IntegerType()),
        T.StructField("headers", T.ArrayType(T.StructType([
            T.StructField("key", T.StringType()), T.StructField("value", T.BinaryType())]))),
    ])


#: records of one round of the warm-up (a Spark job of its own)
WARM_UP_RECORDS = 5000
#: rounds of the service's warm-up: 100,000 records in all. Against 5,000 in one round, the
#: new topic's first micro-batch took 2.9-4.6 s against 4.0-5.3 s and the service's CPU
#: while the load ran 30.1-36.6 s against 36.8-42.2 s (three pairs at 40,000 msg/s, the
#: 100,000 then as one union; 26.6-26.7 s against 35.2 s in two pairs at 15,000, as these
#: rounds): the JIT compiles more of the path before the load, on more calls. The
#: commands: docs/benchmarks.md, the sustained row of 2026-12-04 (evening)
WARM_UP_ROUNDS = 20


def warm_up_records(spark) -> DataFrame:
    """The warm-up's made-up records, as the Kafka source's rows: ``WARM_UP_RECORDS`` of
    them on three partitions, seven producers taking turns on each (every record a run of
    its own), sorted by partition and offset (each task's rows are written and read back as
    the client's record batches of a partition: ``ReadRuns.warmUp``)."""
    from datetime import UTC, datetime

    from kafka_audit.schemas.stamp import HEADER, build_stamp, checksum_of

    now = datetime.now(UTC)
    now = now.replace(microsecond=now.microsecond // 1000 * 1000)  # Kafka's: milliseconds
    value = b"w" * 100
    stamp_sum = checksum_of(value)
    rows = [(None, value, "_kafka_audit_warm_up", p, o // 3, now, 0,
             [(HEADER, build_stamp(f"warm-{o % 7}", "warm", o, stamp_sum))])
            for p in range(3) for o in range(p, WARM_UP_RECORDS, 3)]
    return spark.createDataFrame(rows, kafka_source_schema())


def warm_up_fold(spark, mac: StampMac | None = None, rounds: int = 1,
                 until: Callable[[], bool] = lambda: False) -> int:
    """Run the consume path's work on made-up records (:func:`warm_up_records`), to throw
    away: the Kafka client's decoding of record batches, the fold of its records, its local
    checkpoint, the Arrow hand-over; ``rounds`` times, each a Spark job, none begun once
    ``until()`` says so (a topic to read has come: the warm-up never holds it up longer
    than a round). A fresh JVM did the first micro-batch of a
    new topic 2x slower than the next (13 s against 3.5 s for 280,000 records, idle,
    timed once with a throw-away script around ``start_consume(once=True)``, not kept;
    28 s while a 40,000 msg/s load shared the two cores: the first ``bench/sustained.py``
    run's checkpoint times); after a fold of rows (8 s idle) it was 6.8 s. Run only while
    there is nothing to read: beside ``bench/catchup.py``'s twenty producers it took 80 s
    (the service's log line), all of it a delay before real work.
    Returns the rows the fold gave in all (the tests check them)."""
    from kafka_audit.jobs.sink import release

    kafka = warm_up_records(spark)
    rows = 0
    for _ in range(rounds):
        if until():
            break
        folded = DataFrame(spark._jvm.kafka_audit.spark.ReadRuns.warmUp(
            *_fold_args(kafka, -1, mac)), spark).localCheckpoint(eager=True)
        try:
            rows += folded.toArrow().num_rows
        finally:
            release(folded)
    return rows
