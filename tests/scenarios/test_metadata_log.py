"""The KRaft metadata log as the watcher's source, on the real cluster: a leader SIGKILLed
and restarted shows in ``cluster_events`` at the controller's times (between the kill
and the moment a client saw the new leader), with the leader epochs Kafka counts, the
broker's fencing and its registration on restart; after two kills of the active
controller in a row, every committed partition change is there, as Kafka's own decoder
reads the nodes' logs."""

import json
import subprocess
import uuid
from datetime import UTC, datetime

from confluent_kafka import KafkaError, KafkaException, TopicPartition
from confluent_kafka.admin import OffsetSpec

from kafka_audit.errors import ClusterError
from kafka_audit.jobs.watcher.metadata_log import SOURCE
from kafka_audit.jobs.watcher.watcher import ClusterWatcher
from kafka_audit.scenarios.cluster import wait_until
from kafka_audit.schemas.events import (
    FIRST_SEEN,
    ISR_EXPAND,
    ISR_SHRINK,
    LEADER_CHANGE,
    LEADER_REELECTED,
    OFFLINE,
)
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


def committed_partition_records(cluster, topic: str) -> dict[int, list[dict]]:
    """The partition records of ``topic`` a majority of the nodes' metadata logs hold (the
    committed ones: a controller killed while appending leaves records only its own file
    holds), in the log's order, as Kafka's own ``DumpLogSegments`` decodes them: a reading
    of the files apart from the watcher's tail."""
    from collections import Counter

    from kafka_audit.jars import broker_classpath

    held: Counter = Counter()
    for node in cluster.nodes:
        folder = cluster.meta_dir(node) / "__cluster_metadata-0"
        files = sorted(str(p) for p in folder.glob("*.log"))
        out = subprocess.run(
            ["java", "-Xmx128m", "-cp", broker_classpath(cluster.cfg.kafka_version),
             "kafka.tools.DumpLogSegments",
             "--cluster-metadata-decoder", "--files", ",".join(files)],
            capture_output=True, text=True, timeout=120, check=True).stdout
        for line in out.splitlines():
            offset, sep, payload = line.partition(" payload: ")
            if line.startswith("| offset: ") and sep:
                held[(int(offset.split()[2]), payload)] += 1
    records = [json.loads(p) for (_o, p), n in sorted(held.items()) if n * 2 > len(cluster.nodes)]
    tid = next(r["data"]["topicId"] for r in records
               if r["type"] == "TOPIC_RECORD" and r["data"]["name"] == topic)
    per: dict[int, list[dict]] = {}
    for r in records:
        if r["type"] in ("PARTITION_RECORD", "PARTITION_CHANGE_RECORD") \
                and r["data"]["topicId"] == tid:
            per.setdefault(r["data"]["partitionId"], []).append(r)
    return per


def states_of_records(records: list[dict]) -> list[tuple]:
    """(leader, leader epoch, ISR) after each record, a repeat dropped (a change of
    directories alone); the epoch one more for each change naming a leader (-2: none),
    None without a leader."""
    states: list[tuple] = []
    leader, epoch, isr = -1, 0, ()
    for r in records:
        d = r["data"]
        if r["type"] == "PARTITION_RECORD":
            leader, epoch, isr = d["leader"], d["leaderEpoch"], tuple(sorted(d["isr"]))
        else:
            if d.get("leader", -2) != -2:
                leader, epoch = d["leader"], epoch + 1
            if d.get("isr") is not None:
                isr = tuple(sorted(d["isr"]))
        state = (leader, epoch if leader >= 0 else None, isr)
        if not states or states[-1] != state:
            states.append(state)
    return states


#: the kinds of row the watcher writes for a change of a partition's leader or ISR
STATE_KINDS = (FIRST_SEEN, LEADER_CHANGE, OFFLINE, LEADER_REELECTED, ISR_SHRINK, ISR_EXPAND)


def states_of_rows(rows: list[dict]) -> list[tuple]:
    """The same from ``cluster_events`` rows of one partition (every source), in time. A
    row that names a leader without its epoch, repeating the last state's leader and ISR,
    is no change: a poll one client's metadata answered (no broker answered its own
    request in time: no epochs) sighting the partition after the log's row of it."""
    states: list[tuple] = []
    for r in sorted(rows, key=lambda r: r["event_time"]):
        if r["kind"] not in STATE_KINDS:
            continue  # not a partition's state (a log end, an epoch's end, a split brain)
        state = (r["leader"], r["leader_epoch"] if r["leader"] >= 0 else None,
                 tuple(sorted(r["isr"])))
        if (states and state[0] >= 0 and state[1] is None
                and (state[0], state[2]) == (states[-1][0], states[-1][2])):
            continue
        if not states or states[-1] != state:
            states.append(state)
    return states


def test_two_quick_kills_leave_no_committed_change_unrecorded(cluster, settings):
    """The watcher's record is complete (issue 41: in one run of two quick leader kills it
    recorded none of one partition's four ISR changes, for it read a killed controller's
    uncommitted records): the active controller SIGKILLed and restarted twice in a row, the
    second time as soon as the first was back in every ISR, and every committed partition
    change of the topic, as Kafka's own decoder reads a majority of the nodes' logs, is in
    ``cluster_events`` with its leader, epoch and ISR, in the log's order."""
    topic = f"meta-{uuid.uuid4().hex[:8]}"
    cluster.create_topic(topic, partitions=3, replication=3)
    watcher = ClusterWatcher(settings)
    thread, stop = watcher.start_thread()
    killed = []
    try:
        wait_until(lambda: watcher.exact, 60, "the metadata log tailed and current")
        for _ in range(2):
            victim = cluster.active_controller()
            assert victim is not None
            cluster.kill(victim)  # the controller and a leader of the topic at once
            killed.append(victim)
            wait_until(lambda: all(p.leader not in (-1, victim)  # noqa: B023
                                   for p in cluster.partitions(topic)), 60, "new leaders")
            cluster.start(victim)
            wait_until(lambda: all(victim in p.isr  # noqa: B023
                                   for p in cluster.partitions(topic)), 120,
                       f"node {victim} back in every ISR")
        seen: dict[str, object] = {}

        def recorded() -> bool:
            expected = {p: states_of_records(rs)
                        for p, rs in committed_partition_records(cluster, topic).items()}
            rows = [r for r in read_table(settings.table_path("cluster_events"),
                                          "cluster_events").to_pylist() if r["topic"] == topic]
            got = {p: states_of_rows([r for r in rows if r["partition"] == p])
                   for p in expected}
            seen.update(expected=expected, got=got)
            return got == expected

        try:
            wait_until(recorded, 120, "every committed change in cluster_events", every=5)
        except ClusterError as exc:
            raise AssertionError(f"{exc}; killed {killed}; {seen}") from None
    finally:
        stop.set()
        thread.join(15)
    expected = seen["expected"]
    # the faults made changes to record: each kill shrank and grew ISRs, moved leaders
    assert sum(len(s) for s in expected.values()) >= 3 + 2 * 2, expected
    assert watcher.metadata.errors == 0
