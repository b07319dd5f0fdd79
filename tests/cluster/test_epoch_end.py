"""Where the old leader's epoch ends, asked of the new leader (OffsetForLeaderEpoch), names
the writes a fail-over truncates before any read: on a real ``acks=1`` leader SIGKILL, the
watcher's ``epoch_end`` rows of the partition's leader changes (the kill, and the hand-back
to the preferred replica, which can truncate the interim leader's unreplicated tail) and
the suspicion rule over the ledger (the acknowledging broker of each write) name exactly
the writes a full read cannot find (the premise of suspecting a loss at the fail-over,
issue 41); the service's marker writes exactly those to ``suspicions``."""

from __future__ import annotations

import contextlib

from kafka_audit.jobs.watcher.broker_views import ask, epoch_ends
from kafka_audit.scenarios.cluster import wait_until
from kafka_audit.scenarios.groundtruth import acked_but_missing, full_read_stamps
from kafka_audit.scenarios.harness import produce_with_leader_kill
from kafka_audit.store import read_table

from ..support.leader_kill import mark_suspicions, watching


def _views(cluster, topic):
    host, port = cluster.bootstrap.split(",")[0].rsplit(":", 1)
    return ask(host, int(port), [topic], timeout=10)


def _changes(settings, cluster, topic: str, epoch: int) -> list[dict] | None:
    """Partition 0's events once the watcher recorded the change to the epoch the partition
    is led at now (asked of the cluster) and every leader change after ``epoch`` has its
    epoch_end row (each change's old epoch is the one of the change before it; the first's,
    ``epoch``), else None. Waiting for the last change the cluster made, not for any change:
    the hand-back can be recorded a moment after the kill's change is (CI, 2026-11-29)."""
    now = _views(cluster, topic)[1][(topic, 0)].leader_epoch
    events = [r for r in read_table(settings.table_path("cluster_events"),
                                    "cluster_events").to_pylist()
              if r["topic"] == topic and r["partition"] == 0]
    olds = {r["leader_epoch"] for r in events if r["kind"] == "epoch_end"}
    since = sorted(r["leader_epoch"] for r in events if r["kind"] == "leader_change"
                   and r["leader_epoch"] is not None and r["leader_epoch"] > epoch)
    return (events if since and since[-1] >= now and {epoch, *since[:-1]} <= olds
            else None)


def _runs(offsets: list[tuple[int, int]]) -> list[tuple[int, int, int]]:
    """(partition, first offset, count) of each run of consecutive offsets: a failure's
    message a reader can hold against the events."""
    runs: list[list[int]] = []
    for part, off in offsets:
        if runs and runs[-1][0] == part and runs[-1][1] + runs[-1][2] == off:
            runs[-1][2] += 1
        else:
            runs.append([part, off, 1])
    return [tuple(r) for r in runs]


