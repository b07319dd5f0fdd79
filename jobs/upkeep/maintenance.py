"""Upkeep of the warehouse beside the audit loop: what keeps a long run's cost flat.

Without it every table gains a small file per commit (the ack ledger one per producer
per second, ``audit_hot`` a generation per pass) and nothing is ever deleted, so reads
slow down and disk use grows for as long as the service runs. The schedule (settings
``steady.*``; :func:`plan` decides, :class:`Upkeep` does):

* **compaction**, every ``compact_every_seconds`` (10 min): each table of
  :data:`COMPACTED` holding at least ``compact_min_files`` live files is rewritten into
  few files (delta-rs OPTIMIZE) and checkpointed, so loading it replays a short log over
  few files; then each is **vacuumed**: the files a compaction replaced more than
  ``vacuum_retention_hours`` (1 h) ago are deleted, and files that no commit names,
  ``unnamed_retention_hours`` (24 h) after they were written (a failed writer's; one
  replaced while the service was stopped longer than the tables keep the names of
  removed files in their checkpoints: ``tombstone_retention_hours``, 2 h, which the
  round sets on each table), ``audit_hot``'s too (a listing of its folder every round,
  not between passes); with tombstones kept less than an hour (a soak's minutes) both
  vacuums keep files that long instead;
* **the ack ledger** is compacted alone every ``ledger_compact_every_seconds`` (1 min)
  between those rounds, its small files packed into files of about a megabyte
  (:data:`LEDGER_ROUND_TARGET_MB`; larger ones wait for the rounds): each producer
  that commits its own reports adds a file a second, and delta-rs takes up a table's
  whole file list at every commit, so a producer's commit costs it CPU in proportion
  to the live files of ``acks`` (``bench/commit_cost.py``: 0.3 ms a file); vacuumed
  in the rounds;
* **audit_hot**: every pass appends a generation and every ``audit.hot_rewrite_passes``
  (10) passes one overwrites them all. After each rewrite the table is checkpointed;
  half-way to the next rewrite it is vacuumed with no retention but the files of its
  ``hot_keep_versions`` (5) latest versions (readers load the latest: a few passes'
  margin is ample). This runs in the loop's own thread, between passes: the loop is
  the table's only writer, and a vacuum without retention must not run while a write
  is in flight (it would delete the new file before its commit names it);
* **the Delta logs**: after each table's compaction round (audit_hot's: after its
  checkpoint), its log entries older than ``log_retention_hours`` (24 h; audit_hot
  ``hot_log_retention_hours``, 1 h) and before its last checkpoint are deleted
  (:func:`~kafka_audit.store.trim_log`): a table committing every second otherwise
  keeps a file a second for Delta's default 30 days;
* **retention**, every ``retention.every_seconds`` (1 h): rows older than
  ``retention.days`` (30; findings other than confirmations ``findings_days``, 365) are
  dropped, their sums kept in ``rollups`` so totals stay exact, never a write not yet
  judged (:mod:`~kafka_audit.jobs.upkeep.retention`); the vacuum deletes their files;
* **great-expectations** over the new acks, every ``quality_every_seconds`` (30 s);
* **windows** (:mod:`~kafka_audit.jobs.upkeep.windows_job`: when writes were at risk), every
  ``windows_every_seconds`` (10 s) when ``cluster_events``, ``acks`` or the committed
  pass changed since the last computation.

Compaction, vacuum of the other tables, the quality check and the windows run in one worker
thread, woken by the loop after each committed pass (never while passes fail), so
they never lengthen a pass.

Why the audit's exactly-once reads survive it: a pass reads the rows appended since
its last commit as the files commits added with ``dataChange`` true
(:func:`~kafka_audit.store.files_added_since`); a compaction adds and removes with
``dataChange`` false, so its files are never taken for new rows, and the files it
replaced are still read where they hold new rows: they are deleted only an hour after
the compaction, and the worker runs only right after a pass that started after that
compaction had taken every row committed before it. Producers, the consume job and the
watcher keep appending meanwhile: a blind append never conflicts with a compaction;
a compaction that loses to a concurrent commit changes nothing and is tried again next
round (:func:`~kafka_audit.store.compact`), so no row is ever lost.
"""

