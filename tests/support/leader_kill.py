"""The fault tests' common start: an ``acks=1`` leader SIGKILL mid-stream, audited until
settled, and its ground truth (the acknowledged writes a full read cannot find).

At 5,000 writes/s (the demo's quarter), 3 s before and after the kill: the same loss as
the demo's, less to read on a busy machine. Three scenario tests start so
(``test_faults``, ``test_dashboard``, ``test_outages``); each then checks its own part,
the first two the findings with :func:`assert_the_leader_kill_findings`.
"""

from __future__ import annotations

import contextlib
import json
from collections.abc import Iterator

from kafka_audit.jobs.watcher.watcher import ClusterWatcher
from kafka_audit.scenarios.groundtruth import acked_but_missing, full_read_stamps
from kafka_audit.scenarios.harness import (
    assert_secondaries_match,
    audit_until_settled,
    findings_of,
    produce_with_leader_kill,
)
from kafka_audit.scenarios.harness import expand_rows as expand
from kafka_audit.schemas.verdicts import Cause, cause_name
from kafka_audit.store import read_table

__all__ = ["watching", "kill_the_leader", "audited_losses", "assert_the_leader_kill_findings",
           "mark_suspicions"]


@contextlib.contextmanager
def watching(settings) -> Iterator[ClusterWatcher]:
    """The watcher in a thread of this process while the block runs."""
    watcher = ClusterWatcher(settings)
    thread, stop = watcher.start_thread()
    try:
        yield watcher
    finally:
        stop.set()
        thread.join(10)


def kill_the_leader(settings, cluster, topic: str, **fault):
    """Produce ``acks=1`` to ``topic`` and SIGKILL partition 0's leader mid-stream
    (``fault``: more of :func:`produce_with_leader_kill`'s arguments); (producer, killed
    node)."""
    return produce_with_leader_kill(settings, cluster, topic, acks="1", rate=5000,
                                    before_kill=3, after_kill=3, progress=print, **fault)


def audited_losses(spark, settings, cluster, topic: str, p, read_timeout: float = 60
                   ) -> list[tuple[int, int, int]]:
    """Audit ``topic`` until settled; the ground truth of ``p``'s writes, computed apart
    from the auditor: (partition, offset, seq) of each acknowledged write a full read
    cannot find, which must not be empty."""
    audit_until_settled(spark, settings, topic, progress=print)
    truth = acked_but_missing(p.record, p.producer_id, p.run_id,
                              full_read_stamps(cluster.bootstrap, topic, timeout=read_timeout))
    assert truth, "acks=1 with a leader SIGKILL mid-stream is expected to lose writes"
    return truth


def assert_the_leader_kill_findings(settings, cluster, topic: str, p, truth, killed: int):
    """The findings table after :func:`kill_the_leader`: its losses are ``truth`` write for
    write, all of ``p``'s run, named by their cause, overwritten ones among them, each
    re-read before it was judged; the kill's leader change recorded; the reorders and
    duplicates found equal a full read's."""
    lost = [r for r in findings_of(settings, topic) if r["kind"] in ("lost", "lost_after_seen")]
    assert expand(lost, "partition", "offset", "seq") == truth
    assert {r["run_id"] for r in lost} == {p.run_id}
    # the cause by name: the watcher may go blind a few seconds while its broker dies,
    # which the cause then says beside it
    assert {cause_name(r["cause"]) for r in lost} == {Cause.acks1_failover}
    # truncation: the lost offsets hold other records now; each loss was re-read first
    assert "overwritten" in {r["subkind"] for r in lost}
    for r in lost:
        seen = json.loads(r["evidence"])["seen"]
        assert any(view[1] == "reread" for view in seen), r
    events = read_table(settings.table_path("cluster_events"), "cluster_events").to_pylist()
    changes = [e for e in events if e["topic"] == topic and e["kind"] == "leader_change"]
    assert any(e["previous_leader"] == killed for e in changes)
    # after the fail-over, the old leader's acks for truncated offsets witness nothing: the
    # reorders and duplicates found equal the full read's (the demo once showed 3,321 false)
    assert_secondaries_match(settings, cluster.bootstrap, topic, p)


def mark_suspicions(settings) -> int:
    """One round of the service's suspicion marker after the fault, following every change
    the watcher answered (the service runs it every half second, each change a minute):
    the writes newly suspected.

    The round comes once the rule may take every acknowledged run: a run acknowledged after
    the last change (the old leader appends until it learns of it, so a hand-back's
    truncated tail can be) is taken :data:`RIPE_AFTER` after it (``Marker._ripe``); a
    round before that leaves it to the
    service's next rounds (a CI run of 2026-11-29 marked 3 s after a hand-back and missed
    its 54 writes)."""
    from datetime import UTC, datetime

    import pyarrow.compute as pc

    from kafka_audit.jobs.audit.suspicions import RIPE_AFTER, Marker
    from kafka_audit.scenarios.cluster import wait_until
    from kafka_audit.store import read_table

    last = pc.max(read_table(settings.table_path("acks"), "acks", ["last_ack_time"])
                  ["last_ack_time"]).as_py()
    if last is not None:
        ripe = last.astimezone(UTC) + RIPE_AFTER
        wait_until(lambda: datetime.now(UTC) >= ripe, 60,
                   "every acknowledged run to be ripe for the marker", every=0.1)
    return Marker(settings.model_copy(update={"audit": settings.audit.model_copy(
        update={"suspect_follow_seconds": 3600})})).round()
