"""Riding out outages: one log line when failures start and one when they end, a capped
doubling wait, status files that tell the truth, loops that do not die of an error."""

import logging
import threading
import time
from datetime import UTC, datetime

import pytest

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


class _Lookups:  # nothing to ask of a cluster here
    def close_reader(self):
        pass


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

    monkeypatch.setattr(audit_job, "run_audit_pass", run_pass)
    monkeypatch.setattr(audit_job, "ClusterLookups", lambda s: _Lookups())
    reported = []
    with caplog.at_level(logging.WARNING):
        audit_job.run_audit_loop(None, settings, report=reported.append, stop=stop)
    assert len(calls) == 5 and len(reported) == 2
    messages = [r.getMessage() for r in caplog.records]
    assert len(messages) == 2 and "unreachable" in messages[0] and "3 failed" in messages[1]
    assert read_statuses(tmp_path)["audit"].detail["pass_id"] == 7


def _passes_pending(monkeypatch, pending: list[int], fail_at: int | None = None) -> list[bool]:
    """The audit loop's passes made to leave ``pending[i]`` writes pending at pass i."""
    calls = []

    def run_pass(spark, s, lookups=None, quality=False, **_):
        calls.append(quality)
        if len(calls) == fail_at:
            raise ConnectionError("the warehouse is unreachable")
        return AuditSummary(datetime(2026, 1, 1, tzinfo=UTC), len(calls), {},
                            pending[min(len(calls), len(pending)) - 1], 0, 0, 1, 0)

    monkeypatch.setattr(audit_job, "run_audit_pass", run_pass)
    monkeypatch.setattr(audit_job, "ClusterLookups", lambda s: _Lookups())
    return calls


def test_until_settled_passes_until_none_is_pending(tmp_path, monkeypatch):
    settings = Settings(home=tmp_path, audit={"interval_seconds": 0.01})
    calls = _passes_pending(monkeypatch, [40, 12, 0, 5])
    reported = []
    audit_job.run_audit_loop(None, settings, report=reported.append, until_settled=60)
    assert [s.pending for s in reported] == [40, 12, 0]
    assert calls == [True, True, True]  # checked as --once checks: great-expectations on


def test_until_settled_stops_with_an_error_at_its_deadline(tmp_path, monkeypatch):
    from kafka_audit.errors import NotSettled

    settings = Settings(home=tmp_path, audit={"interval_seconds": 0.01})
    _passes_pending(monkeypatch, [40, 12])
    reported = []
    with pytest.raises(NotSettled, match="12 writes still pending after 0.2 s"):
        audit_job.run_audit_loop(None, settings, report=reported.append, until_settled=0.2)
    assert len(reported) >= 2 and reported[-1].pending == 12


def test_until_settled_raises_a_failed_pass_as_once_does(tmp_path, monkeypatch):
    settings = Settings(home=tmp_path, audit={"interval_seconds": 0.01})
    calls = _passes_pending(monkeypatch, [40, 0], fail_at=2)
    with pytest.raises(ConnectionError):
        audit_job.run_audit_loop(None, settings, report=lambda s: None, until_settled=60)
    assert len(calls) == 2


def test_the_restart_wait_doubles_and_starts_over_after_a_healthy_spell():
    from kafka_audit.app.service import restart_wait

    waits, wait = [], 0.0
    for _ in range(6):  # a crash loop: each run a second long
        wait = restart_wait(wait, 1.0, 0.5, 10, 60)
        waits.append(wait)
    assert waits == [0.5, 1, 2, 4, 8, 10]
    assert restart_wait(10, 59.9, 0.5, 10, 60) == 10  # not long enough
    assert restart_wait(10, 60, 0.5, 10, 60) == 0.5  # it ran well: the first wait again


