"""Both Spark paths classify stamps by the one stamp rule (``schemas/stamp.py``).

The stamp corpus (``tests/support/stamp_corpus.py``), one record per entry at consecutive
offsets in a frame of the Kafka source's schema, goes through the SQL definition
(``parse_kafka_records``, and ``read_runs`` over it) and the consume job's JVM fold
(``fold_read_runs``); every offset must come out as the Python classification says. The
MAC corpus is read twice: under its key (a stamp without its MAC is forged) and without one
(MACs are not looked at).
"""

from datetime import UTC, datetime

import pytest
from pyspark.sql import types as T

from kafka_audit.jobs.consume.transforms import fold_read_runs, parse_kafka_records, read_runs
from kafka_audit.schemas.stamp import ForgedStamp, StampError, checksum_ok, stamp_of_headers
from kafka_audit.schemas.tables import column_names

from ..support.stamp_corpus import (
    BAD,
    CORPUS,
    FORGED,
    MAC,
    MAC_CORPUS,
    NONE,
    STAMPED,
    stamp_error_of,
    unkeyed,
)

FIRST = 1000  # the first entry's offset

#: the Kafka source's columns (``includeHeaders``)
KAFKA = T.StructType([
    T.StructField("topic", T.StringType()),
    T.StructField("partition", T.IntegerType()),
    T.StructField("offset", T.LongType()),
    T.StructField("timestamp", T.TimestampType()),
    T.StructField("timestampType", T.IntegerType()),
    T.StructField("key", T.BinaryType()),
    T.StructField("value", T.BinaryType()),
    T.StructField("headers", T.ArrayType(T.StructType([
        T.StructField("key", T.StringType()),
        T.StructField("value", T.BinaryType())]))),
])


#: what is read, and under which stamp key's MAC
READS = {"without a key": (CORPUS + [unkeyed(c) for c in MAC_CORPUS], None),
         "under a key": (MAC_CORPUS, MAC)}


def _python(case, mac) -> tuple:
    """What the Python classification says of a corpus entry, as a ``consumed`` row would."""
    try:
        stamp = stamp_of_headers(case.headers, mac)
    except ForgedStamp:
        return (False, stamp_error_of(FORGED), None, None, None, None)
    except StampError:
        return (False, stamp_error_of(BAD), None, None, None, None)
    if stamp is None:
        return (False, stamp_error_of(NONE), None, None, None, None)
    return (True, None, stamp.producer_id, stamp.run_id, stamp.seq,
            checksum_ok(stamp, case.value))


def _expected(corpus, mac) -> dict[int, tuple]:
    out = {}
    for i, case in enumerate(corpus):
        got = _python(case, mac)
        # the corpus states its expectation; the Python rule must say the same
        assert got[:2] == (case.status == STAMPED, stamp_error_of(case.status)), case.name
        if case.status == STAMPED:
            assert got[2:] == (case.stamp.producer_id, case.stamp.run_id, case.stamp.seq,
                               case.checksum_ok), case.name
        out[FIRST + i] = got
    return out


def _per_offset(rows) -> dict[int, tuple]:
    """``consumed`` rows (runs of ``count`` offsets, or single records) per offset."""
    out = {}
    for r in rows:
        for k in range(r["count"] if "count" in r else 1):
            assert r["offset"] + k not in out, r  # every offset once
            out[r["offset"] + k] = (r["stamped"], r["stamp_error"], r["producer_id"],
                                    r["run_id"], None if r["seq"] is None else r["seq"] + k,
                                    r["checksum_ok"])
    return out


def _diff(name: str, got: dict[int, tuple], want: dict[int, tuple], corpus) -> list[str]:
    return [f"{name}: {corpus[o - FIRST].name!r}: got {got.get(o)}, want {want[o]}"
            for o in sorted(want) if got.get(o) != want[o]] + (
        [f"{name}: offsets {sorted(set(got) - set(want))} not in the corpus"]
        if set(got) - set(want) else [])


