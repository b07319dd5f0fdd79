"""The scenario catalog's short versions (seconds of traffic) on the real cluster: each
run's losses, duplicates and reorders equal a full read's, its causes are among those
the scenario allows, the windows it expects exist around its faults, and its timeline
picture is drawn. ``kafka-audit scenario run NAME --seconds 60`` runs the long versions."""

import pytest

from kafka_audit.scenarios.runner import run_scenario


# acks1-leader-kill runs in test_faults.py, test_outages.py and test_secured_cluster.py;
# isr-shrunk-unclean and retries-duplicates are the faults of test_unclean_election.py and
# test_faults.py: the suite runs the catalog's others
@pytest.mark.parametrize("name", ["min-isr-2", "leader-paused", "rolling-restart",
                                  "isolated-leader", "isolated-leader-min-isr-2",
                                  "follower-partitioned", "simultaneous-crash", "disk-loss"])
def test_scenario(name, cluster, spark, settings, tmp_path):
    report = run_scenario(name, settings, cluster, spark, seed=1, seconds=8,
                          out_dir=tmp_path, progress=print)
    print(report.text())
    assert report.ok, report.text()
    assert report.picture is not None and report.picture.stat().st_size > 10_000
    assert report.faults, "the fault schedule logged nothing"
    if name == "min-isr-2":
        assert not report.found_lost and {w[0] for w in report.windows} >= {"rejection",
                                                                             "exposure"}
    if name == "rolling-restart":
        assert not report.found_lost and not report.secondary.found_duplicates
    if name in ("simultaneous-crash", "disk-loss"):  # every loss carries the one cause
        assert report.found_lost and report.causes == {
            "simultaneous-crash": {"simultaneous crash"}, "disk-loss": {"disk loss"}}[name]
        # and names the window it fell in: the crash's, or the sole replica's exposure
        assert None not in report.lost_in and sum(report.lost_in.values()) == \
            len(report.found_lost), report.lost_in
