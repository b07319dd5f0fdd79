"""The ZooKeeper timeline's reading of ZooKeeper's znodes (``jobs/watcher/zookeeper.py``),
as pure logic: the watches' callbacks fed the states a ZooKeeper-era controller writes
(their JSON as Kafka 3.9 writes it), a stand-in for kazoo recording the watches set.
The real cluster: ``tests/cluster/test_zookeeper.py``."""

import json
from types import SimpleNamespace

from kafka_audit.jobs.watcher.metadata_log import MetadataFold
from kafka_audit.jobs.watcher.zookeeper import SOURCE, ZooKeeperTimeline, partition_record


class Watches:
    """kazoo's ``DataWatch`` and ``exists``, as far as the callbacks use them."""

    def __init__(self) -> None:
        self.data: dict[str, object] = {}

    def DataWatch(self, path, fn):  # noqa: N802 - kazoo's name
        self.data[path] = fn

    def exists(self, path):
        return SimpleNamespace(ctime=1_700_000_000_500)


def stat(version: int = 0, mtime: int = 1_700_000_001_000, ctime: int = 1_700_000_000_000,
         czxid: int = 7):
    return SimpleNamespace(version=version, mtime=mtime, ctime=ctime, czxid=czxid)


def state(leader: int, epoch: int, isr: list[int], **more) -> bytes:
    return json.dumps({"controller_epoch": 1, "leader": leader, "version": 1,
                       "leader_epoch": epoch, "isr": isr, **more}).encode()


def timeline() -> tuple[ZooKeeperTimeline, Watches]:
    t = ZooKeeperTimeline("zk:2181", MetadataFold(source=SOURCE))
    t._zk = Watches()
    return t, t._zk


def rows(t: ZooKeeperTimeline) -> list[tuple]:
    return [(r["topic"], r["partition"], r["kind"], r.get("leader"), r.get("leader_epoch"))
            for r in t.drain_with_muted()[0]]


def test_a_state_znode_is_the_partition_record_kraft_would_write():
    rec = partition_record("id-1", 0, state(2, 5, [2, 3], leader_recovery_state=1),
                           [1, 2, 3], 1_700_000_001_234)
    assert rec == {"type": "PARTITION_RECORD", "time": 1_700_000_001_234, "data": {
        "topicId": "id-1", "partitionId": 0, "leader": 2, "isr": [2, 3],
        "replicas": [1, 2, 3], "leaderEpoch": 5, "leaderRecoveryState": 1}}
    assert partition_record("id-1", 0, state(2, 5, [2]), [2], 0)["data"][
        "leaderRecoveryState"] == 0


def test_states_become_the_fold_s_rows_an_unclean_election_named_and_skips_counted():
    t, zk = timeline()
    t._topic_names(["orders", "__consumer_offsets"])
    assert set(zk.data) >= {"/brokers/topics/orders", "/config/topics/orders"}
    zk.data["/brokers/topics/orders"](json.dumps(
        {"version": 3, "topic_id": "tid", "partitions": {"0": [1, 2, 3]}}).encode(), stat())
    watch = zk.data["/brokers/topics/orders/partitions/0/state"]
    watch(None, None)  # not written yet
    watch(state(1, 0, [1, 2, 3]), stat(0))
    watch(state(1, 0, [1]), stat(1))  # the leader shrank the ISR to itself (same epoch)
    watch(state(1, 0, [1]), stat(1))  # the same version again: a watch set anew
    assert rows(t) == [("orders", 0, "first_seen", 1, 0), ("orders", 0, "isr_shrink", 1, 0),
                       ("orders", 0, "isr_alone_enter", 1, 0)]
    # the controller removes a dead follower from an ISR with the leader epoch bumped
    watch(state(1, 1, [1]), stat(2))
    assert rows(t) == [("orders", 0, "leader_reelected", 1, 1)]
    # the leader lost, a replica outside the ISR elected (unclean election on), two writes
    # seen as one: the offline state between them was never read
    watch(state(2, 3, [2], leader_recovery_state=1), stat(4, mtime=1_700_000_002_000))
    got = t.drain_with_muted()[0]
    kinds = {(r["kind"], r["leader"], r["previous_leader"], r["leader_epoch"]) for r in got}
    assert {("leader_change", 2, 1, 3), ("unclean_election", 2, 1, 3)} <= kinds
    assert {r["source"] for r in got} == {SOURCE}
    assert t.skipped == 1


