"""The local cluster in ZooKeeper mode (Kafka 3.9, ``cluster.kafka_version: 3.9.2``), a
cluster of its own beside the session's, and the watcher's ZooKeeper timeline
(``jobs/watcher/zookeeper.py``) against it: every change it reads is the state the brokers
report (leader, leader epoch, ISR), at the time the controller wrote it, and the brokers'
and the controller's changes too."""

import time

import pytest
from confluent_kafka import KafkaException, Producer, TopicPartition
from confluent_kafka.admin import OffsetSpec

from kafka_audit.jars import ZOOKEEPER_VERSIONS
from kafka_audit.jobs.watcher.metadata_log import MetadataFold
from kafka_audit.jobs.watcher.zookeeper import SOURCE, ZooKeeperTimeline
from kafka_audit.scenarios.cluster import LocalCluster, wait_until
from kafka_audit.settings import Settings

from ..conftest import CLUSTER


@pytest.fixture(scope="module", params=ZOOKEEPER_VERSIONS)
def zk_cluster(request, tmp_path_factory):
    """A ZooKeeper-mode cluster, its ports 20 above the session's (the versions' clusters
    take 10 above)."""
    ports = {k: v + 20 for k, v in CLUSTER.items() if k.endswith("_port")}
    settings = Settings(home=tmp_path_factory.mktemp("zk"),
                        cluster={**CLUSTER, **ports, "kafka_version": request.param})
    c = LocalCluster(settings)
    c.up(print)
    assert c.zookeeper_pid() is not None
    assert c.formatted_as() == {"kafka_version": request.param,
                                "eligible_leader_replicas": False}
    yield c
    c.discard()
    assert c.zookeeper_pid() is None


def epoch_of(c: LocalCluster, topic: str, partition: int) -> int:
    """The leader epoch the partition's leader answers (ListOffsets latest; asked again, by
    a new client with fresh metadata, while a new leader has no answer yet)."""
    def ask() -> tuple[int] | None:  # a tuple: epoch 0 is an answer too
        admin = c.admin()  # referenced until its future resolves
        future = admin.list_offsets({TopicPartition(topic, partition): OffsetSpec.latest()},
                                    request_timeout=5)
        try:
            epoch = next(iter(future.values())).result(10).leader_epoch
            return None if epoch is None else (int(epoch),)
        except KafkaException as exc:
            if "OFFSET_NOT_AVAILABLE" in str(exc) or "NOT_LEADER" in str(exc):
                return None
            raise

    return wait_until(ask, 30, f"the leader epoch of {topic}-{partition}")[0]


