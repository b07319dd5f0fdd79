"""The fault tests' common start: an ``acks=1`` leader SIGKILL mid-stream, audited until
settled, and its ground truth (the acknowledged writes a full read cannot find).

At 5,000 writes/s (the demo's quarter), 3 s before and after the kill: the same loss as
the demo's, less to read on a busy machine. Three scenario tests start so
(``test_faults``, ``test_dashboard``, ``test_outages``); each then checks its own part.
"""

from __future__ import annotations

import contextlib
from collections.abc import Iterator

from kafka_audit.jobs.watcher.watcher import ClusterWatcher
from kafka_audit.scenarios.groundtruth import acked_but_missing, full_read_stamps
from kafka_audit.scenarios.harness import audit_until_settled, produce_with_leader_kill

__all__ = ["watching", "kill_the_leader", "audited_losses", "mark_suspicions"]


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
