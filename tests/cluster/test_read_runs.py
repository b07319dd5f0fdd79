"""The consume job's JVM fold equals the SQL definition of read runs, on real records."""

import struct
import time
import zlib

from confluent_kafka import Producer

from kafka_audit.jobs.consume.transforms import (
    fold_read_runs,
    offset_span,
    parse_kafka_records,
    read_runs,
)
from kafka_audit.producers.instrumented import AuditedProducer
from kafka_audit.scenarios.cluster import wait_until
from kafka_audit.schemas.stamp import HEADER, build_stamp
from kafka_audit.schemas.tables import column_names


def test_jvm_fold_equals_the_sql_definition(cluster, spark, settings, tmp_path):
    topic = f"runs-{time.time_ns()}"
    cluster.create_topic(topic, partitions=2, replication=3)
    conf = {"bootstrap.servers": cluster.bootstrap, "linger.ms": 5}
    a = AuditedProducer(conf, "pa", settings)
    b = AuditedProducer(conf, "pb", settings)
    raw = Producer(conf)
    tx = Producer({**conf, "transactional.id": topic})
    tx.init_transactions(30)
    odd = [
        [],  # no headers at all
        [("other", b"x")],  # headers, none ours
        [(HEADER, None)],  # our header, no value
        [(HEADER, b"\x09garbage")],  # malformed
        [(HEADER, build_stamp("px", "r1", 5, 0) + b"!")],  # overlong
        [(HEADER, b"\x01" + struct.pack(">QI", 2**63, 0) + b"\x02px\x02r1")],  # seq > long
        [(HEADER, build_stamp("px", "r1", 7, 1234))],  # checksum does not match
    ]
    for rnd in range(3):
        for part in (0, 1):
            for i in range(50):
                a.produce(topic, b"a %d" % i, partition=part)
                if i % 7 == 0:
                    b.produce(topic, b"b %d" % i, partition=part)
            for headers in odd:
                raw.produce(topic, b"odd", partition=part, headers=headers)
            raw.produce(topic, b"same",  # stamped by hand, a correct checksum
                        headers=[(HEADER, build_stamp("px", "r1", rnd, zlib.crc32(b"same")))],
                        partition=part)
            raw.flush(30)
            a.flush(30)
            b.flush(30)
            tx.begin_transaction()  # a committed record, then its marker: an offset gap
            tx.produce(topic, b"tx", partition=part)
            tx.commit_transaction(30)
    a.close()
    b.close()
    df = (spark.read.format("kafka").option("kafka.bootstrap.servers", cluster.bootstrap)
          .option("subscribe", topic).option("startingOffsets", "earliest")
          .option("endingOffsets", "latest").option("includeHeaders", "true").load())

    def rows(frame):
        return sorted(tuple(r.asDict()[c] for c in frame.columns if c != "read_time")
                      for r in frame.collect())

    jvm, sql = rows(fold_read_runs(df, 7)), rows(read_runs(parse_kafka_records(df, 7)))
    assert jvm == sql
    # the consume job's way, on a micro-batch of the same records: the source's offset
    # ranges read with its consumers and the client's records folded. (A batch read is
    # Spark's V1 Kafka relation: not such a plan, folded from its rows.)
    assert offset_span(df) is None
    folded = {}

    def batch(micro, batch_id):
        assert offset_span(micro) is not None  # its offset ranges are known
        folded["source"] = rows(fold_read_runs(micro, 7, source=True))
        folded["rows"] = rows(fold_read_runs(micro, 7))

    query = (spark.readStream.format("kafka").option("kafka.bootstrap.servers", cluster.bootstrap)
             .option("subscribe", topic).option("startingOffsets", "earliest")
             .option("includeHeaders", "true").load()
             .writeStream.foreachBatch(batch).trigger(availableNow=True)
             .option("checkpointLocation", str(tmp_path / "checkpoint")).start())
    query.awaitTermination(240)
    assert not query.isActive
    assert folded["source"] == folded["rows"] == jvm
    cols = [c for c in column_names("consumed") if c != "read_time"]
    kinds = {(r[cols.index("stamped")], r[cols.index("stamp_error")],
              r[cols.index("checksum_ok")]) for r in jvm}
    assert kinds >= {(True, None, True), (True, None, False), (False, "no kaudit header", None),
                     (False, "malformed stamp", None)}
    assert sum(r[cols.index("count")] for r in jvm) == df.count()


