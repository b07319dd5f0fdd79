"""End to end on real parts: 3 KRaft brokers, Spark with the pinned jars, Delta tables."""

import json
import time

import pyarrow.compute as pc
from confluent_kafka import Producer
from deltalake import DeltaTable

from kafka_audit.demo import (
    ApiServer,
    audit_until_settled,
    fetch_lost,
    lost_messages,
    produce_with_leader_kill,
)
from kafka_audit.demo import expand_rows as expand
from kafka_audit.deploy.cluster import wait_until
from kafka_audit.deploy.faults import cut_port, drop_responses
from kafka_audit.groundtruth import acked_but_missing, full_read_stamps
from kafka_audit.jobs.consume_job import consume_app_id, last_batch_written, start_consume
from kafka_audit.jobs.io import read_table
from kafka_audit.jobs.watcher import ClusterWatcher
from kafka_audit.producers.instrumented import AuditedProducer
from kafka_audit.producers.load import LoadSpec, run_load
from kafka_audit.schemas.tables import arrow_schema, spark_schema


def findings_of(settings, topic):
    return [r for r in read_table(settings.table_path("findings"), "findings").to_pylist()
            if r["topic"] == topic]


def test_healthy_run_confirms_every_ack(cluster, spark, settings, topic):
    p = run_load(settings, LoadSpec(topic=topic, rate=20000, count=30000, acks="all"),
                 keep_record=True)
    assert (p.acked, p.failed) == (30000, 0)
    audit_until_settled(spark, settings, topic, progress=print)

    f = findings_of(settings, topic)
    assert {r["kind"] for r in f} == {"confirmed"}
    assert expand(f, "seq") == list(range(30000))  # every write confirmed exactly once
    # the ledger holds every delivery report exactly once, as runs
    acks = read_table(settings.table_path("acks"), "acks").to_pylist()
    assert expand(acks, "seq") == list(range(30000))
    assert len(acks) <= 30000 / 20, f"{len(acks)} ledger rows for 30000 acks"
    # the consumed table holds every record once, stamped, with a good checksum
    consumed = read_table(settings.table_path("consumed"), "consumed")
    mine = consumed.filter(pc.equal(consumed["topic"], topic)).to_pylist()
    offsets = expand(mine, "partition", "offset")
    assert len(offsets) == 30000 and len(set(offsets)) == 30000
    assert all(r["stamped"] and r["checksum_ok"] and r["source"] == "stream" for r in mine)
    # great-expectations ran over the new acks and passed
    dq = read_table(settings.table_path("dq_results"), "dq_results").to_pylist()
    assert len(dq) >= 7 and all(r["success"] for r in dq)


def test_schemas_on_disk_match_the_declarations(spark, settings, topic):
    run_load(settings, LoadSpec(topic=topic, rate=0, count=100, acks="all"))
    audit_until_settled(spark, settings, topic, progress=print)
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
    run_load(settings, LoadSpec(topic=topic, rate=0, count=50, acks="all"))
    audit_until_settled(spark, settings, topic, progress=print)
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
        update={"driver_rows": 0})})
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


def test_acks1_leader_kill_loss_matches_ground_truth_over_http(cluster, spark, settings, topic):
    watcher = ClusterWatcher(settings)
    thread, stop = watcher.start_thread()
    try:
        p, killed = produce_with_leader_kill(settings, cluster, topic, acks="1",
                                             before_kill=3, after_kill=3, progress=print)
    finally:
        stop.set()
        thread.join(10)
    audit_until_settled(spark, settings, topic, progress=print)

    # ground truth, computed apart from the auditor: acked stamps a full read cannot find
    truth = acked_but_missing(p.record, p.producer_id, p.run_id,
                              full_read_stamps(cluster.bootstrap, topic))
    assert truth, "acks=1 with a leader SIGKILL mid-stream is expected to lose writes"
    lost = [r for r in findings_of(settings, topic) if r["kind"] in ("lost", "lost_after_seen")]
    assert expand(lost, "partition", "offset", "seq") == truth
    assert {r["run_id"] for r in lost} == {p.run_id}
    assert {r["cause"] for r in lost} == {"acks=1 fail-over"}
    # truncation: the lost offsets hold other records now; each loss was re-read first
    assert "overwritten" in {r["subkind"] for r in lost}
    for r in lost:
        seen = json.loads(r["evidence"])["seen"]
        assert any(view[1] == "reread" for view in seen), r

    with ApiServer(settings) as api:
        items = fetch_lost(api.base_url, topic)
    assert lost_messages(items) == truth

    events = read_table(settings.table_path("cluster_events"), "cluster_events").to_pylist()
    changes = [e for e in events if e["topic"] == topic and e["kind"] == "leader_change"]
    assert any(e["previous_leader"] == killed for e in changes)


def produce_for(p, topic, seconds, rate=5000, partition=0):
    start, sent = time.monotonic(), 0
    while (elapsed := time.monotonic() - start) < seconds:
        if sent > elapsed * rate:
            p.poll(0.005)
            continue
        p.produce(topic, b"record %d" % sent, partition=partition)
        sent += 1
        if sent % 200 == 0:
            p.poll(0)