from __future__ import annotations

import logging
import threading
import time
from collections.abc import Callable
from dataclasses import dataclass, field
from typing import TYPE_CHECKING

from kafka_audit.settings import Settings
from kafka_audit.store import (
    checkpoint,
    compact,
    footprint,
    keep_tombstones,
    trim_log,
    vacuum,
    vacuum_unnamed,
)

if TYPE_CHECKING:
    from kafka_audit.jobs.upkeep.windows_job import WindowInputs

__all__ = ["COMPACTED", "Plan", "plan", "Upkeep"]

log = logging.getLogger(__name__)

#: the ledger's own rounds (``ledger_compact_every_seconds``) pack the files appended since
#: into files of about this size and leave larger ones to the 10-minute rounds: packing a
#: growing file anew every minute would keep an hour of copies of it until the vacuum
LEDGER_ROUND_TARGET_MB = 1.0

#: the tables compacted and vacuumed on the schedule (audit_hot has its own)
COMPACTED = ("acks", "consumed", "cluster_events", "findings", "partition_state", "dq_results",
             "rollups")


@dataclass(frozen=True)
class Plan:
    """What is due after a pass."""

    compact: bool = False        # compaction and vacuum of COMPACTED (worker thread)
    compact_ledger: bool = False  # acks alone, between those rounds (worker thread)
    quality: bool = False        # great-expectations over the new acks (worker thread)
    hot_checkpoint: bool = False  # audit_hot after a rewrite (loop thread)
    hot_vacuum: bool = False     # audit_hot half-way between rewrites (loop thread)
    windows: bool = False        # the windows table (worker thread)
    retention: bool = False      # rows aged out dropped, their sums kept (worker thread)

    @property
    def background(self) -> bool:
        return (self.compact or self.compact_ledger or self.quality or self.windows
                or self.retention)


@dataclass
class Done:
    """When each kind of upkeep last ran: monotonic seconds, and rewrite rounds of
    ``audit_hot`` (pass id // hot_rewrite_passes)."""

    compact: float = float("-inf")
    compact_ledger: float = float("-inf")  # acks compacted alone (a round does it too)
    quality: float = float("-inf")
    windows: float = float("-inf")
    retention: float = float("-inf")
    hot_checkpoint_round: int = -1
    hot_vacuum_round: int = -1


def plan(settings: Settings, pass_id: int, now: float, done: Done) -> Plan:
    """What is due after pass ``pass_id`` committed at monotonic time ``now`` (pure)."""
    s, every = settings.steady, settings.audit.hot_rewrite_passes
    round_, into = divmod(pass_id, every)
    compact = now - done.compact >= s.compact_every_seconds
    return Plan(
        compact=compact,
        compact_ledger=not compact and now - max(done.compact, done.compact_ledger)
        >= s.ledger_compact_every_seconds,
        quality=now - done.quality >= s.quality_every_seconds,
        windows=now - done.windows >= s.windows_every_seconds,
        retention=settings.retention.enabled
        and now - done.retention >= settings.retention.every_seconds,
        # the rewrite is the pass with into == 0; checkpoint at the first chance after it
        hot_checkpoint=round_ > done.hot_checkpoint_round and round_ > 0,
        # its older generations were dropped by that rewrite: delete them half-way on
        hot_vacuum=round_ > done.hot_vacuum_round and round_ > 0 and into >= every // 2,
    )


