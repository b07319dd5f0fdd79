"""A stop cancels the Spark jobs of the audit pass that runs then, and only those.

The audit loop tags its thread's jobs (:class:`PassStop`); at the service's stop the pass's
running jobs are cancelled, so a long judgement ends in seconds instead of outliving the
service's stop budget (bench/catchup.py, 2026-12-03: a 95 s pass, the service exiting with 1).
"""

import threading
import time

from kafka_audit.jobs.audit.audit_job import _cancel_at_stop
from kafka_audit.jobs.audit.audit_pass import PassStop
from kafka_audit.scenarios.cluster import wait_until


def _slow(rows):
    for r in rows:
        time.sleep(0.05)
        yield r


def _active_jobs(spark) -> int:
    return len(spark.sparkContext.statusTracker().getActiveJobsIds())


def test_a_stop_cancels_the_pass_jobs_and_spares_the_rest(spark):
    stop, ended = threading.Event(), threading.Event()
    passes = PassStop(stop, spark)
    outcome: dict = {}

    def job(name: str, tagged: bool, n: int) -> None:
        if tagged:
            passes.tag()
        try:
            outcome[name] = len(spark.sparkContext.parallelize(range(n), 2)
                                .mapPartitions(_slow).collect())
        except Exception as exc:  # noqa: BLE001 - what the pass would raise
            outcome[name] = exc

    pass_job = threading.Thread(target=job, args=("pass", True, 2000))  # 50 s uncancelled
    other = threading.Thread(target=job, args=("other", False, 60))  # a consume batch's
    canceller = threading.Thread(target=_cancel_at_stop, args=(passes, ended))
    passes.begin()
    pass_job.start()
    wait_until(lambda: _active_jobs(spark) == 1, 60, "the pass's job to run")
    other.start()
    wait_until(lambda: _active_jobs(spark) == 2, 60, "the other job to run beside it")
    canceller.start()
    t = time.monotonic()
    stop.set()
    pass_job.join(30)
    took = time.monotonic() - t
    ended.set()
    other.join(60)
    canceller.join(5)
    assert not pass_job.is_alive() and took < 20
    assert isinstance(outcome["pass"], Exception) and passes.cancelled
    assert passes.interrupted(outcome["pass"])  # a cancellation, not any error
    assert outcome["other"] == 60  # untagged: untouched, though it ran during the cancels
    assert not canceller.is_alive()


def test_a_pass_stopped_in_its_judgement_writes_nothing_and_is_judged_again(
        spark, tmp_path, monkeypatch):
    """A real pass (Spark's backend) on real tables, stopped while its judgement's job
    runs: the job is cancelled, the pass raises what the loop takes for the stop, writes
    no finding and no state, and the next pass is pass 1 again, judging the same rows as
    the reference does."""
    from kafka_audit.jobs.audit import audit_pass
    from kafka_audit.jobs.audit.hot_state import consumed_row
    from kafka_audit.jobs.core.engine import AuditConfig
    from kafka_audit.jobs.core.model import AckRun, ClusterEvent, ReadRun
    from kafka_audit.jobs.core.reference import finding_messages, reference_verdicts
    from kafka_audit.settings import Settings
    from kafka_audit.store import append_rows, committed_progress, read_table, table_exists

    from ..support.histories import at
    from ..support.random_histories import log_end_fn, seeded_history
    from .test_spark_engine import AUDIT, Recorded, ack_row, event_row, findings_as_model

    settings = Settings(home=tmp_path, audit=AUDIT, spark={"driver_rows": 0})
    hist, _ = seeded_history(7, topics=("t",))
    rows = [row for _, row in hist]
    append_rows(settings.table_path("acks"), "acks",
                [ack_row(r) for r in rows if isinstance(r, AckRun)])
    append_rows(settings.table_path("consumed"), "consumed",
                [consumed_row(r, 0) for r in rows if isinstance(r, ReadRun)])
    append_rows(settings.table_path("cluster_events"), "cluster_events",
                [event_row(r) for r in rows if isinstance(r, ClusterEvent)])
    now = at(440)
    stop, ended = threading.Event(), threading.Event()
    passes = PassStop(stop, spark)
    real_step_fn = audit_pass.step_fn

    judging = tmp_path / "judging"  # made by the judgement's Python worker as it begins

    def slow_step_fn(*args):  # a judgement longer than a catch-up's: 120 s a partition
        step = real_step_fn(*args)

        def slow(key, pdf):
            judging.touch()
            time.sleep(120)
            return step(key, pdf)

        return slow

    def stop_while_judging() -> None:
        wait_until(lambda: judging.exists() or ended.is_set(), 120,
                   "the judgement's job to run")
        stop.set()
        _cancel_at_stop(passes, ended)

    monkeypatch.setattr(audit_pass, "step_fn", slow_step_fn)
    lookups = Recorded(frozenset(), frozenset(), log_end_fn(hist))
    lookups.now = now
    outcome: dict = {}

    def judged() -> None:
        passes.tag()  # the loop's thread carries the tag
        try:
            outcome["summary"] = audit_pass.run_audit_pass(spark, settings, now, lookups,
                                                           stop=passes)
        except Exception as exc:  # noqa: BLE001 - what the loop would see
            outcome["error"] = exc
        ended.set()

    worker = threading.Thread(target=judged)
    stopper = threading.Thread(target=stop_while_judging)
    t = time.monotonic()
    worker.start()
    stopper.start()
    worker.join(240)
    stopper.join(10)
    assert "error" in outcome and passes.cancelled, outcome
    assert passes.interrupted(outcome["error"])
    assert time.monotonic() - t < 90  # not a partition's 120 s, and more
    assert committed_progress(settings).pass_id == 0
    for table in ("findings", "audit_hot"):
        path = settings.table_path(table)
        assert not table_exists(path) or read_table(path, table).num_rows == 0

    monkeypatch.setattr(audit_pass, "step_fn", real_step_fn)
    summary = audit_pass.run_audit_pass(spark, settings, now, lookups)
    assert summary.pass_id == 1
    found = findings_as_model(read_table(settings.table_path("findings"), "findings")
                              .to_pylist())
    want = reference_verdicts(hist, [now], AuditConfig(**AUDIT), log_end_fn(hist))
    assert sorted(finding_messages(found), key=repr) == want and want