def test_the_zookeeper_timeline_is_what_the_brokers_report(zk_cluster):
    c = zk_cluster
    timeline = ZooKeeperTimeline(f"{c.cfg.host}:{c.cfg.zookeeper_port}",
                                 MetadataFold(source=SOURCE))
    timeline.start()
    rows: list[dict] = []

    def read(topic: str):
        def until(check):
            def seen() -> bool:
                rows.extend(timeline.drain_with_muted()[0])
                return any(check(r) for r in rows if r["topic"] in (topic, ""))
            return seen
        return until

    try:
        assert timeline.fresh()
        topic = f"zk-{time.time_ns()}"
        c.create_topic(topic, 1, 3, config={"unclean.leader.election.enable": "false"})
        p = Producer({"bootstrap.servers": c.bootstrap, "acks": "all", "linger.ms": 5})
        for i in range(100):
            p.produce(topic, b"%d" % i, partition=0)
        assert p.flush(30) == 0
        first = c.partitions(topic)[0]
        wait_until(read(topic)(lambda r: r["kind"] == "first_seen"), 30, "the first sight")
        seen = next(r for r in rows if r["topic"] == topic and r["kind"] == "first_seen")
        assert (seen["leader"], sorted(seen["isr"]), seen["leader_epoch"]) == \
            (first.leader, sorted(first.isr), epoch_of(c, topic, 0))
        assert seen["source"] == SOURCE and seen["replicas"] == list(first.replicas)

        # the leader killed (and with it, if it was one, the controller)
        leader, controller = first.leader, c.active_controller()
        c.kill(leader)
        new = wait_until(lambda: next((i.leader for i in c.partitions(topic)
                                       if i.leader not in (-1, leader)), None),
                         60, "a new leader")
        wait_until(read(topic)(lambda r: r["kind"] == "leader_change" and r["leader"] == new),
                   30, "the election in ZooKeeper")
        change = next(r for r in rows if r["kind"] == "leader_change" and r["leader"] == new)
        now = c.partitions(topic)[0]
        # from the killed leader, or from no leader: a new controller (the killed leader
        # was it) writes the partition offline first, then elects (ZooKeeper's own states)
        mine = [r for r in rows if r["topic"] == topic and r["event_time"] <= change["event_time"]]
        if change["previous_leader"] == -1:
            offline = next(r for r in reversed(mine) if r["kind"] == "offline")
            # the new controller's first write (the old one was the leader; None: not
            # answered before the kill)
            assert offline["previous_leader"] == leader and controller in (leader, None), \
                offline
        else:
            assert change["previous_leader"] == leader
        assert leader not in change["isr"]
        assert sorted(change["isr"]) == sorted(now.isr)
        assert change["leader_epoch"] == epoch_of(c, topic, 0)
        assert any(r["kind"] == "isr_shrink" and leader in (r["previous_isr"] or ())
                   and leader not in r["isr"] for r in mine)
        wait_until(read(topic)(lambda r: r["kind"] == "broker_fenced"
                               and f'"broker": {leader}' in r["detail"]), 30,
                   "the killed broker's registration gone")
        if controller == leader:
            after = wait_until(c.active_controller, 30, "a new controller")
            wait_until(read(topic)(lambda r: r["kind"] == "controller_change"
                                   and f'"controller": {after}' in r["detail"]), 30,
                       "the new controller")
        # back: registered again, then in the ISR again
        c.start(leader)
        wait_until(read(topic)(lambda r: r["kind"] == "broker_unfenced"
                               and f'"broker": {leader}' in r["detail"]), 90,
                   "the restarted broker registered")
        wait_until(read(topic)(lambda r: r["kind"] == "isr_expand" and leader in r["isr"]),
                   90, "the restarted broker back in the ISR")
        times = [r["event_time"] for r in rows if r["topic"] == topic]
        assert times == sorted(times)  # the controller's order
        assert timeline.errors == 0
    finally:
        timeline.stop()


def test_check_names_a_zookeeper_cluster_and_the_advice_that_fits_it(zk_cluster, tmp_path):
    from kafka_audit.app.preflight import run_check

    c = zk_cluster
    report = run_check(Settings(home=tmp_path, cluster=c.cfg.model_dump()))
    assert report.mode == "zookeeper" and report.inter_broker_protocol.startswith("3.9")
    assert report.eligible_leader_replicas == "not supported"
    assert report.kafka_metadata_version is None and not report.blocked
    [risk] = [f for f in report.findings if f.subject == "cluster"]
    assert "ZooKeeper-mode cluster" in risk.problem and "migrate to KRaft" in risk.fix
    assert not [f for f in report.findings if f.subject == "watcher"]  # read from ZooKeeper
    assert "ZooKeeper mode, inter.broker.protocol.version 3.9" in report.text()
    off = run_check(Settings(home=tmp_path, cluster=c.cfg.model_dump(),
                             watch={"zookeeper_connect": ""}))
    [watcher] = [f for f in off.findings if f.subject == "watcher"]
    assert f"{c.cfg.host}:{c.cfg.zookeeper_port}" in watcher.fix


def test_jepsen_s_case_on_zookeeper_is_found_exactly_and_named(zk_cluster, spark, tmp_path):
    """Issue 42's ZooKeeper-era case: the ISR shrunk to the leader, the leader cut off
    from ZooKeeper and its followers but not its producers, a follower outside the ISR
    elected (unclean election on) while the old leader acknowledges alone: every loss
    found, as a full read has it, with a cause the scenario allows; ZooKeeper's own state
    names the election unclean (its leader_recovery_state)."""
    from kafka_audit.scenarios.runner import run_scenario
    from kafka_audit.store import read_table

    from ..conftest import test_settings

    c = zk_cluster
    settings = test_settings(tmp_path, cluster=c.cfg.model_dump())
    report = run_scenario("isr-shrunk-isolated", settings, c, spark, seed=1, seconds=8,
                          out_dir=tmp_path, progress=print)
    print(report.text())
    assert report.ok and report.found_lost, report.text()
    rows = [r for r in read_table(settings.table_path("cluster_events"),
                                  "cluster_events").to_pylist() if r["topic"] == report.topic]
    assert [r for r in rows if r["kind"] == "unclean_election" and r["source"] == SOURCE]
