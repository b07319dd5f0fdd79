"""Riding out outages: one log line when failures start and one when they end, a capped
doubling wait, status files that tell the truth, loops that do not die of an error."""

import logging
import threading
from datetime import UTC, datetime

from kafka_audit.jobs.audit import audit_job
from kafka_audit.jobs.audit.audit_pass import AuditSummary
from kafka_audit.settings import Settings
from kafka_audit.status import Outage, StatusWriter, read_statuses


def test_an_outage_is_logged_once_each_way_with_a_capped_backoff(tmp_path, caplog):
    now = [100.0]
    writer = StatusWriter(tmp_path, "watcher")
    outage = Outage("watcher", writer, logging.getLogger("t"), 0.5, 4, clock=lambda: now[0])
    with caplog.at_level(logging.WARNING):
        waits = [outage.failed(TimeoutError(f"try {i}")) for i in range(6)]
        assert waits == [0.5, 1, 2, 4, 4, 4]
        s = read_statuses(tmp_path)["watcher"]
        assert s.failing_since is not None and s.error == "TimeoutError: try 5"
        now[0] += 12.5
        assert outage.succeeded(partitions=3) == 12.5
        assert outage.succeeded() == 0.0  # no outage: nothing to say
    lines = [r.getMessage() for r in caplog.records]
    assert len(lines) == 2 and "cannot do its work" in lines[0] and "try 0" in lines[0]
    assert "working again after 12.5s (6 failed tries)" in lines[1]
    s = read_statuses(tmp_path)["watcher"]
    assert s.failing_since is None and s.error is None and s.last_ok is not None
    assert outage.outages == 1 and outage.failed(OSError("again")) == 0.5  # backoff reset


def test_the_audit_loop_survives_failed_passes(tmp_path, monkeypatch, caplog):
    settings = Settings(home=tmp_path, outage={"retry_seconds": 0.01,
                                               "max_backoff_seconds": 0.02},
                        audit={"interval_seconds": 0.01})
    stop = threading.Event()
    calls = []

    def run_pass(spark, s, lookups=None, **_):
        calls.append(1)
        if len(calls) <= 3:
            raise ConnectionError("the warehouse is unreachable")
        if len(calls) == 5:
            stop.set()
        return AuditSummary(datetime(2026, 1, 1, tzinfo=UTC), 7, {}, 0, 0, 0, 0, 0)

    class Lookups:  # nothing to ask of a cluster here
        def close_reader(self):
            pass

    monkeypatch.setattr(audit_job, "run_audit_pass", run_pass)
    monkeypatch.setattr(audit_job, "ClusterLookups", lambda s: Lookups())
    reported = []
    with caplog.at_level(logging.WARNING):
        audit_job.run_audit_loop(None, settings, report=reported.append, stop=stop)
    assert len(calls) == 5 and len(reported) == 2
    messages = [r.getMessage() for r in caplog.records]
    assert len(messages) == 2 and "unreachable" in messages[0] and "3 failed" in messages[1]
    assert read_statuses(tmp_path)["audit"].detail["pass_id"] == 7
