"""No false loss on a healthy cluster: retention, compaction, transactions (markers and
aborts), consumer restarts and partitions added mid-stream, each on the real cluster."""

import time

from confluent_kafka import TopicPartition
from confluent_kafka.admin import NewPartitions

from kafka_audit.jobs.consume.consume_job import start_consume
from kafka_audit.producers.instrumented import AuditedProducer
from kafka_audit.producers.load import LoadSpec, run_load
from kafka_audit.scenarios.cluster import wait_until
from kafka_audit.scenarios.groundtruth import full_read_stamps
from kafka_audit.scenarios.harness import assert_secondaries_match, audit_until_settled, findings_of
from kafka_audit.scenarios.harness import expand_rows as expand
from kafka_audit.store import read_table


def kinds(findings):
    out: dict[str, int] = {}
    for r in findings:
        key = r["kind"] if r["subkind"] is None else f"{r['kind']}/{r['subkind']}"
        out[key] = out.get(key, 0) + r["count"]
    return out


def test_records_deleted_by_retention_are_unverified_not_lost(cluster, spark, settings, topic):
    p = run_load(settings, LoadSpec(topic=topic, rate=0, count=3000, acks="all"),
                 keep_record=True)
    # the log start of the fullest partition moves past half its records before the auditor
    # reads anything: what retention does to a consumer that falls behind
    sizes = {}
    for _s, _t, part, off in p.record:
        sizes[part] = max(sizes.get(part, 0), off + 1)
    part0 = max(sizes, key=sizes.get)
    cut = sizes[part0] // 2
    admin = cluster.admin()  # keep the client alive until its futures are done
    for fut in admin.delete_records([TopicPartition(topic, part0, cut)]).values():
        fut.result(30)
    b = run_load(settings, LoadSpec(topic=topic, rate=0, count=300, acks="all",
                                    producer_id="b"), keep_record=True)
    audit_until_settled(spark, settings, topic, progress=print)
    assert_secondaries_match(settings, cluster.bootstrap, topic, p, b)
    f = findings_of(settings, topic)
    gone = sorted((part0, off, seq) for seq, _t, part, off in p.record
                  if part == part0 and off < cut)
    assert gone and expand([r for r in f if r["kind"] == "unverified"],
                           "partition", "offset", "seq") == gone
    assert {r["subkind"] for r in f if r["kind"] == "unverified"} == {"retention"}
    assert kinds(f) == {"confirmed": 3300 - len(gone), "unverified/retention": len(gone)}


def test_transaction_markers_and_aborted_transactions_are_not_loss(cluster, spark, settings,
                                                                   topic):
    conf = {"bootstrap.servers": cluster.bootstrap, "transactional.id": f"tx-{topic}",
            "enable.idempotence": True, "acks": "all", "linger.ms": 5}
    p = AuditedProducer(conf, "tx", settings, keep_record=True)
    p.init_transactions()
    for n, commit in enumerate([True, False, True, True]):
        p.begin_transaction()
        for i in range(200):
            p.produce(topic, b"txn %d record %d" % (n, i), partition=i % 3)
        p.flush()  # delivered (acked) before the outcome is decided
        p.commit_transaction() if commit else p.abort_transaction()
    p.close()
    assert (p.acked, p.failed) == (800, 0)
    audit_until_settled(spark, settings, topic, progress=print)
    assert_secondaries_match(settings, cluster.bootstrap, topic, p)
    f = findings_of(settings, topic)
    # aborted records stay in the log (read_uncommitted): durable, not lost; each commit or
    # abort left a marker at the offset after its records: a gap, not a loss
    assert kinds(f) == {"confirmed": 800}
    offsets = expand([r for r in f if r["kind"] == "confirmed"], "partition", "offset")
    assert max(o for part, o in offsets if part == 0) > len([1 for part, _ in offsets
                                                            if part == 0])


