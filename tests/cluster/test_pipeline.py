"""End to end on real parts: 3 KRaft brokers, Spark with the pinned jars, Delta tables."""

import itertools

import httpx
import pyarrow.compute as pc
from confluent_kafka import Producer
from deltalake import DeltaTable

from kafka_audit.jobs.consume.consume_job import consume_app_id, last_batch_written, start_consume
from kafka_audit.jobs.watcher.watcher import ClusterWatcher
from kafka_audit.producers.load import LoadSpec, run_load
from kafka_audit.scenarios.harness import (
    ApiServer,
    assert_secondaries_match,
    audit_until_settled,
    findings_of,
)
from kafka_audit.scenarios.harness import expand_rows as expand
from kafka_audit.schemas.tables import arrow_schema, spark_schema
from kafka_audit.store import read_table


def test_healthy_run_confirms_every_ack(cluster, spark, settings, topic):
    p = run_load(settings, LoadSpec(topic=topic, rate=20000, count=30000, acks="all"),
                 keep_record=True)
    assert (p.acked, p.failed) == (30000, 0)
    with ApiServer(settings) as api:  # before any audit pass: pending, never a zero
        before = httpx.get(f"{api.base_url}/v1/summary", params={"topic": topic}).json()
        audit_until_settled(spark, settings, topic, progress=print)
        after = httpx.get(f"{api.base_url}/v1/summary", params={"topic": topic}).json()
    assert (before["acked"], before["pending"], sum(before["verdicts"].values())) == (
        30000, 30000, 0)
    assert before["judged_through"]["pass_id"] == 0
    assert (after["acked"], after["pending"], after["verdicts"]["confirmed"],
            sum(after["verdicts"].values())) == (30000, 0, 30000, 30000)

    f = findings_of(settings, topic)
    assert {r["kind"] for r in f} == {"confirmed"}
    assert expand(f, "seq") == list(range(30000))  # every write confirmed exactly once
    assert_secondaries_match(settings, cluster.bootstrap, topic, p)
    # the ledger holds every delivery report exactly once, as runs: as few rows as the
    # writes' own runs (consecutive seqs at consecutive offsets of a partition, from the
    # producer's record) allow, and never one per run more than that (a buffer the ledger
    # drains may end a run early). How long the runs are is the producer's batching, which
    # a busy machine shortens (1,535 rows in a CI run, against the 1,500 once asked)
    acks = read_table(settings.table_path("acks"), "acks").to_pylist()
    assert expand(acks, "seq") == list(range(30000))
    record = sorted(p.record)
    runs = 1 + sum(1 for (s0, _, p0, o0), (s1, _, p1, o1) in itertools.pairwise(record)
                   if (s1, p1, o1) != (s0 + 1, p0, o0 + 1))
    assert runs <= len(acks) <= 2 * runs, f"{len(acks)} ledger rows for {runs} runs"
    # the consumed table holds every record once, stamped, with a good checksum
    consumed = read_table(settings.table_path("consumed"), "consumed")
    mine = consumed.filter(pc.equal(consumed["topic"], topic)).to_pylist()
    offsets = expand(mine, "partition", "offset")
    assert len(offsets) == 30000 and len(set(offsets)) == 30000
    assert all(r["stamped"] and r["checksum_ok"] and r["source"] == "stream" for r in mine)
    # great-expectations ran over the new acks and passed
    dq = read_table(settings.table_path("dq_results"), "dq_results").to_pylist()
    assert len(dq) >= 7 and all(r["success"] for r in dq)


def test_schemas_on_disk_match_the_declarations(cluster, spark, settings, topic):
    p = run_load(settings, LoadSpec(topic=topic, rate=0, count=100, acks="all"),
                 keep_record=True)
    audit_until_settled(spark, settings, topic, progress=print)
    assert_secondaries_match(settings, cluster.bootstrap, topic, p)
    for table in ("acks", "consumed", "findings", "partition_state", "audit_hot", "dq_results"):
        path = settings.table_path(table)
        on_disk = DeltaTable(path).schema().to_arrow()
        want = arrow_schema(table)
        assert on_disk.names == want.names, table
        spark_types = {f.name: f.dataType.simpleString()
                       for f in spark.read.format("delta").load(path).schema.fields}
        assert spark_types == {f.name: f.dataType.simpleString()
                               for f in spark_schema(table).fields}, table