@dataclass
class Upkeep:
    """Runs the upkeep :func:`plan` says is due after each committed pass: audit_hot's in
    the caller's thread (:meth:`between_passes`), the rest in one worker thread
    (:meth:`after_pass` starts it when it is idle). ``report`` gets what each round
    did (table -> what, seconds)."""

    settings: Settings
    clock: Callable[[], float] = time.monotonic
    done: Done = field(default_factory=Done)
    quality_failures: int = 0
    rounds: int = 0
    last: dict = field(default_factory=dict)
    #: the source versions (and committed pass) the windows were last computed from
    windows_from: tuple | None = None
    #: what a windows computation keeps for the next: its inputs read incrementally and
    #: the acked writes counted per window (jobs/upkeep/windows_job.py)
    window_inputs: WindowInputs | None = None
    _thread: threading.Thread | None = None
    #: the tables whose tombstone retention was seen set (:meth:`keep_tombstones`)
    _tombstones_kept: set[str] = field(default_factory=set)

    def between_passes(self, pass_id: int) -> None:
        """audit_hot's checkpoint and vacuum, when due: call from the audit loop's thread,
        between passes (it is the table's only writer)."""
        p = plan(self.settings, pass_id, self.clock(), self.done)
        path = self.settings.table_path("audit_hot")
        round_ = pass_id // self.settings.audit.hot_rewrite_passes
        try:
            if p.hot_checkpoint:
                # set here, not by the worker: a metadata commit beside the loop's own
                # write of audit_hot would fail that pass
                self.keep_tombstones(path)
                checkpoint(path)
                self.done.hot_checkpoint_round = round_
                n = trim_log(path, self.settings.steady.hot_log_retention_hours)
                log.debug("audit_hot: %d log entries deleted", n)
            if p.hot_vacuum:
                n = vacuum(path, 0, self.settings.steady.hot_keep_versions)
                self.done.hot_vacuum_round = round_
                log.debug("audit_hot: %d files vacuumed", n)
        except Exception as exc:  # noqa: BLE001 - upkeep never stops the audit; next round
            log.warning("audit_hot upkeep failed, tried again later: %s", exc)

    def after_pass(self, pass_id: int) -> None:
        """Start the worker on what is due, unless it is still busy with the last round."""
        if self._thread is not None and self._thread.is_alive():
            return
        p = plan(self.settings, pass_id, self.clock(), self.done)
        if not p.background:
            return
        self._thread = threading.Thread(target=self.run, args=(p,), daemon=True,
                                        name="kafka-audit-upkeep")
        self._thread.start()

    def run(self, p: Plan) -> dict:
        """One round of the worker's upkeep (``compact``, ``quality``), synchronously."""
        did: dict = {}
        if p.quality:
            self.done.quality = self.clock()
            t = time.perf_counter()
            try:
                from kafka_audit.jobs.audit.audit_pass import quality_check

                self.quality_failures = quality_check(self.settings)
                did["dq_results"] = ("quality", round(time.perf_counter() - t, 3))
            except Exception as exc:  # noqa: BLE001 - checked again next round
                log.warning("quality check failed, tried again later: %s", exc)
        if p.retention:  # before the windows, which leave out the windows it aged out
            self.done.retention = self.clock()
            did["retention"] = self.drop_aged()
        if p.windows:
            self.done.windows = self.clock()
            did["windows"] = self.update_windows()
        if p.compact:
            self.done.compact = self.clock()
            for table in COMPACTED:
                did[table] = self.compact_table(table)
            self.vacuum_hot_unnamed()
        elif p.compact_ledger:
            self.done.compact_ledger = self.clock()
            did["acks"] = self.compact_table("acks", and_vacuum=False,
                                             target_mb=LEDGER_ROUND_TARGET_MB)
        self.rounds += 1
        self.last = did
        return did

    def drop_aged(self) -> tuple[str, float]:
        """One retention round (``retention.py``): what it dropped per table."""
        from kafka_audit.jobs.upkeep.retention import run_retention

        t = time.perf_counter()
        try:
            done = run_retention(self.settings)
            what = "; ".join(f"{d.table}: {d.rows} rows" if d.rows is not None
                             else f"{d.table}: {d.why}" for d in done if d.rows or d.why)
        except Exception as exc:  # noqa: BLE001 - upkeep never stops the audit; next round
            log.warning("retention round failed, tried again later: %s", exc)
            what = f"failed: {exc}"
        return what or "nothing aged out", round(time.perf_counter() - t, 3)

    def update_windows(self) -> tuple[str, float]:
        """The windows table recomputed, if its sources changed since the last time."""
        from kafka_audit.jobs.upkeep.windows_job import WindowInputs, update_windows
        from kafka_audit.store import committed_pass, latest_version

        t = time.perf_counter()
        try:
            sources = (*(latest_version(self.settings.table_path(n))
                         for n in ("cluster_events", "acks")), committed_pass(self.settings))
            if sources == self.windows_from:
                return "unchanged", round(time.perf_counter() - t, 3)
            if self.window_inputs is None:
                self.window_inputs = WindowInputs(self.settings)
            n = len(update_windows(self.settings, kept=self.window_inputs))
            self.windows_from = sources
            what = f"{n} windows"
        except Exception as exc:  # noqa: BLE001 - upkeep never stops the audit; next round
            log.warning("windows not computed, tried again later: %s", exc)
            what = f"failed: {exc}"
        return what, round(time.perf_counter() - t, 3)

    def compact_table(self, table: str, and_vacuum: bool = True,
                      target_mb: float | None = None) -> tuple[str, float]:
        """Compact (when it has enough live files; into files of ``target_mb``, by default
        ``compact_target_mb``) one table, and (``and_vacuum``) vacuum it and trim its log;
        what was done."""
        path = self.settings.table_path(table)
        s = self.settings.steady
        t = time.perf_counter()
        what = []
        try:
            size = footprint(path)
            if size is not None and size.live_files >= s.compact_min_files:
                metrics = compact(path, int((target_mb or s.compact_target_mb) * 2**20))
                what.append(f"compacted {metrics['numFilesRemoved']} files into "
                            f"{metrics['numFilesAdded']}" if metrics else "compaction lost "
                            "to a concurrent commit")
            if size is not None and and_vacuum:
                if self.keep_tombstones(path):
                    what.append(f"tombstones kept {s.tombstone_retention_hours:g} h")
                n = vacuum(path, self.vacuum_hours(s.vacuum_retention_hours))
                n += vacuum_unnamed(path, self.vacuum_hours(s.unnamed_retention_hours))
                what.append(f"{n} files vacuumed")
                what.append(f"{trim_log(path, s.log_retention_hours)} log entries deleted")
        except Exception as exc:  # noqa: BLE001 - upkeep never stops the audit; next round
            log.warning("upkeep of %s failed, tried again later: %s", table, exc)
            what.append(f"failed: {exc}")
        return "; ".join(what), round(time.perf_counter() - t, 3)

    def keep_tombstones(self, path: str) -> bool:
        """:func:`~kafka_audit.store.keep_tombstones` once a table and process: the setting
        does not change while the service runs, and each look loads the table."""
        if path in self._tombstones_kept:
            return False
        changed = keep_tombstones(path, self.settings.steady.tombstone_retention_hours)
        self._tombstones_kept.add(path)
        return changed

    def vacuum_hours(self, hours: int) -> int | None:
        """A vacuum's retention: ``hours``, or with tombstones kept less than an hour, the
        table's own tombstone retention (None: delta-rs reads it from the table)."""
        return None if self.settings.steady.tombstone_retention_hours < 1 else hours

    def vacuum_hot_unnamed(self) -> None:
        """audit_hot's files that no version names, once ``unnamed_retention_hours`` old:
        a listing of its folder, so once a compaction round, not between passes (safe
        beside the table's writer: its files in flight are seconds old)."""
        try:
            n = vacuum_unnamed(self.settings.table_path("audit_hot"),
                               self.vacuum_hours(self.settings.steady.unnamed_retention_hours))
            log.debug("audit_hot: %d unnamed files vacuumed", n)
        except Exception as exc:  # noqa: BLE001 - upkeep never stops the audit; next round
            log.warning("audit_hot upkeep failed, tried again later: %s", exc)

    def close(self, timeout: float = 30) -> None:
        if self._thread is not None:
            self._thread.join(timeout)
