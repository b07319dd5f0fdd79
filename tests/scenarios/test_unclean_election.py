"""Scenarios 2 and 3 on the real cluster: ISR shrunk to the leader, leader killed, an
out-of-sync follower elected (unclean), committed and already-read writes destroyed.

The leader's replication listener is cut (iptables, both directions) while its clients
still reach it, so ``acks=all`` with ``min.insync.replicas=1`` is acknowledged by the
leader alone. The consume job reads part of those writes before the leader is killed;
the new leader's log then holds other records and transaction markers at their offsets.
While the ISR is the leader alone, the audit gives those writes no verdict however long
they have been read and settled. Once the leader is lost, every lost write must be found,
each with the right kind:

* read before the kill -> ``lost_after_seen`` (a record or a marker there now);
* never read, a record there now -> ``lost / overwritten``;
* never read, a transaction marker there now (never readable again) -> ``lost / vanished``.
"""

import time

from confluent_kafka import Producer

from kafka_audit.jobs.audit.audit_pass import run_audit_pass
from kafka_audit.jobs.consume.consume_job import start_consume
from kafka_audit.jobs.watcher.watcher import ClusterWatcher
from kafka_audit.producers.instrumented import AuditedProducer
from kafka_audit.scenarios.cluster import wait_until
from kafka_audit.scenarios.faults import cut_port
from kafka_audit.scenarios.groundtruth import full_read
from kafka_audit.scenarios.harness import assert_secondaries_match, audit_until_settled
from kafka_audit.scenarios.harness import expand_rows as expand
from kafka_audit.schemas.verdicts import Cause, cause_name
from kafka_audit.store import read_table

N = 300  # writes per phase


def produce(p, topic, n, tag):
    for i in range(n):
        p.produce(topic, b"%s %d" % (tag, i), partition=0)
        if i % 100 == 0:
            p.poll(0)
    assert p.flush(60) == 0


def settled_past(spark, settings, topic, offset):
    """One audit pass; the topic's partition state if its settled frontier passed ``offset``."""
    summary = run_audit_pass(spark, settings)
    rows = [r for r in read_table(settings.table_path("partition_state"), "partition_state")
            .to_pylist() if r["pass_id"] == summary.pass_id and r["topic"] == topic]
    return rows[0] if rows and rows[0]["settled_frontier"] >= offset else None


def test_unclean_election_after_reads_finds_every_kind_of_loss(cluster, spark, settings):
    topic = f"unclean-{time.time_ns()}"
    cluster.create_topic(topic, partitions=1, replication=3,
                         config={"min.insync.replicas": "1",
                                 "unclean.leader.election.enable": "true"})
    watcher = ClusterWatcher(settings)
    thread, stop = watcher.start_thread()
    conf = {"bootstrap.servers": cluster.bootstrap, "acks": "all", "linger.ms": 5,
            "enable.idempotence": False, "retries": 0, "message.timeout.ms": 30000}
    p = AuditedProducer(conf, "uncl", settings, keep_record=True)
    leader = cluster.leader_of(topic, 0)
    try:
        produce(p, topic, N, b"A")  # replicated to all three
        with cut_port(settings.cluster.replication_port(leader)):
            produce(p, topic, N, b"B1")  # acked once the ISR has shrunk to the leader
            wait_until(lambda: watcher.state.get((topic, 0)) is not None
                       and watcher.state[(topic, 0)].isr == (leader,), 30,
                       "the watcher to see the ISR shrunk to the leader")
            start_consume(spark, settings, topic, once=True).awaitTermination()
            # the audit runs while the ISR is the leader alone: writes read and settled, yet
            # at risk of an unclean election, get no verdict (a confirmed one would be wrong)
            state = wait_until(lambda: settled_past(spark, settings, topic, 2 * N), 120,
                               "the read writes to settle")
            assert state["pending"] == 2 * N
            assert not [r for r in read_table(settings.table_path("findings"), "findings")
                        .to_pylist() if r["topic"] == topic]
            produce(p, topic, N, b"B2")  # acked, never read before the kill
            p.close()
            cluster.kill(leader)
            wait_until(lambda: cluster.partitions(topic)[0].leader not in (-1, leader), 60,
                       "an unclean election")
        # the new leader writes over the destroyed offsets: a record, then its commit marker
        tx = Producer({"bootstrap.servers": cluster.bootstrap, "transactional.id": topic})
        tx.init_transactions(30)
        for i in range(N):
            tx.begin_transaction()
            tx.produce(topic, b"C %d" % i, partition=0)
            tx.commit_transaction(30)
        plain = Producer({"bootstrap.servers": cluster.bootstrap})
        for i in range(10):  # plain records after the last marker: the frontier passes it
            plain.produce(topic, b"D %d" % i, partition=0)
        assert plain.flush(30) == 0
        cluster.start(leader)
        wait_until(lambda: len(cluster.partitions(topic)[0].isr) == 3, 90, "the ISR to heal")
    finally:
        stop.set()
        thread.join(10)
    audit_until_settled(spark, settings, topic, progress=print)

    # ground truth apart from the auditor: the log as a full read finds it now
    now = full_read(cluster.bootstrap, topic)
    acked = {seq: off for seq, _t, _p, off in p.record}
    assert len(acked) == 3 * N and p.failed == 0
    lost = {seq for seq, off in acked.items() if now.get((0, off)) != ("uncl", p.run_id, seq)}
    # writes from the read phase that were acked (so read by the consume job, which reads to
    # the high watermark: the leader's log end while the ISR was the leader alone)
    read_before = set(range(N, 2 * N))
    assert lost == set(range(N, 3 * N)), "every write after the cut is destroyed"
    marker_at = {seq for seq in lost if (0, acked[seq]) not in now}
    assert marker_at and marker_at - read_before

    findings = [r for r in read_table(settings.table_path("findings"), "findings").to_pylist()
                if r["topic"] == topic]

    def writes(kind, subkind=None):  # (seq, offset) of every write judged so
        return set(expand([r for r in findings if r["kind"] == kind
                           and (subkind is None or r["subkind"] == subkind)], "seq", "offset"))

    def at_acked(seqs):
        return {(seq, acked[seq]) for seq in seqs}

    unread = lost - read_before
    print(f"lost after seen {len(lost & read_before)}, overwritten "
          f"{len(unread - marker_at)}, vanished {len(unread & marker_at)}")
    assert writes("lost_after_seen") == at_acked(lost & read_before)
    assert writes("lost", "overwritten") == at_acked(lost - read_before - marker_at)
    assert writes("lost", "vanished") == at_acked((lost - read_before) & marker_at)
    assert writes("confirmed") == at_acked(range(N))
    assert not [r for r in findings if r["kind"] not in ("confirmed", "lost", "lost_after_seen")]
    # by name: a watcher blind while the leader died is said beside the cause
    assert {cause_name(r["cause"]) for r in findings if r["kind"] != "confirmed"} == {
        Cause.isr_shrunk}
    assert_secondaries_match(settings, cluster.bootstrap, topic, p)
