"""Components ride out outages, and say what they could not see.

* The watcher (``kafka-audit watch`` as a process of its own) while all three brokers
  are frozen (SIGSTOP) long enough for its metadata requests to time out: it stays
  alive, logs the outage once when it starts and once when it ends, records the gap in
  ``cluster_events``, and health says ``degraded`` during it and ``ok`` for the watcher
  after it.
* An ``acks=1`` leader kill while a watcher on polls alone is paused: the losses equal
  the ground truth, and the cause of those acknowledged inside the gap names it (the
  fail-over went unobserved); a later loss in the observed hand-over back does not.
"""

import signal
import time

from fastapi.testclient import TestClient

from kafka_audit.auditor_api.main import create_app
from kafka_audit.scenarios.cluster import wait_until
from kafka_audit.scenarios.harness import (
    Component,
    assert_secondaries_match,
    expand_rows,
    findings_of,
)
from kafka_audit.schemas.verdicts import CAUSE_SLACK, Cause
from kafka_audit.settings import get_settings
from kafka_audit.status import read_statuses
from kafka_audit.store import read_table

from ..support.leader_kill import audited_losses, kill_the_leader

FREEZE = 12  # seconds: longer than the watcher's 5 s metadata timeout, twice over


def health(settings) -> dict:
    app = create_app()
    app.dependency_overrides[get_settings] = lambda: settings
    return TestClient(app).get("/healthz").json()


def watcher_ok(settings) -> bool:
    s = read_statuses(settings.home_dir).get("watcher")
    return s is not None and s.failing_since is None and s.last_ok is not None


def test_the_watcher_rides_out_a_frozen_cluster(cluster, settings, topic):
    settings = settings.model_copy(update={"health": settings.health.model_copy(
        update={"watcher_stale_seconds": 3})})
    with Component(settings, "watch") as watcher:
        wait_until(lambda: watcher_ok(settings), 60, "the watcher's first poll")
        frozen_at = time.time()
        nodes = cluster.running()
        for n in nodes:
            cluster.signal(n, signal.SIGSTOP)
        try:
            during = wait_until(
                lambda: (h := health(settings))["components"]["watcher"]["state"]
                in ("failing", "stale") and h, 30, "health to see the watcher blind")
        finally:
            time.sleep(max(0.0, FREEZE - (time.time() - frozen_at)))
            for n in nodes:
                cluster.signal(n, signal.SIGCONT)
        thawed_at = time.time()
        assert during["status"] == "degraded"
        assert any(p.startswith("watcher:") for p in during["problems"])
        wait_until(lambda: watcher_ok(settings), 120, "the watcher to poll again")
        after = health(settings)["components"]["watcher"]
        assert after["state"] == "ok" and watcher.alive()
        log = watcher.output()
    assert log.count("watcher: cannot do its work") == 1, log
    assert log.count("watcher: working again") == 1, log
    # the gap: from the last poll before the freeze to the first one after it
    gaps = [r for r in read_table(settings.table_path("cluster_events"), "cluster_events")
            .to_pylist() if r["kind"] == "watcher_blind" and r["until"] is not None]
    assert gaps, "no gap recorded"
    gap = max(gaps, key=lambda r: r["until"] - r["event_time"])
    assert gap["event_time"].timestamp() <= frozen_at + 1
    assert gap["until"].timestamp() >= thawed_at - 1
    cluster.wait_ready(120)  # leaders and ISRs back for the tests that follow


def test_a_loss_inside_a_watcher_gap_names_the_gap(cluster, spark, settings, topic):
    # a watcher on polls alone (a remote cluster's): one tailing the metadata log reads
    # the fail-over from it after the pause, at its time (tests/cluster/test_watcher_gaps.py)
    settings = settings.model_copy(update={"watch": settings.watch.model_copy(
        update={"metadata_log_dirs": []})})
    with Component(settings, "watch") as watcher:
        wait_until(lambda: watcher_ok(settings), 60, "the watcher's first poll")

        class Paused:  # the watcher sees nothing from before the fault to the new leader
            def __enter__(self):
                watcher.pause()

            def __exit__(self, *exc):
                watcher.resume()

        p, _killed = kill_the_leader(settings, cluster, topic, during_fault=Paused)
        wait_until(lambda: [r for r in read_table(settings.table_path("cluster_events"),
                                                  "cluster_events").to_pylist()
                            if r["kind"] == "watcher_blind" and r["until"] is not None],
                   60, "the watcher to record its gap")
        assert watcher.alive()
    truth = audited_losses(spark, settings, cluster, topic, p)
    lost = [r for r in findings_of(settings, topic) if r["kind"] in ("lost", "lost_after_seen")]
    assert expand_rows(lost, "partition", "offset", "seq") == truth
    for cause in sorted({r["cause"] for r in lost}):
        acked = [r["ack_time"] for r in lost if r["cause"] == cause]
        print(f"{cause}: {len(acked)} rows acked {min(acked)} to {max(acked)}")
    # the writes acknowledged before the watcher looked again were lost in a fail-over it
    # did not see: their cause names the gap. The hand-over back to the preferred replica
    # after the heal can truncate acks=1 writes too; the watcher saw that one, so writes
    # acknowledged well after the gap name a plain fail-over.
    blind_until = max(r["until"] for r in read_table(
        settings.table_path("cluster_events"), "cluster_events").to_pylist()
        if r["kind"] == "watcher_blind" and r["until"] is not None)
    in_gap = [r for r in lost if r["ack_time"] < blind_until]
    assert in_gap, "no loss acknowledged inside the watcher's gap"
    assert all("watcher blind" in r["cause"] for r in in_gap), {r["cause"] for r in in_gap}
    seen = [r for r in lost if r["ack_time"] > blind_until + CAUSE_SLACK]
    assert all(r["cause"] == Cause.acks1_failover for r in seen), {r["cause"] for r in seen}
    assert_secondaries_match(settings, cluster.bootstrap, topic, p)