def test_brokers_controller_and_settings():
    t, zk = timeline()
    t._broker_ids(["1", "2", "3"])  # the registrations there at the start: no rows
    t._controller(json.dumps({"version": 2, "brokerid": 2, "timestamp": "1"}).encode(), stat())
    t._broker_ids(["1", "3"])  # 2's session ended
    t._controller(json.dumps({"version": 2, "brokerid": 3}).encode(),
                  stat(ctime=1_700_000_003_000))
    t._broker_ids(["1", "2", "3"])  # 2 back
    kinds = [(r["kind"], json.loads(r["detail"])) for r in t.drain_with_muted()[0]]
    assert kinds == [
        ("controller_change", {"controller": 2, "previous": None}),
        ("broker_fenced", {"broker": 2}),
        ("controller_change", {"controller": 3, "previous": 2}),
        ("broker_unfenced", {"broker": 2, "registered": True})]
    # a topic's settings: those it had are read quietly, a change is a row
    t._topic_names(["orders"])
    zk.data["/brokers/topics/orders"](json.dumps(
        {"version": 3, "topic_id": "tid", "partitions": {"0": [1, 2, 3]}}).encode(), stat())
    config = zk.data["/config/topics/orders"]
    config(json.dumps({"version": 1, "config": {"min.insync.replicas": "2"}}).encode(), stat())
    config(json.dumps({"version": 1, "config": {"min.insync.replicas": "1"}}).encode(),
           stat(1, mtime=1_700_000_004_000))
    changes = [json.loads(r["detail"]) for r in t.drain_with_muted()[0]
               if r["kind"] == "topic_config_change"]
    assert changes == [{"name": "min.insync.replicas", "value": "1", "previous": "2"}]
    assert t.fold.topic_min_isr == {"orders": 1}


def test_an_unreadable_znode_is_counted_and_skipped():
    t, zk = timeline()
    t._topic_names(["orders"])
    zk.data["/brokers/topics/orders"](b"{not json", stat())
    t._controller(b"[]", stat())
    assert t.errors == 2 and t.drain_with_muted()[0] == []


def test_a_zookeeper_not_reachable_at_the_start_is_tried_again_not_fatal():
    import socket
    import time

    with socket.socket() as s:  # a port nothing listens on
        s.bind(("127.0.0.1", 0))
        port = s.getsockname()[1]
    t = ZooKeeperTimeline(f"127.0.0.1:{port}", MetadataFold(source=SOURCE), timeout=1)
    started = time.monotonic()
    t.start()  # returns: the polls give the events meanwhile
    try:
        assert time.monotonic() - started < 30 and not t.fresh()
        assert t._stopping.is_set() is False  # the retry thread waits on it
    finally:
        t.stop()
    assert t._stopping.is_set()


def test_a_topic_made_again_between_two_reads_is_a_new_one_its_states_read_anew():
    t, zk = timeline()
    t._topic_names(["orders"])
    topic = zk.data["/brokers/topics/orders"]
    topic(json.dumps({"topic_id": "old", "partitions": {"0": [1, 2, 3]}}).encode(), stat())
    old_watch = zk.data["/brokers/topics/orders/partitions/0/state"]
    old_watch(state(1, 0, [1, 2, 3]), stat(0, czxid=7))
    old_watch(state(1, 0, [1]), stat(1, czxid=7))
    t.drain_with_muted()
    # deleted and made again (another id) before the topic's watch read the deletion
    topic(json.dumps({"topic_id": "new", "partitions": {"0": [2, 3, 1]}}).encode(), stat())
    new_watch = zk.data["/brokers/topics/orders/partitions/0/state"]
    assert new_watch is not old_watch
    assert old_watch(state(1, 0, [1]), stat(1, czxid=7)) is False  # the old one ends
    new_watch(state(2, 0, [2, 3, 1]), stat(0, czxid=99))  # version 0 again: not "seen"
    got = t.drain_with_muted()[0]
    assert [(r["kind"], r["leader"]) for r in got if r["partition"] == 0] == \
        [("first_seen", 2)]
    assert t.skipped == 0