def test_the_old_epochs_end_on_the_new_leader_names_the_truncated_writes(cluster, settings,
                                                                          topic):
    seen: dict[str, int] = {}

    @contextlib.contextmanager
    def around_the_fault():  # the epoch the leader about to die leads at
        _brokers, views = _views(cluster, topic)
        seen.update(epoch=views[(topic, 0)].leader_epoch, leader=views[(topic, 0)].leader)
        yield

    with watching(settings) as watcher:
        wait_until(lambda: watcher.epoch_ends.leaders.get((topic, 0)), 60,
                   "the watcher to know the partition's leader")
        p, killed = produce_with_leader_kill(settings, cluster, topic, acks="1", rate=5000,
                                             before_kill=3, after_kill=3, progress=print,
                                             during_fault=around_the_fault)

        events = wait_until(lambda: _changes(settings, cluster, topic, seen["epoch"]), 60,
                            "an epoch_end row for every leader change")
    assert seen["leader"] == killed

    def every_broker() -> dict | None:  # the leader answers, the others are not the leader
        brokers, _views_ = _views(cluster, topic)
        got = {b: epoch_ends(*addr, {(topic, 0): seen["epoch"]}, timeout=10)[(topic, 0)]
               for b, addr in brokers.items()}
        leaders = [b for b, a in got.items() if a.error == 0]
        others = {a.error for b, a in got.items() if b not in leaders}
        return got[leaders[0]] if len(leaders) == 1 and others <= {6} else None

    end = wait_until(every_broker, 30, "one leader's answer, NOT_LEADER from the others")
    assert end.leader_epoch == seen["epoch"], end
    # the watcher asked the same at the change, of the new leader
    assert [(r["previous_leader"], r["log_end"]) for r in events if r["kind"] == "epoch_end"
            and r["leader_epoch"] == seen["epoch"]] == [(killed, end.end_offset)]

    # the service's marker over the real tables: the epoch_end rows, the leaderships, the
    # ledger's runs with their acknowledging broker (the plugin names it)
    acked = [r for r in read_table(settings.table_path("acks"), "acks").to_pylist()
             if r["producer_id"] == p.producer_id and r["partition"] == 0]
    assert acked and all(r["broker"] is not None for r in acked if r["error_name"] is None)
    assert mark_suspicions(settings) > 0
    suspected = [r for r in read_table(settings.table_path("suspicions"),
                                       "suspicions").to_pylist()
                 if r["producer_id"] == p.producer_id]
    predicted = sorted((r["partition"], r["offset"] + k) for r in suspected
                       for k in range(r["count"]))
    truth = sorted((part, off) for part, off, _seq in acked_but_missing(
        p.record, p.producer_id, p.run_id, full_read_stamps(cluster.bootstrap, topic)))
    assert truth, "acks=1 with a leader SIGKILL mid-stream is expected to lose writes"
    assert predicted == truth, (_runs(predicted), _runs(truth), [
        (r["kind"], r["leader_epoch"], r["leader"], r["previous_leader"], r["log_end"], r["source"])
        for r in events])
    # the kill's own: the killed leader's writes, by broker
    assert {(r["old_leader"], r["basis"]) for r in suspected
            if r["leader_epoch"] == seen["epoch"]} == {(killed, "broker")}
    assert mark_suspicions(settings) == 0  # a restarted marker suspects nothing twice


def test_a_clean_hand_over_under_acks_all_suspects_nothing(cluster, settings, topic):
    """The leader stopped cleanly (its leadership moves to an in-sync replica), restarted,
    and handed back by a preferred-leader election, under ``acks=all``: the watcher answers
    both changes, and the marker suspects no write (none is lost)."""
    import threading
    import time

    from kafka_audit.producers.load import LoadSpec, run_load

    stop, holder = threading.Event(), {}
    spec = LoadSpec(topic=topic, rate=3000, acks="all", retries=5, producer_id="clean")
    with watching(settings) as watcher:
        wait_until(lambda: watcher.epoch_ends.leaders.get((topic, 0)), 60,
                   "the watcher to know the partition's leader")
        epoch = _views(cluster, topic)[1][(topic, 0)].leader_epoch
        t = threading.Thread(target=lambda: holder.update(
            p=run_load(settings, spec, stop=stop, keep_record=True)))
        t.start()
        try:
            time.sleep(2)  # a stream before the first change: part of the scenario
            leader = cluster.leader_of(topic, 0)
            cluster.stop(leader)
            wait_until(lambda: cluster.leader_of(topic, 0) not in (-1, leader), 60,
                       "another leader")
            cluster.start(leader)
            wait_until(lambda: leader in next(i for i in cluster.partitions(topic)
                                              if i.partition == 0).isr, 120,
                       f"node {leader} back in the ISR")
            cluster.elect_preferred(topic, 0)
            time.sleep(2)  # a stream after the hand-back
        finally:
            stop.set()
            t.join(120)
        events = wait_until(lambda: _changes(settings, cluster, topic, epoch), 60,
                            "an epoch_end row for every leader change")
    p = holder["p"]
    assert len([r for r in events if r["kind"] == "epoch_end"]) >= 2, events
    assert mark_suspicions(settings) == 0
    assert not acked_but_missing(p.record, p.producer_id, p.run_id,
                                 full_read_stamps(cluster.bootstrap, topic))
    assert p.acked > 0
