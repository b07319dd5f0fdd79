"""The KRaft metadata log as the watcher's source, on the real cluster: a leader SIGKILLed
and restarted shows in ``cluster_events`` at the controller's times (between the kill
and the moment a client saw the new leader), with the leader epochs Kafka counts, the
broker's fencing and its registration on restart."""

import json
import uuid
from datetime import UTC, datetime

from confluent_kafka import KafkaError, KafkaException, TopicPartition
from confluent_kafka.admin import OffsetSpec

from kafka_audit.errors import ClusterError
from kafka_audit.jobs.watcher.metadata_log import SOURCE
from kafka_audit.jobs.watcher.watcher import ClusterWatcher
from kafka_audit.scenarios.cluster import wait_until
from kafka_audit.store import read_table


def test_a_leader_kill_at_the_controllers_times(cluster, settings):
    topic = f"meta-{uuid.uuid4().hex[:8]}"
    cluster.create_topic(topic, partitions=1, replication=3)
    watcher = ClusterWatcher(settings)
    thread, stop = watcher.start_thread()
    try:
        wait_until(lambda: watcher.exact, 60, "the metadata log tailed and current")
        assert watcher.metadata is not None
        leader = cluster.leader_of(topic, 0)
        controller = cluster.active_controller()
        killed_at = datetime.now(UTC)
        cluster.kill(leader)
        wait_until(lambda: cluster.leader_of(topic, 0) not in (-1, leader), 60, "a new leader")
        seen_at = datetime.now(UTC)  # a client sees the new leader; the old one restarts
        cluster.start(leader)
        wait_until(lambda: len(cluster.partitions(topic)[0].isr) == 3, 120, "the ISR full")
        admin = [cluster.admin()]

        def latest():  # retriable: a broker behind on metadata answers UNKNOWN_LEADER_EPOCH
            answer = admin[0].list_offsets({TopicPartition(topic, 0): OffsetSpec.latest()},
                                           request_timeout=5)
            try:
                return next(iter(answer.values())).result(10)
            except KafkaException as exc:
                # the preferred leader's return (leader.imbalance.check.interval.seconds)
                # leaves this client's cached epoch behind: the broker answers
                # FENCED_LEADER_EPOCH until a client asks with fresh metadata
                if exc.args[0].code() == KafkaError.FENCED_LEADER_EPOCH:
                    admin[0] = cluster.admin()
                raise

        seen: dict[str, object] = {}

        def caught_up() -> tuple[list[dict], int] | None:
            # Kafka's epoch now: the controller's periodic preferred-leader election
            # (auto.leader.rebalance.enable; every 5 s in conf/defaults.yaml) may move the
            # leader back meanwhile
            epoch = latest().leader_epoch
            rows = sorted((r for r in read_table(settings.table_path("cluster_events"),
                                                 "cluster_events").to_pylist()
                           if r["topic"] == topic and r["source"] == SOURCE),
                          key=lambda r: r["event_time"])
            seen.update(epoch=epoch, exact=watcher.exact, rows=[
                (r["event_time"].isoformat(), r["kind"], r["leader"], r["isr"],
                 r["leader_epoch"]) for r in rows])
            done = rows and max(r["leader_epoch"] or -1 for r in rows) == epoch \
                and any(r["kind"] == "isr_expand" and len(r["isr"]) == 3
                        and r["event_time"] > seen_at for r in rows)
            return (rows, epoch) if done else None

        try:
            rows, epoch = wait_until(caught_up, 30, "the metadata log's rows at Kafka's epoch")
        except ClusterError as exc:  # what the log gave, and whether it was current
            raise AssertionError(f"{exc}; killed {leader} (controller {controller}) at "
                                 f"{killed_at.isoformat()}, the new leader seen at "
                                 f"{seen_at.isoformat()}; {seen}") from None
    finally:
        stop.set()
        thread.join(15)
    assert not watcher.metadata.alive(), "the tail outlives its watcher"
    assert watcher.metadata.errors == 0

    moved = [r for r in rows if r["kind"] in ("leader_change", "offline")
             and r["previous_leader"] == leader]
    assert moved, rows
    # exact: the controller moved the leadership after the kill and before a client saw it
    assert killed_at <= moved[0]["event_time"] <= seen_at, (killed_at, moved[0], seen_at)
    # the epochs count as Kafka counts them: each change naming a leader, one more
    epochs = [r["leader_epoch"] for r in rows if r["leader_epoch"] is not None]
    assert epochs == sorted(epochs) and epochs[-1] == epoch
    # no partition change was written twice (polled as well) while the log was current
    polled = [r for r in read_table(settings.table_path("cluster_events"),
                                    "cluster_events").to_pylist()
              if r["topic"] == topic and r["source"] != SOURCE
              and r["kind"] in ("leader_change", "offline", "isr_shrink", "isr_expand")]
    assert not polled, polled
    brokers = [(r["kind"], json.loads(r["detail"])) for r in sorted(read_table(
        settings.table_path("cluster_events"), "cluster_events").to_pylist(),
        key=lambda r: r["event_time"])
        if r["source"] == SOURCE and r["kind"].startswith("broker_")
        and r["event_time"] >= killed_at]
    # fenced when its session expired or when it registered again, then unfenced
    assert ("broker_fenced", {"broker": leader, "registered": True}) in brokers
    assert brokers[-1] == ("broker_unfenced", {"broker": leader})
