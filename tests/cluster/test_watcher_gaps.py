"""A poll that comes late (a broker frozen holds up its lookups, a loaded machine) is a
``watcher_blind`` gap only where something could have gone unseen in it: a watcher on
polls alone writes one; one tailing the KRaft metadata log does not, since the tail (a
process of its own) hands over every record of the time between, at the controller's
time. A gap there had called a deposed leader's truncated writes a plain fail-over
(``rules.deposed_at`` gives up where the watcher was blind): CI, 2026-12-02."""

import time

from kafka_audit.jobs.watcher.watcher import ClusterWatcher
from kafka_audit.scenarios.cluster import wait_until
from kafka_audit.schemas.events import BLIND

from ..conftest import test_settings

BLIND_AFTER = 1.0  # seconds between two good polls that make a gap


def a_late_poll(settings) -> list[dict]:
    """Two polls on time, then one ``BLIND_AFTER`` and a half late: the third's rows."""
    watcher = ClusterWatcher(settings)
    watcher._start_metadata()
    try:
        if watcher.metadata is not None:
            wait_until(watcher.metadata.fresh, 60, "the metadata log's tail to be current")
        watcher.poll_once()
        watcher.poll_once()
        time.sleep(BLIND_AFTER * 1.5)  # the fault: the watcher's next poll comes this late
        return watcher.poll_once()
    finally:
        watcher.stop()


def test_a_late_poll_is_a_gap_only_without_the_metadata_log(cluster, tmp_path, topic):
    base = test_settings(tmp_path / "tail")
    tailed = base.model_copy(update={"watch": base.watch.model_copy(
        update={"blind_after_seconds": BLIND_AFTER})})
    polled = tailed.model_copy(update={
        "home": tmp_path / "polls",
        "watch": tailed.watch.model_copy(update={"metadata_log_dirs": []})})
    assert tailed.watch.metadata_log_dirs, "the test settings tail the cluster's log"

    rows = a_late_poll(polled)
    gaps = [r for r in rows if r["kind"] == BLIND]
    assert len(gaps) == 1 and (gaps[0]["until"] - gaps[0]["event_time"]).total_seconds() \
        > BLIND_AFTER, rows

    rows = a_late_poll(tailed)
    assert not [r for r in rows if r["kind"] == BLIND], rows
