"""Where the old leader's epoch ends, asked of the new leader (OffsetForLeaderEpoch), names
the writes a fail-over truncates before any read: on a real ``acks=1`` leader SIGKILL, the
watcher's ``epoch_end`` rows of the partition's leader changes (the kill, and the hand-back
to the preferred replica, which can truncate the interim leader's unreplicated tail) and
the suspicion rule over the ledger (the acknowledging broker of each write) name exactly
the writes a full read cannot find (the premise of suspecting a loss at the fail-over,
issue 41)."""

from __future__ import annotations

import contextlib
import json
from datetime import datetime

from kafka_audit.jobs.core.model import AckRun
from kafka_audit.jobs.core.suspicion import EpochEnd, Leadership, suspect
from kafka_audit.jobs.watcher.broker_views import ask, epoch_ends
from kafka_audit.scenarios.cluster import wait_until
from kafka_audit.scenarios.groundtruth import acked_but_missing, full_read_stamps
from kafka_audit.scenarios.harness import produce_with_leader_kill
from kafka_audit.schemas.events import FIRST_SEEN, LEADER_CHANGES
from kafka_audit.store import read_table

from ..support.leader_kill import watching


def _views(cluster, topic):
    host, port = cluster.bootstrap.split(",")[0].rsplit(":", 1)
    return ask(host, int(port), [topic], timeout=10)


def _changes(settings, topic: str, epoch: int) -> list[dict] | None:
    """Partition 0's events once every leader change after ``epoch`` has its epoch_end row
    (each change's old epoch is the one of the change before it; the first's, ``epoch``),
    else None."""
    events = [r for r in read_table(settings.table_path("cluster_events"),
                                    "cluster_events").to_pylist()
              if r["topic"] == topic and r["partition"] == 0]
    olds = {r["leader_epoch"] for r in events if r["kind"] == "epoch_end"}
    since = sorted(r["leader_epoch"] for r in events if r["kind"] == "leader_change"
                   and r["leader_epoch"] is not None and r["leader_epoch"] > epoch)
    return events if since and {epoch, *since[:-1]} <= olds else None


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

        events = wait_until(lambda: _changes(settings, topic, seen["epoch"]), 60,
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

    ends = [EpochEnd(topic, 0, r["previous_leader"], r["leader_epoch"], r["log_end"],
                     datetime.fromisoformat(json.loads(r["detail"])["changed_at"]))
            for r in events if r["kind"] == "epoch_end"]
    leads = [Leadership(r["event_time"], r["leader"], r["leader_epoch"]) for r in events
             if r["kind"] in LEADER_CHANGES + (FIRST_SEEN,) and r["leader"] is not None
             and r["leader"] >= 0 and r["leader_epoch"] is not None]
    runs = [AckRun(r["topic"], r["partition"], r["producer_id"], r["run_id"], r["seq"],
                   r["count"], r["offset"], r["ack_time"], r["last_ack_time"],
                   r["error_name"], r["acks"], broker=r["broker"])
            for r in read_table(settings.table_path("acks"), "acks").to_pylist()
            if r["producer_id"] == p.producer_id and r["partition"] == 0]
    assert runs and all(r.broker is not None for r in runs if r.placed)  # the plugin's
    suspected = suspect(runs, ends, leads)
    predicted = sorted((0, s.run.offset + k) for s in suspected for k in range(s.run.count))
    truth = sorted((part, off) for part, off, _seq in acked_but_missing(
        p.record, p.producer_id, p.run_id, full_read_stamps(cluster.bootstrap, topic)))
    assert truth, "acks=1 with a leader SIGKILL mid-stream is expected to lose writes"
    assert predicted == truth
    # the kill's own: the killed leader's writes, by broker
    assert {(s.change.old_leader, s.basis) for s in suspected
            if s.change.epoch == seen["epoch"]} == {(killed, "broker")}