def test_retries_without_idempotence_are_found_as_duplicates(cluster, spark, settings, topic):
    # partition 0's leader is cut off from its followers for 2 s: its appends wait for them
    # until the broker times the requests out (request.timeout.ms is enforced by the broker),
    # the producer (no idempotence, 5 requests in flight) retries, the first appends stay
    conf = {"bootstrap.servers": cluster.bootstrap, "acks": "all", "enable.idempotence": False,
            "retries": 1000, "max.in.flight.requests.per.connection": 5,
            "request.timeout.ms": 1000, "message.timeout.ms": 60000, "linger.ms": 5}
    p = AuditedProducer(conf, "retrier", settings, keep_record=True)
    produce_for(p, topic, 1.5)
    leader = cluster.leader_of(topic, 0)
    with cut_port(settings.cluster.replication_port(leader)):
        produce_for(p, topic, 2)
    produce_for(p, topic, 2)
    p.close()
    assert p.failed == 0
    audit_until_settled(spark, settings, topic, progress=print)

    # ground truth apart from the auditor: stamps a full read finds at more than one offset
    found = full_read_stamps(cluster.bootstrap, topic)
    acked = {seq: (part, off) for seq, _t, part, off in p.record}
    truth = sorted((seq, acked[seq][1], tuple(o for part, o in sorted(places)
                                              if (part, o) != acked[seq]))
                   for (pid, run, seq), places in found.items()
                   if run == p.run_id and len(places) > 1)
    assert truth, "broker-side timeouts with retries and no idempotence should duplicate"
    f = findings_of(settings, topic)
    dups = sorted((r["seq"] + k, r["offset"] + k,
                   tuple(o + k for o in json.loads(r["evidence"])["also_read_at"]))
                  for r in f if r["kind"] == "duplicate" for k in range(r["count"]))
    assert dups == truth
    # reordered: a write with a lower seq sits at a higher offset of the same partition
    by_part: dict[int, list[tuple[int, int]]] = {}
    for seq, (part, off) in acked.items():
        by_part.setdefault(part, []).append((seq, off))
    want = sorted((part, off, seq) for part, ws in by_part.items() for seq, off in ws
                  if any(s2 < seq and o2 > off for s2, o2 in ws))
    assert want, "retried batches land after later ones"
    assert expand([r for r in f if r["kind"] == "reordered"], "partition", "offset", "seq") == want
    assert sum(r["count"] for r in f if r["kind"] == "confirmed") == p.acked
    assert not [r for r in f if r["kind"] in ("lost", "lost_after_seen")]


def test_failed_writes_are_rejected_or_indeterminate_never_lost(cluster, spark, settings):
    topic = f"strict-{time.time_ns()}"
    cluster.create_topic(topic, partitions=1, replication=3, config={"min.insync.replicas": "3"})
    conf = {"bootstrap.servers": cluster.bootstrap, "acks": "all", "enable.idempotence": False,
            "retries": 0, "request.timeout.ms": 1000, "message.timeout.ms": 1500,
            "linger.ms": 5}
    p = AuditedProducer(conf, "strict", settings, keep_record=True)
    produce_for(p, topic, 1)
    leader = cluster.leader_of(topic, 0)
    # 1. requests applied but unanswered: the writes fail (timed out) yet sit in the log
    with drop_responses(settings.cluster.broker_port(leader)):
        produce_for(p, topic, 1.5)
        p.flush(10)
    produce_for(p, topic, 1)
    # 2. one replica down, min.insync.replicas=3: the cluster refuses every write
    follower = next(n for n in cluster.running() if n != leader)
    cluster.stop(follower)
    try:
        wait_until(lambda: len(cluster.partitions(topic)[0].isr) == 2, 60, "the ISR to shrink")
        produce_for(p, topic, 1)
        p.flush(10)
    finally:
        cluster.start(follower)
        wait_until(lambda: len(cluster.partitions(topic)[0].isr) == 3, 60, "the ISR to heal")
    produce_for(p, topic, 1)
    p.close()
    # 3. the leader's client port cut before a new producer connects: its writes time out
    # unsent (a failed write, indeterminate / absent, never a loss)
    unsent = AuditedProducer(conf, "unsent", settings, keep_record=True)
    with cut_port(settings.cluster.broker_port(cluster.leader_of(topic, 0))):
        produce_for(unsent, topic, 0.5, rate=400)
        unsent.flush(10)
    unsent.close()
    audit_until_settled(spark, settings, topic, progress=print)

    found = full_read_stamps(cluster.bootstrap, topic)
    assert unsent.sent > 0 and unsent.acked == 0 and unsent.failed == unsent.sent
    assert not [s for s in found if s[0] == "unsent"]
    timed_out = [r for r in findings_of(settings, topic) if r["producer_id"] == "unsent"]
    assert {(r["kind"], r["subkind"]) for r in timed_out} == {("indeterminate", "absent")}
    assert expand(timed_out, "seq") == list(range(unsent.sent))
    present = sorted(seq for seq, *_ in p.failures if ("strict", p.run_id, seq) in found)
    refused = sorted(seq for seq, _t, _p, err in p.failures if err == "NOT_ENOUGH_REPLICAS"
                     and ("strict", p.run_id, seq) not in found)
    assert present and refused, (len(present), len(refused), p.failed)
    f = [r for r in findings_of(settings, topic) if r["producer_id"] == "strict"]
    assert expand([r for r in f if r["kind"] == "indeterminate" and r["subkind"] == "present"],
                  "seq") == present
    assert expand([r for r in f if r["kind"] == "rejected"], "seq") == refused
    absent = sorted(seq for seq, *_ in p.failures if ("strict", p.run_id, seq) not in found)
    assert expand([r for r in f if r["kind"] in ("rejected", "indeterminate")
                   and r["subkind"] != "present"], "seq") == absent
    assert sum(r["count"] for r in f if r["kind"] == "confirmed") == p.acked
    assert not [r for r in f if r["kind"] in ("lost", "lost_after_seen")]