def _as_java_reads(headers):
    """Header keys as the Kafka source gives them: the Java client decodes a key's bytes as
    UTF-8, replacing what is not."""
    return None if headers is None else [
        (k.decode("utf-8", "replace") if isinstance(k, bytes) else k, v) for k, v in headers]


def _kafka_frame(spark, corpus):
    t = datetime(2026, 11, 22, 9, 0, tzinfo=UTC)
    rows = [("stamp-rule", 0, FIRST + i, t, 0, None, c.value, _as_java_reads(c.headers))
            for i, c in enumerate(corpus)]
    return spark.createDataFrame(rows, KAFKA)


def _source_row_class(df) -> str:
    """The class of the rows ``ReadRuns.fold`` reads (``ReadRuns.sourceRows``)."""
    qe = df._jdf.queryExecution()
    plan = qe.optimizedPlan()
    rdd = plan.rdd() if plan.getClass().getSimpleName() == "LogicalRDD" else qe.toRdd()
    return rdd.first().getClass().getSimpleName()


@pytest.mark.parametrize("reads", sorted(READS))
def test_both_spark_paths_follow_the_stamp_rule(spark, reads):
    corpus, mac = READS[reads]
    kafka_frame = _kafka_frame(spark, corpus)
    want = _expected(corpus, mac)
    problems = []
    sql = parse_kafka_records(kafka_frame, 7, mac)
    problems += _diff("parse_kafka_records", _per_offset(r.asDict() for r in sql.collect()),
                      want, corpus)
    problems += _diff("read_runs", _per_offset(r.asDict() for r in read_runs(sql).collect()),
                      want, corpus)
    # the fold reads a LogicalRDD's rows directly: generic rows as created here, UnsafeRows
    # (the Kafka source's, as in a micro-batch) once checkpointed; both ways are checked
    for frame, rows in ((kafka_frame, "GenericInternalRow"),
                        (kafka_frame.localCheckpoint(), "UnsafeRow")):
        assert _source_row_class(frame) == rows
        got = [r.asDict() for r in fold_read_runs(frame, 7, mac).collect()]
        problems += _diff(f"fold_read_runs over {rows}s", _per_offset(got), want, corpus)
        assert sum(r["count"] for r in got) == len(corpus)
    # the consume job's tasks fold the Kafka client's records (ReadRuns.foldSource)
    got = _fold_records(spark, corpus, mac)
    problems += _diff("ReadRuns.foldRecords", _per_offset(got), want, corpus)
    assert sum(r["count"] for r in got) == len(corpus)
    assert {r["kafka_timestamp"] for r in got} == {T_MS}  # as the source's column: ms
    assert not problems, "\n".join(problems)


T_MS = 1_795_856_400_123  # a record's timestamp (ms), 2026-11-28T09:00:00.123Z


def _fold_records(spark, corpus, mac) -> list[dict]:
    """The corpus as the Kafka client hands it out (``ConsumerRecord``s, one per entry at
    consecutive offsets) folded as the consume job's tasks fold them; its rows as dicts
    (``kafka_timestamp`` in ms)."""
    jvm = spark._jvm
    records = jvm.java.util.ArrayList()
    for i, case in enumerate(corpus):
        headers = jvm.org.apache.kafka.common.header.internals.RecordHeaders()
        for key, value in _as_java_reads(case.headers) or []:
            headers.add(key, value)
        records.add(jvm.org.apache.kafka.clients.consumer.ConsumerRecord(
            "stamp-rule", 0, FIRST + i, T_MS,
            jvm.org.apache.kafka.common.record.TimestampType.CREATE_TIME, -1, -1, None,
            case.value, headers, jvm.java.util.Optional.empty()))
    key = None if mac is None else bytearray(mac.key)
    runs = jvm.kafka_audit.spark.ReadRuns.foldRecords(records.iterator(), 7, 1_000_000, key)
    names = column_names("consumed")
    out = []
    while runs.hasNext():
        row = runs.next()
        r = {name: row.get(i) for i, name in enumerate(names)}
        r["kafka_timestamp"] = r["kafka_timestamp"].getTime()
        out.append(r)
    return out