def test_foreign_and_malformed_records_are_counted_not_fatal(cluster, spark, settings, topic):
    raw = Producer({"bootstrap.servers": cluster.bootstrap})
    for i in range(3):
        raw.produce(topic, b"foreign %d" % i, partition=0)
    raw.produce(topic, b"bad", partition=1, headers=[("kaudit", b"\x01short")])
    raw.produce(topic, b"bad", partition=1, headers=[("kaudit", b"\x09" + b"\x00" * 20)])
    assert raw.flush(30) == 0
    p = run_load(settings, LoadSpec(topic=topic, rate=0, count=50, acks="all"),
                 keep_record=True)
    audit_until_settled(spark, settings, topic, progress=print)
    assert_secondaries_match(settings, cluster.bootstrap, topic, p)
    consumed = read_table(settings.table_path("consumed"), "consumed").to_pylist()
    errors = sorted(r["stamp_error"] for r in consumed if r["topic"] == topic and not r["stamped"]
                    for _ in range(r["count"]))
    assert errors == ["malformed stamp"] * 2 + ["no kaudit header"] * 3
    f = findings_of(settings, topic)
    assert sum(r["count"] for r in f if r["kind"] == "confirmed") == 50
    assert {r["kind"] for r in f} == {"confirmed"}


def test_consume_restart_reads_nothing_twice(spark, settings, topic):
    # through Spark's Delta writer (the other tests' batches are few runs: delta-rs)
    settings = settings.model_copy(update={"spark": settings.spark.model_copy(
        update={"driver_rows": 0, "stream_rows": 0})})
    run_load(settings, LoadSpec(topic=topic, rate=0, count=200, acks="all"))
    start_consume(spark, settings, once=True).awaitTermination()
    run_load(settings, LoadSpec(topic=topic, rate=0, count=100, acks="all", producer_id="b"))
    start_consume(spark, settings, once=True).awaitTermination()  # resumes from its checkpoint
    start_consume(spark, settings, once=True).awaitTermination()  # nothing new: writes nothing
    consumed = read_table(settings.table_path("consumed"), "consumed")
    offsets = expand([r for r in consumed.to_pylist() if r["topic"] == topic],
                     "partition", "offset")
    assert len(offsets) == 300 and len(set(offsets)) == 300


def test_a_batch_replayed_after_a_crash_is_not_written_twice(spark, settings, topic):
    # the process dies after the sink committed batch N and before the checkpoint recorded
    # it: Spark runs batch N again on restart (same offsets), the sink must skip it
    run_load(settings, LoadSpec(topic=topic, rate=0, count=150, acks="all"))
    start_consume(spark, settings, once=True).awaitTermination()
    commits = settings.checkpoints / "consume" / "commits"
    last = max(int(f.name) for f in commits.iterdir() if f.name.isdigit())
    table = settings.table_path("consumed")
    app_id = consume_app_id(settings)
    assert last_batch_written(table, app_id) == last
    for f in (commits / str(last), commits / f".{last}.crc"):
        f.unlink(missing_ok=True)
    versions = DeltaTable(table).version()
    start_consume(spark, settings, once=True).awaitTermination()  # replays batch `last`
    assert DeltaTable(table).version() == versions  # nothing appended
    assert (commits / str(last)).exists()  # and the checkpoint moved past it
    run_load(settings, LoadSpec(topic=topic, rate=0, count=50, acks="all", producer_id="b"))
    start_consume(spark, settings, once=True).awaitTermination()  # the next batch lands
    assert last_batch_written(table, app_id) == last + 1
    consumed = read_table(table, "consumed")
    offsets = expand([r for r in consumed.to_pylist() if r["topic"] == topic],
                     "partition", "offset")
    assert len(offsets) == 200 and len(set(offsets)) == 200




def test_internal_topics_are_never_audited_by_default(cluster, spark, settings, topic):
    # Spark finds a subscribe pattern anywhere in a name: "[^_].*" matched "_kafka_audit_probe"
    internal = f"_internal-{topic}"
    cluster.create_topic(internal, partitions=1, replication=3)
    for name in (topic, internal):
        run_load(settings, LoadSpec(topic=name, rate=0, count=100, acks="all",
                                    producer_id=f"p-{name}"))
    start_consume(spark, settings, once=True).awaitTermination()  # the default pattern
    consumed = read_table(settings.table_path("consumed"), "consumed",
                          columns=["topic", "count"]).to_pylist()
    topics = {r["topic"] for r in consumed}
    assert topic in topics and sum(r["count"] for r in consumed if r["topic"] == topic) == 100
    assert not [t for t in topics if t.startswith("_")], topics
    watcher = ClusterWatcher(settings)
    watcher.poll_once()
    assert (topic, 0) in watcher.state and not [k for k in watcher.state if k[0][0] == "_"]