def test_each_way_of_writing_a_micro_batch_gives_the_rows_a_count_gives(
        cluster, spark, settings, tmp_path):
    """``offset_span`` is each micro-batch's offsets as planned: at least its records (a
    transaction's marker takes an offset and holds none), together every offset of the
    log. The consume job's ways of writing a batch (``_write_fold``: bounded by its
    offsets and collected, streamed from the tasks to delta-rs, or written through Spark)
    write the rows that the checkpoint-and-count write gives."""
    from pyspark.sql.types import LongType, StructField, StructType

    from kafka_audit.jobs.consume.consume_job import _write_fold
    from kafka_audit.jobs.sink import write_delta
    from kafka_audit.store import read_table

    topic = f"span-{time.time_ns()}"
    cluster.create_topic(topic, partitions=3, replication=3)
    conf = {"bootstrap.servers": cluster.bootstrap, "linger.ms": 5}
    #: spark.driver_rows and spark.stream_rows of each way
    ways = {"large": (10**6, 10**7), "small": (60, 10**6), "spark": (60, 60)}
    batches, hows = [], {name: [] for name in ways}

    def batch(df, batch_id):
        span, records = offset_span(df), df.count()
        counted = write_delta(fold_read_runs(df, batch_id), str(tmp_path / "counted"),
                              "consumed", 10**6)
        for name, (driver_rows, stream_rows) in ways.items():
            hows[name].append(_write_fold(df, batch_id, None, str(tmp_path / name),
                                          driver_rows, stream_rows, f"b{batch_id}"))
        batches.append((span, records, counted))

    def read_all():  # the topic from where the last read ended, in steps of about 400
        query = (spark.readStream.format("kafka")
                 .option("kafka.bootstrap.servers", cluster.bootstrap).option("subscribe", topic)
                 .option("startingOffsets", "earliest").option("includeHeaders", "true")
                 .option("maxOffsetsPerTrigger", 400).load()
                 .writeStream.foreachBatch(batch).trigger(availableNow=True)
                 .option("checkpointLocation", str(tmp_path / "checkpoint")).start())
        query.awaitTermination(240)
        assert not query.isActive

    a = AuditedProducer(conf, "pa", settings)
    for i in range(900):  # one producer's runs, a run a partition: sparse rows
        a.produce(topic, b"a %d" % i, partition=0 if i < 450 else 2)
    a.flush(30)
    read_all()
    b = AuditedProducer(conf, "pb", settings)
    for i in range(600):  # two producers, a record each in turn: a row a record
        (p := a if i % 2 else b).produce(topic, b"ab %d" % i, partition=1)
        wait_until(lambda p=p: p.poll(0.005) >= 0 and len(p) == 0, 30, "the write's report",
                   every=0.001)
    a.close()
    b.close()
    tx = Producer({**conf, "transactional.id": topic})
    tx.init_transactions(30)
    tx.begin_transaction()
    tx.produce(topic, b"tx", partition=1)
    tx.commit_transaction(30)
    read_all()

    assert all(span >= records >= counted > 0 for span, records, counted in batches), batches
    assert sum(b[0] for b in batches) == 1502  # the writes, the transaction's record and marker
    assert sum(b[1] for b in batches) == 1501
    # five batches of about 300-400 offsets: 900 sparse ones, then 601 dense ones
    assert len(batches) == 5 and min(b[0] for b in batches) > 60, batches
    assert hows == {"large": ["bounded"] * 5, "small": ["streamed"] * 5,
                    "spark": ["written"] * 5}, hows

    def rows(name):
        return sorted(tuple(r.values()) for r in read_table(str(tmp_path / name), "consumed")
                      .drop_columns(["read_time"]).to_pylist())

    assert rows("large") == rows("counted") == rows("small") == rows("spark")
    assert len(rows("counted")) == sum(b[2] for b in batches)
    plain = spark.createDataFrame([(1,)], StructType([StructField("x", LongType())]))
    assert offset_span(plain) is None  # not a micro-batch of the Kafka source


def test_a_micro_batch_read_from_its_offset_ranges_reports_its_records(
        cluster, spark, settings, tmp_path):
    """The consume job folds a micro-batch from the offset ranges its source planned (the
    source's rows are never made): every record comes out in one run once, and the query's
    progress still says how many records each batch read (``numInputRows``: the consume
    log's lines and the backlog's reading count them)."""
    topic = f"source-{time.time_ns()}"
    cluster.create_topic(topic, partitions=2, replication=3)
    conf = {"bootstrap.servers": cluster.bootstrap, "linger.ms": 5}
    a = AuditedProducer(conf, "pa", settings)
    b = AuditedProducer(conf, "pb", settings)
    for i in range(300):
        a.produce(topic, b"a %d" % i, partition=i % 2)
        if i % 3 == 0:
            b.produce(topic, b"b %d" % i, partition=0)
    a.close()
    b.close()
    tx = Producer({**conf, "transactional.id": topic})  # a record and its marker: a gap
    tx.init_transactions(30)
    tx.begin_transaction()
    tx.produce(topic, b"tx", partition=1)
    tx.commit_transaction(30)
    folded = []

    def batch(df, batch_id):
        folded.extend(fold_read_runs(df, batch_id, source=True).collect())

    query = (spark.readStream.format("kafka").option("kafka.bootstrap.servers", cluster.bootstrap)
             .option("subscribe", topic).option("startingOffsets", "earliest")
             .option("includeHeaders", "true").option("maxOffsetsPerTrigger", 150).load()
             .writeStream.foreachBatch(batch).trigger(availableNow=True)
             .option("checkpointLocation", str(tmp_path / "checkpoint")).start())
    query.awaitTermination(240)
    assert not query.isActive
    records = 300 + 100 + 1
    offsets = [(r["partition"], r["offset"] + k) for r in folded for k in range(r["count"])]
    assert len(offsets) == len(set(offsets)) == records
    assert {r["producer_id"] for r in folded if r["stamped"]} == {"pa", "pb"}
    read = [p.numInputRows for p in query.recentProgress if p.numInputRows]
    assert len(read) >= 3 and sum(read) == records, read  # read in steps, each counted
