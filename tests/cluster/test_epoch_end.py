"""Where the old leader's epoch ends, asked of the new leader (OffsetForLeaderEpoch), names
the writes a fail-over truncates before any read: on a real ``acks=1`` leader SIGKILL, the
writes the killed leader acknowledged at or above that offset are exactly the writes a full
read cannot find (the premise of suspecting a loss at the fail-over, issue 41)."""

from __future__ import annotations

import contextlib
from datetime import UTC, datetime

from kafka_audit.jobs.watcher.broker_views import ask, epoch_ends
from kafka_audit.scenarios.cluster import wait_until
from kafka_audit.scenarios.groundtruth import acked_but_missing, full_read_stamps
from kafka_audit.scenarios.harness import produce_with_leader_kill
from kafka_audit.store import read_table

from ..support.leader_kill import watching


def _views(cluster, topic):
    host, port = cluster.bootstrap.split(",")[0].rsplit(":", 1)
    return ask(host, int(port), [topic], timeout=10)


def test_the_old_epochs_end_on_the_new_leader_names_the_truncated_writes(cluster, settings,
                                                                          topic):
    seen: dict[str, int] = {}

    @contextlib.contextmanager
    def around_the_fault():  # the epoch the leader about to die leads at; when it ended
        _brokers, views = _views(cluster, topic)
        seen.update(epoch=views[(topic, 0)].leader_epoch, leader=views[(topic, 0)].leader)
        yield
        seen["replaced"] = datetime.now(UTC)  # a new leader; the killed one not restarted

    with watching(settings) as watcher:
        wait_until(lambda: watcher.epoch_ends.leaders.get((topic, 0)), 60,
                   "the watcher to know the partition's leader")
        p, killed = produce_with_leader_kill(settings, cluster, topic, acks="1", rate=5000,
                                             before_kill=3, after_kill=3, progress=print,
                                             during_fault=around_the_fault)

        def answered():
            return [r for r in read_table(settings.table_path("cluster_events"),
                                          "cluster_events").to_pylist()
                    if r["topic"] == topic and r["kind"] == "epoch_end"
                    and r["leader_epoch"] == seen["epoch"]]

        rows = wait_until(answered, 60, "the watcher's epoch_end row of the kill")
    assert seen["leader"] == killed
    brokers, views = _views(cluster, topic)
    leader = views[(topic, 0)].leader
    end = epoch_ends(*brokers[leader], {(topic, 0): seen["epoch"]}, timeout=10)[(topic, 0)]
    assert end.error == 0 and end.leader_epoch == seen["epoch"], end
    # the watcher asked the same at the change, of the new leader
    assert [(r["partition"], r["previous_leader"], r["log_end"]) for r in rows] == [
        (0, killed, end.end_offset)]
    # asked of a broker that does not lead it: Kafka's NOT_LEADER_OR_FOLLOWER
    other = next(b for b in brokers if b != leader)
    assert epoch_ends(*brokers[other], {(topic, 0): seen["epoch"]},
                      timeout=10)[(topic, 0)].error == 6

    # the killed leader's acknowledgements in that epoch: it acknowledged nothing after its
    # kill, and it led again (the hand-back, a later epoch) only after it was restarted
    runs = [r for r in read_table(settings.table_path("acks"), "acks").to_pylist()
            if r["producer_id"] == p.producer_id and r["offset"] is not None]
    assert runs and all(r["broker"] is not None for r in runs)  # the plugin names each
    predicted = sorted((0, r["offset"] + k) for r in runs
                       if r["partition"] == 0 and r["broker"] == killed
                       and r["last_ack_time"] < seen["replaced"] for k in range(r["count"])
                       if r["offset"] + k >= end.end_offset)
    truth = sorted((part, off) for part, off, _seq in acked_but_missing(
        p.record, p.producer_id, p.run_id, full_read_stamps(cluster.bootstrap, topic)))
    assert truth, "acks=1 with a leader SIGKILL mid-stream is expected to lose writes"
    assert predicted == truth
