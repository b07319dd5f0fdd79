"""Audit job: the streaming verdict engine on Spark, one incremental pass at a time.

* sources: the new files of ``acks`` and ``consumed``, the state in
  ``audit_hot``, ``cluster_events`` (see :mod:`~kafka_audit.jobs.audit.audit_pass`);
* sinks: ``findings``, re-reads into ``consumed``, ``audit_hot`` (the commit
  point), ``partition_state``, ``dq_results``;
* checkpoint: the latest progress row of ``audit_hot`` (the committed pass and
  the source versions it consumed);
* trigger: a pass every ``audit.interval_seconds``, or one pass with ``--once``; in
  ``kafka-audit run`` also as soon as the consume job commits a micro-batch
  (``steady.wake_on_commit``: an in-process event; passes start at least
  ``steady.min_pass_gap_seconds`` apart), so a pass observes the new frontier, and
  judges what settled, without waiting out an interval;
* warm between passes: the cluster lookups (an admin client, a re-read consumer), the
  cluster events read so far, the Spark session;
* upkeep: after each committed pass, :mod:`~kafka_audit.jobs.upkeep.maintenance` (compaction,
  vacuum, checkpoints, the great-expectations check) when due;
* outages: a pass that fails (the cluster or the warehouse unreachable) is
  retried with a capped doubling wait, logged once when passes start failing and
  once when they succeed again; ``<home>/status/audit.json`` says which pass was
  committed last and when (health reads it).

The parts: :mod:`~kafka_audit.jobs.audit.audit_pass` (the pass itself),
:mod:`~kafka_audit.jobs.audit.hot_state` (its state as rows) and
:mod:`~kafka_audit.jobs.audit.lookups` (what it asks the cluster).

Command: ``kafka-audit audit [--once]``.
"""

from __future__ import annotations

import logging
import threading
import time
from collections.abc import Callable
from dataclasses import replace
from datetime import UTC, datetime
from typing import TYPE_CHECKING

from kafka_audit.errors import NotSettled
from kafka_audit.jobs.audit.audit_pass import AuditSummary, PassStop, Warm, run_audit_pass
from kafka_audit.jobs.audit.lookups import ClusterLookups
from kafka_audit.jobs.spark import raise_if_jvm_died
from kafka_audit.jobs.upkeep.maintenance import Upkeep
from kafka_audit.settings import Settings
from kafka_audit.status import Outage, StatusWriter

if TYPE_CHECKING:
    from kafka_audit.jobs.consume.consume_job import Backlog

__all__ = ["run_audit_loop"]

log = logging.getLogger(__name__)


def run_audit_loop(spark, settings: Settings, once: bool = False,
                   report: Callable[[AuditSummary], None] = lambda s: print(s.line(),
                                                                              flush=True),
                   stop: threading.Event | None = None,
                   wake: threading.Event | None = None,
                   behind: Backlog | None = None,
                   until_settled: float | None = None) -> None:
    """Run passes every ``audit.interval_seconds`` (one with ``once``, which raises on a
    failed pass), sharing one set of cluster lookups and warm state; ``report`` gets each
    pass's summary. ``wake``: set by the consume job when it commits a micro-batch, it
    starts the next pass early. ``behind``: what the consume job still has to read
    (:class:`~kafka_audit.jobs.consume.consume_job.Backlog`): passes wait for the reading
    (:func:`_holding`), the first one too. Runs until ``stop`` is set.

    ``until_settled`` (seconds): passes as ``once`` runs one (a failed one raises, no
    upkeep) until one leaves no write pending: every acked write judged, the re-reads it
    asked for done; :class:`NotSettled` if writes are still pending that many seconds
    after the first pass began (a one-shot audit of what ``consume --once`` read: a
    batch job's, or a Spark cluster's, where each process is a driver to start)."""
    stop = stop or threading.Event()
    lookups = ClusterLookups(settings)
    warm = Warm()
    one_shot = once or until_settled is not None
    deadline = None if until_settled is None else time.monotonic() + until_settled
    upkeep = None if one_shot else Upkeep(settings)
    outage = Outage("audit", StatusWriter(settings.home_dir, "audit"), log,
                    settings.outage.retry_seconds, settings.outage.max_backoff_seconds)
    if settings.steady.backlog_pass_seconds == 0:
        behind = None  # passes never wait for the reading
    passes = PassStop(stop, spark)
    ended = threading.Event()
    if not one_shot:
        passes.tag()  # this thread's Spark jobs: the passes'
        threading.Thread(target=_cancel_at_stop, args=(passes, ended),
                         name="kafka-audit-pass-stop", daemon=True).start()
    try:
        if behind is not None:  # a restart after an outage: the backlog's reading first
            hold = time.monotonic() + settings.steady.backlog_pass_seconds
            while not stop.is_set() and _holding(behind, hold):
                stop.wait(0.25)
        while not stop.is_set():
            if wake is not None:
                wake.clear()  # commits from now on wake the next pass
            try:
                summary = run_audit_pass(spark, settings, lookups=lookups, warm=warm,
                                         quality=one_shot, stop=passes)
            except Exception as exc:
                if one_shot:
                    raise
                if passes.interrupted(exc):
                    log.info("audit: stopped; a pass was interrupted before it wrote anything "
                             "(it is judged again at the next start)")
                    return
                raise_if_jvm_died(spark, exc)  # the service starts the loop on a new JVM
                stop.wait(outage.failed(exc))
                continue
            outage.succeeded(pass_id=summary.pass_id, pending=summary.pending,
                             unseen=summary.unseen, at=summary.at.isoformat())
            if upkeep is not None:
                upkeep.between_passes(summary.pass_id)
                upkeep.after_pass(summary.pass_id)
                summary = replace(summary, quality_failures=upkeep.quality_failures)
            report(summary)
            if once or (deadline is not None and summary.pending == 0):
                return
            if deadline is not None and time.monotonic() >= deadline:
                raise NotSettled(f"{summary.pending} writes still pending after "
                                 f"{until_settled:g} s of passes (pass {summary.pass_id}; "
                                 "GET /v1/topics/TOPIC counts them per partition)")
            _wait(settings, stop, wake, _due(summary), sum(summary.seconds.values()),
                  behind)
    finally:
        ended.set()
        if upkeep is not None:
            upkeep.close()
        lookups.close_reader()