def test_consumer_restart_mid_stream_loses_nothing(cluster, spark, settings, topic):
    a = run_load(settings, LoadSpec(topic=topic, rate=0, count=2000, acks="all"),
                 keep_record=True)
    start_consume(spark, settings, once=True).awaitTermination()
    b = run_load(settings, LoadSpec(topic=topic, rate=0, count=1000, acks="all",
                                    producer_id="b"), keep_record=True)
    start_consume(spark, settings, once=True).awaitTermination()  # a new query, same checkpoint
    audit_until_settled(spark, settings, topic, progress=print)
    assert_secondaries_match(settings, cluster.bootstrap, topic, a, b)
    assert kinds(findings_of(settings, topic)) == {"confirmed": 3000}
    consumed = [r for r in read_table(settings.table_path("consumed"), "consumed").to_pylist()
                if r["topic"] == topic]
    assert {r["source"] for r in consumed} == {"stream"}  # nothing needed a re-read


def test_partitions_added_mid_stream_lose_nothing(cluster, spark, settings, topic):
    a = run_load(settings, LoadSpec(topic=topic, rate=0, count=1000, acks="all"),
                 keep_record=True)
    start_consume(spark, settings, once=True).awaitTermination()
    admin = cluster.admin()  # keep the client alive until its futures are done
    for fut in admin.create_partitions([NewPartitions(topic, 5)]).values():
        fut.result(30)
    wait_until(lambda: len([i for i in cluster.partitions(topic) if i.leader >= 0]) == 5, 60,
               "the new partitions to have leaders")
    p = AuditedProducer({"bootstrap.servers": cluster.bootstrap, "acks": "all"}, "b", settings,
                        keep_record=True)
    for i in range(2000):
        p.produce(topic, b"after %d" % i, partition=i % 5)  # old and new partitions
    p.close()
    assert {part for _s, _t, part, _o in p.record} == {0, 1, 2, 3, 4}
    audit_until_settled(spark, settings, topic, progress=print)
    assert_secondaries_match(settings, cluster.bootstrap, topic, a, p)
    f = findings_of(settings, topic)
    assert kinds(f) == {"confirmed": 3000}
    assert {r["partition"] for r in f} == {0, 1, 2, 3, 4}


def test_records_removed_by_compaction_are_unverified_not_lost(cluster, spark, settings):
    topic = f"compacted-{time.time_ns()}"
    cluster.create_topic(topic, partitions=1, replication=3, config={
        "cleanup.policy": "compact", "segment.ms": "200", "min.cleanable.dirty.ratio": "0.01",
        "min.compaction.lag.ms": "0", "delete.retention.ms": "0"})
    p = AuditedProducer({"bootstrap.servers": cluster.bootstrap, "acks": "all"}, "keys",
                        settings, keep_record=True)

    def burst(n: int) -> None:
        for i in range(n):
            p.produce(topic, b"value %d" % i, key=b"key-%d" % (i % 10))
        p.flush()

    burst(100)  # ten versions of each of ten keys
    # keep writing so segments roll; the cleaner keeps the last version of each key only
    def stamps_in_log() -> int:
        return len(full_read_stamps(cluster.bootstrap, topic))

    def compacted_some() -> bool:
        burst(10)
        return stamps_in_log() < p.acked

    wait_until(compacted_some, 120, "the log cleaner to compact the topic", every=1)
    p.close()
    # no more appends: the active segment stays; wait until the cleaner is done with the rest
    counts = [stamps_in_log()]

    def stable() -> bool:
        counts.append(stamps_in_log())
        return counts[-1] == counts[-2]

    wait_until(stable, 60, "compaction to settle", every=3)
    audit_until_settled(spark, settings, topic, progress=print)
    assert_secondaries_match(settings, cluster.bootstrap, topic, p)
    found = full_read_stamps(cluster.bootstrap, topic)
    gone = sorted((off, seq) for seq, _t, _part, off in p.record
                  if ("keys", p.run_id, seq) not in found)
    assert gone, "compaction removed nothing"
    f = findings_of(settings, topic)
    assert sorted((off, seq) for _p, off, seq in expand(
        [r for r in f if r["kind"] == "unverified"], "partition", "offset", "seq")) == gone
    assert {r["subkind"] for r in f if r["kind"] == "unverified"} == {"compacted"}
    assert kinds(f) == {"confirmed": p.acked - len(gone), "unverified/compacted": len(gone)}