@pytest.mark.filterwarnings("ignore::pytest.PytestUnhandledThreadExceptionWarning")
def test_the_service_restarts_a_component_that_ran_well_after_the_first_wait(tmp_path,
                                                                              caplog):
    """A real supervisor: four quick deaths double the wait to its cap, then a run longer
    than ``healthy_seconds`` ends in a death that is waited for as the first was."""
    from kafka_audit.app.service import Component, Service

    settings = Settings(home=tmp_path, outage={"retry_seconds": 0.1, "max_backoff_seconds": 0.8,
                                               "healthy_seconds": 1.0})
    runs = []
    service = None

    def target(stop: threading.Event) -> None:
        runs.append(1)
        if len(runs) == 5:
            stop.wait(1.5)  # a healthy spell
        if len(runs) == 6:
            service.stop.set()
            return
        raise RuntimeError(f"death {len(runs)}")

    service = Service(settings, [Component("flaky", target)])
    with caplog.at_level(logging.WARNING, logger="kafka_audit.app.service"):
        assert service.run(install_signals=False) == 0
    waits = [r.getMessage().split(" in ")[1].split("s ")[0] for r in caplog.records
             if "will be restarted in" in r.getMessage()]
    assert waits == ["0.1", "0.2", "0.4", "0.8", "0.1"], waits


def test_a_pass_stops_before_its_writes_and_runs_to_its_end_after():
    from kafka_audit.jobs.audit.audit_pass import PassInterrupted, PassStop

    stop = threading.Event()
    passes = PassStop(stop)
    passes.begin()
    passes.check()  # not stopping: nothing raised
    stop.set()
    with pytest.raises(PassInterrupted):
        passes.check()
    with pytest.raises(PassInterrupted):  # the stop came first: it writes nothing
        passes.writes()
    assert passes.cancel() and passes.interrupted(RuntimeError("a cancelled Spark job"))
    assert not passes.interrupted(OSError("the warehouse is unreachable"))  # what it is

    shielding = PassStop(threading.Event())
    shielding.begin()
    with pytest.raises(PassInterrupted):  # raised after the shielded write, not in it
        with shielding.shielded():  # a dead pass's findings deleted: never cancelled
            shielding.stop.set()
            assert shielding.cancel() and not shielding.cancelled  # still cancellable after
            done = True
    assert done

    running = PassStop(threading.Event())
    running.begin()
    running.writes()
    running.stop.set()
    running.check()  # it writes: it runs to its end
    assert not running.cancel() and not running.cancelled
    assert not running.interrupted(RuntimeError("the warehouse is unreachable"))
    with pytest.raises(PassInterrupted):
        running.begin()  # the next pass begins: it stops at once


def test_the_audit_loop_ends_a_pass_at_the_stop_in_one_line(tmp_path, monkeypatch, caplog):
    """A stop during a pass's judgement ends the loop at the pass's next check, without
    the outage's warning and back-off that outlived the service's stop budget."""
    settings = Settings(home=tmp_path, outage={"retry_seconds": 60},
                        audit={"interval_seconds": 0.01})
    stop, judging, checks = threading.Event(), threading.Event(), []

    def run_pass(spark, s, lookups=None, stop=None, **_):
        stop.begin()
        judging.set()
        while True:  # a long judgement, one partition after another
            checks.append(1)
            stop.check()
            time.sleep(0.01)

    monkeypatch.setattr(audit_job, "run_audit_pass", run_pass)
    monkeypatch.setattr(audit_job, "ClusterLookups", lambda s: _Lookups())
    loop = threading.Thread(target=audit_job.run_audit_loop, args=(None, settings),
                            kwargs={"report": lambda s: None, "stop": stop})
    with caplog.at_level(logging.INFO, logger=audit_job.log.name):
        loop.start()
        assert judging.wait(10)
        stop.set()
        loop.join(10)
        assert not loop.is_alive()  # not waiting out a 60 s back-off
    messages = [r.getMessage() for r in caplog.records]
    assert messages == ["audit: stopped; a pass was interrupted before it wrote anything "
                        "(it is judged again at the next start)"]
    assert checks  # it was judging when stopped
    assert read_statuses(tmp_path).get("audit") is None or \
        read_statuses(tmp_path)["audit"].failing_since is None
