"""The consume job's JVM fold equals the SQL definition of read runs, on real records."""

import struct
import time
import zlib

from confluent_kafka import Producer

from kafka_audit.jobs.consume.transforms import fold_read_runs, parse_kafka_records, read_runs
from kafka_audit.producers.instrumented import AuditedProducer
from kafka_audit.schemas.stamp import HEADER, build_stamp
from kafka_audit.schemas.tables import column_names


def test_jvm_fold_equals_the_sql_definition(cluster, spark, settings):
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
    cols = [c for c in column_names("consumed") if c != "read_time"]
    kinds = {(r[cols.index("stamped")], r[cols.index("stamp_error")],
              r[cols.index("checksum_ok")]) for r in jvm}
    assert kinds >= {(True, None, True), (True, None, False), (False, "no kaudit header", None),
                     (False, "malformed stamp", None)}
    assert sum(r[cols.index("count")] for r in jvm) == df.count()