def _cancel_at_stop(passes: PassStop, ended: threading.Event) -> None:
    """Once the loop's stop is set, cancel the running pass's Spark jobs (again every half
    second: a job the pass starts after one cancel, before its next check), until the
    loop ends or the pass writes."""
    while not ended.is_set():
        if not passes.stop.wait(0.5):
            continue
        try:
            if not passes.cancel():
                return  # the pass writes: it runs to its end
        except Exception as exc:  # noqa: BLE001 - Spark stopped meanwhile: nothing to cancel
            log.debug("audit: cancelling the pass's jobs: %s", exc)
            return
        ended.wait(0.5)


def _wait(settings: Settings, stop: threading.Event, wake: threading.Event | None,
          due: float | None = None, pass_seconds: float = 0.0,
          behind: Backlog | None = None) -> None:
    """Until the next pass: ``audit.interval_seconds``, or less once ``wake`` is set (but
    at least ``steady.min_pass_gap_seconds``), or until ``stop``.

    ``due`` (``time.monotonic()``): when the writes that look lost now will have settled
    (:attr:`AuditSummary.suspects_settle`). A pass starts then at the latest; and one that
    would start less than ``pass_seconds`` (the last pass's length) before it waits for it
    instead, since begun sooner it would still be running then and leave them to the pass
    after.

    ``behind``: what the consume job has yet to read. While :func:`_holding` says so,
    neither a wake nor the interval starts a pass (``due`` still does): a pass judging the
    backlog's first batches took a core and the interpreter from the reading, which the
    catch-up after an outage waited for (bench/catchup.py). The pass starts as soon as the
    consume thread has seen the progress of the batch that ended the backlog (it looks
    every ``spark.topic_refresh_seconds``, 2 s at most)."""
    start = time.monotonic()
    end = start + settings.audit.interval_seconds
    if due is not None and due - end < pass_seconds:
        end = max(due, start)  # the interval ends too close to it: wait for it
    hold = start + settings.steady.backlog_pass_seconds
    if settings.steady.backlog_pass_seconds == 0:
        behind = None  # passes never wait for the reading

    def held() -> bool:  # never past the instant the writes that look lost settle
        return behind is not None and (due is None or time.monotonic() < due) and \
            _holding(behind, hold)

    gap = min(settings.steady.min_pass_gap_seconds, settings.audit.interval_seconds)
    if stop.wait(min(gap, end - start)):
        return
    while not stop.is_set():
        now = time.monotonic()
        if held():  # past ``hold`` too while the reading gains: a quarter second a look
            stop.wait(0.25)
        elif now >= end:
            return
        elif wake is None:
            stop.wait(min(end - now, 0.25))
        elif wake.wait(min(end - now, 0.25)) and not held():
            if due is not None and 0 < (until_due := due - time.monotonic()) < pass_seconds:
                stop.wait(until_due)  # woken too close to it: wait for it
            return


def _holding(backlog: Backlog, hold: float) -> bool:
    """Whether a pass waits for the consume job's reading: while it gains on a backlog
    (each micro-batch leaves fewer records than the one before: a catch-up after an
    outage, however long); while a query that started runs its first micro-batch,
    however long (until it ends, nothing says what is left: after a 30-minute outage
    the first batch after the restart ran 2 minutes, and a pass begun 60 s in took the
    cores from the reading, bench/catchup.py); while a backlog it does not gain on (more
    arrives than it reads) is still left, or a first batch whose thread no longer says
    it runs, until ``hold`` (``time.monotonic()``; the last pass plus
    ``steady.backlog_pass_seconds``), so passes still run that often."""
    records, gaining = backlog.state()
    if records == 0:
        return False
    if backlog.starting():
        return True
    return (records is not None and gaining) or time.monotonic() < hold


def _due(summary: AuditSummary) -> float | None:
    """:attr:`AuditSummary.suspects_settle` on the ``time.monotonic()`` clock."""
    if summary.suspects_settle is None:
        return None
    return time.monotonic() + (summary.suspects_settle - datetime.now(UTC)).total_seconds()
