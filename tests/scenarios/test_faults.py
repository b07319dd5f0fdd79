"""Fault scenarios on the real cluster, each judged against a full read of the topic:
an acks=1 leader kill (loss), retries without idempotence (duplicates, reordering),
and failed writes (rejected or indeterminate, never lost)."""

import time

from kafka_audit import store
from kafka_audit.producers.instrumented import AuditedProducer
from kafka_audit.scenarios.cluster import wait_until
from kafka_audit.scenarios.faults import cut_port, drop_responses
from kafka_audit.scenarios.groundtruth import full_read_stamps
from kafka_audit.scenarios.harness import (
    ApiServer,
    assert_secondaries_match,
    audit_until_settled,
    fetch_lost,
    findings_of,
    lost_messages,
)
from kafka_audit.scenarios.harness import expand_rows as expand

from ..support.leader_kill import (
    assert_the_leader_kill_findings,
    audited_losses,
    kill_the_leader,
    watching,
)


# the acks=1 leader kill on local disk, over HTTP: tests/scenarios/test_dashboard.py (its
# findings checked by the same assert_the_leader_kill_findings, then served and drawn)
def test_the_leader_kill_on_an_object_store_warehouse(cluster, spark, s3_settings, topic):
    """The acks=1 leader kill with every table and the audit's progress in a bucket on the
    S3 server:
    the producer hands its ledger's segments over (``ledger_commits: staged``) and the
    committer commits them, the watcher commits with delta-rs, the audit's Spark and
    delta-rs commits go there too, and the API reads them there."""
    staged = s3_settings.model_copy(update={"producer": s3_settings.producer.model_copy(
        update={"ledger_commits": "staged"})})
    with watching(staged):
        p, killed = kill_the_leader(staged, cluster, topic)
    # ground truth, computed apart from the auditor: acked stamps a full read cannot find
    truth = audited_losses(spark, staged, cluster, topic, p)
    assert_the_leader_kill_findings(staged, cluster, topic, p, truth, killed)
    with ApiServer(staged) as api:
        items = fetch_lost(api.base_url, topic)
    assert lost_messages(items) == truth
    assert not (s3_settings.home_dir / "warehouse").exists()
    assert store.staged_segments(staged.table_path("acks")) == {}


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

    # ground truth apart from the auditor: stamps a full read finds at more than one offset,
    # and writes with a lower-seq write of the run sitting above them
    s = assert_secondaries_match(settings, cluster.bootstrap, topic, p)
    assert s.true_duplicates, "broker-side timeouts with retries and no idempotence duplicate"
    assert s.true_reorders, "retried batches land after later ones"
    f = findings_of(settings, topic)
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
    assert_secondaries_match(settings, cluster.bootstrap, topic, p, unsent)
