"""Each Kafka version the local cluster runs (``cluster.kafka_version``), formatted with
KIP-966's eligible leader replicas on (``cluster.eligible_leader_replicas``), a cluster of
its own beside the session's: the catalog runs on the session's cluster (the pinned
version, classic elections), one scenario here on each of these.

The ELR election: the partition's followers are cut off from the leader's replication
listener, so the ISR shrinks to the leader and the followers become eligible (the ISR fell
below ``min.insync.replicas``); the leader is then killed. Kafka elects an eligible
follower: a clean election, where the classic rules (the ISRs alone, what a poll sees)
name an unclean one. The watcher's fold of the real metadata log must name it
``elr_election``, and the new leader must hold every write acknowledged with
``acks=all`` (a trickle of ``acks=1`` writes during the cut, which the followers miss,
makes them fall out of sync).
"""

import time
from dataclasses import replace

import pytest
from confluent_kafka import Producer

from kafka_audit.jars import KAFKA_VERSIONS
from kafka_audit.jobs.watcher.metadata_log import MetadataFold, MetadataTail
from kafka_audit.jobs.watcher.watcher import PartitionView, diff_partition
from kafka_audit.scenarios.cluster import LocalCluster, wait_until
from kafka_audit.scenarios.faults import cut_port
from kafka_audit.scenarios.runner import run_scenario
from kafka_audit.settings import Settings
from kafka_audit.store import read_table

from ..conftest import CLUSTER, test_settings

WRITES = 300


@pytest.fixture(scope="module", params=KAFKA_VERSIONS)
def elr_cluster(request, tmp_path_factory):
    """A second cluster beside the session's, its ports 10 above it, with ELR on, in each
    Kafka version the local cluster runs (its metadata log read with the newest's jars)."""
    ports = {k: v + 10 for k, v in CLUSTER.items() if k.endswith("_port")}
    settings = Settings(home=tmp_path_factory.mktemp("elr"),
                        cluster={**CLUSTER, **ports, "eligible_leader_replicas": True,
                                 "kafka_version": request.param})
    c = LocalCluster(settings)
    c.up(print)
    assert c.formatted_as() == {"kafka_version": request.param,
                                "eligible_leader_replicas": True}
    yield c
    c.discard()


def test_a_scenario_on_this_version_matches_a_full_read(elr_cluster, spark, tmp_path):
    """The ISR shrunk to the leader, the leader lost, an unclean election: every loss found
    with a cause the scenario allows, and the election named unclean in the timeline."""
    c = elr_cluster
    settings = test_settings(tmp_path, cluster=c.cfg.model_dump(), watch={
        "metadata_log_dirs": [str(c.node_dir(n) / "meta") for n in c.nodes]})
    report = run_scenario("isr-shrunk-unclean", settings, c, spark, seed=1, seconds=8,
                          out_dir=tmp_path, progress=print)
    print(report.text())
    assert report.ok and report.found_lost, report.text()
    assert [r for r in read_table(settings.table_path("cluster_events"),
                                  "cluster_events").to_pylist()
            if r["topic"] == report.topic and r["kind"] == "unclean_election"]


def test_an_election_from_the_eligible_replicas_is_named_so_not_unclean(elr_cluster):
    c = elr_cluster
    topic = f"elr-{time.time_ns()}"
    c.create_topic(topic, 1, 3, config={"min.insync.replicas": "2"})
    acked = []
    p = Producer({"bootstrap.servers": c.bootstrap, "acks": "all", "linger.ms": 5})
    for i in range(WRITES):
        p.produce(topic, b"%d" % i, partition=0,
                  on_delivery=lambda err, m: acked.append(m.offset()) if err is None else None)
    assert p.flush(30) == 0 and len(acked) == WRITES
    leader = c.leader_of(topic, 0)
    one = Producer({"bootstrap.servers": c.bootstrap, "acks": "1", "linger.ms": 5})

    def shrunk() -> bool:  # a follower falls out of sync only while it misses new writes
        one.produce(topic, b"acks=1", partition=0)
        one.poll(0)
        return c.partitions(topic)[0].isr == (leader,)

    with cut_port(c.cfg.replication_port(leader)):  # the followers fetch from it no more
        wait_until(shrunk, 60, "the ISR to shrink to the leader")
        # every acks=1 write delivered before the kill: one still in flight would be
        # retried to the new leader and land past the writes acknowledged by all
        assert one.flush(30) == 0
        c.kill(leader)
        new = wait_until(lambda: next(
            (n for n in c.nodes if n != leader
             and c.leader_of(topic, 0, seen_by=n) not in (-1, leader)), None), 60,
            "a follower to be elected")
        elected = c.leader_of(topic, 0, seen_by=new)
    # the eligible replica held every write acknowledged at min.insync.replicas (those
    # the leader alone acknowledged with acks=1 are gone with it); its high watermark
    # moves once the ISR is back at min.insync.replicas: the old leader restarted
    c.start(leader)
    def high_watermark() -> int | None:
        end = c.log_end(topic, 0)
        return end if end >= WRITES else None

    assert wait_until(high_watermark, 90, "the high watermark at the acked writes") == WRITES

    fold = MetadataFold(min_isr={topic: 2})
    tail = MetadataTail([c.meta_dir(n) / "__cluster_metadata-0" for n in c.nodes], fold, 30)
    rows: list[dict] = []
    tail.start()
    try:
        def read() -> bool:
            rows.extend(r for r in tail.drain_with_muted()[0] if r["topic"] == topic)
            return any(r["kind"] == "leader_change" and r["leader"] == elected for r in rows)
        wait_until(read, 60, "the election in the metadata log")
    finally:
        tail.stop()
    change = next(r for r in rows if r["kind"] == "leader_change" and r["leader"] == elected)
    kinds = {r["kind"] for r in rows if r["event_time"] == change["event_time"]}
    assert "elr_election" in kinds and "unclean_election" not in kinds, rows
    assert elected in change["previous_eligible_leader_replicas"]
    assert elected not in (change["previous_isr"] or ())
    # what the classic rules make of the same change, the eligible replicas unseen
    before = PartitionView(change["previous_leader"], tuple(change["previous_isr"]),
                           tuple(change["replicas"]),
                           elr=tuple(change["previous_eligible_leader_replicas"]))
    after = PartitionView(elected, tuple(change["isr"]), tuple(change["replicas"]))
    assert "elr_election" in diff_partition(before, after)
    # (Kafka wrote ISR [leader] -> [elected] in one record: unclean by the ISRs alone)
    classic = diff_partition(replace(before, elr=None), after)
    assert "unclean_election" in classic and "elr_election" not in classic, classic


def test_check_reads_the_version_and_the_election_rules(elr_cluster, tmp_path):
    from kafka_audit.app.preflight import run_check

    c = elr_cluster
    report = run_check(test_settings(tmp_path, cluster=c.cfg.model_dump()))
    assert report.kafka_metadata_version.startswith(c.cfg.kafka_version.rsplit(".", 1)[0])
    assert report.eligible_leader_replicas == "on"
    assert not [f for f in report.findings if f.subject == "cluster"], report.text()
