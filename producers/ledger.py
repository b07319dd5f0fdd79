"""The ack ledger: every delivery report, spooled durably, then appended to Delta.

The delivery callback only appends a tuple to a deque (never blocks, never
does I/O). A writer thread drains the deque every ``flush_seconds`` (or at
``flush_rows``, or at once when a topic's first reports come), turns the tuples
into one Arrow batch of *runs* (the range ledger: one row per consecutive seqs at
consecutive offsets of one partition, split at any gap, duplicate or disorder; failed
reports per shared error), writes it to a spool segment
(``<spool>/<app_id>/<version>.arrow``, fsynced, renamed into place), then appends it
to the ``acks`` Delta table with delta-rs as an idempotent transaction
``(app_id, version)``. A segment is deleted only after its commit.

So a crash never loses an ack (the segment is on disk before anything else)
and never doubles one (a segment whose version the table's transaction log
already holds is dropped, not appended again). A warehouse that cannot be
written keeps the segments, counts the failure and says so on stderr; the next
flush retries them in order.

Each run of a producer has its own app id (``producer/run``) and spool folder,
locked with ``flock`` for as long as the ledger lives. When a process dies, the
kernel drops its lock, and the next ledger started under the same spool root
commits that orphaned folder (:func:`recover_orphaned_spools`), so the acks of
a crashed run reach the table although no process of that run is left.

Versions start at the wall clock in microseconds and go up by one a segment:
a restarted app id never reuses a version, even if the warehouse is
unreachable at start and its committed version cannot be read.

A spool is its user's alone (:func:`private_dir`): anyone who could write a segment
into it could add acks to the ledger. Its folders are created 0700, its files 0600, and
a spool root that others may write is closed if it is the user's, refused if not.
"""

from __future__ import annotations

import fcntl
import json
import logging
import os
import shutil
import sys
import threading
import time
from collections import deque
from collections.abc import Callable
from pathlib import Path
from typing import Any

import numpy as np
import pyarrow as pa
import pyarrow.compute as pc
import pyarrow.ipc as ipc

from kafka_audit.errors import LedgerWriteError
from kafka_audit.schemas.policy import Durability
from kafka_audit.schemas.systems import KAFKA
from kafka_audit.schemas.tables import LEDGER_NOTES, arrow_schema
from kafka_audit.store import (
    append_arrow_once,
    check_table,
    one_snapshot_each,
    segment_notes,
    stage_segment,
    transaction_version,
)

__all__ = ["AckLedger", "LEDGER_NOTES", "private_dir", "private_file", "PRIVATE_DIR",
           "PRIVATE_FILE"]

log = logging.getLogger(__name__)
_SCHEMA = arrow_schema("acks")

PRIVATE_DIR, PRIVATE_FILE = 0o700, 0o600
#: the most spooled segments one commit of a direct ledger carries (a flush a segment: a
#: backlog of minutes catches up in a few commits, each of bounded size)
BACKLOG_SEGMENTS_PER_COMMIT = 64


#: the soonest a flush follows the one before when a topic new to the writer waits (so a
#: producer meeting many new topics adds at most four commits a second)
NEW_TOPIC_GAP_SECONDS = 0.25


def flush_due(since: float, flush_seconds: float, new_topic: Callable[[], bool]) -> bool:
    """Whether a ledger writer whose last flush was ``since`` seconds ago flushes now: at
    its interval, or sooner (``NEW_TOPIC_GAP_SECONDS`` at the least) when ``new_topic()``
    says a topic it has not written yet waits (the audit reads a topic from when the
    ledger first names it). The Python ledger's and the plugin shipper's one rule."""
    return since >= flush_seconds or (
        since >= min(flush_seconds, NEW_TOPIC_GAP_SECONDS) and new_topic())


def _reports(table: pa.Table) -> int:
    """The delivery reports a batch of ledger rows (runs) stands for."""
    return pc.sum(table["count"]).as_py() or 0


def private_dir(path: Path) -> Path:
    """``path`` as a folder of this user's alone: created 0700 with any missing parents; an
    existing one of ours that others may enter is closed (0700); one of another user's that
    others may write is refused (:class:`LedgerWriteError`)."""
    path = Path(path)
    missing = []
    p = path
    while not p.exists() and p != p.parent:
        missing.append(p)
        p = p.parent
    for d in reversed(missing):
        try:
            d.mkdir(mode=PRIVATE_DIR)
        except FileExistsError:
            pass
    st = path.stat()
    if st.st_uid == os.geteuid():
        if st.st_mode & 0o077:
            os.chmod(path, PRIVATE_DIR)
    elif st.st_mode & 0o022:
        raise LedgerWriteError(
            f"spool folder {path} may be written by others (mode {st.st_mode & 0o777:03o}, "
            f"owner uid {st.st_uid}): anyone who can write it can add acks; use a folder of "
            f"your own")
    return path


def private_file(path: Path, flags: int = os.O_WRONLY | os.O_TRUNC) -> int:
    """A descriptor of ``path``, created 0600 if it does not exist."""
    return os.open(path, flags | os.O_CREAT | os.O_CLOEXEC, PRIVATE_FILE)


class SpoolCommitter:
    """One app id's spool folder, committed to the ``acks`` table one segment at a time.

    The folder holds ``<version>.arrow`` segments, the file ``app_id`` and a ``.lock``
    that the owning process holds (``flock``) while it lives.
    """

    def __init__(self, table_path: str, folder: Path, app_id: str | None = None,
                 staged: bool = False) -> None:
        """``staged``: hand each segment over to the service's committer (an object in the
        table's staging folder: :func:`~kafka_audit.store.stage_segment`) instead of
        committing it here; a fleet of producer hosts then costs the table one commit a
        second, not one per host (``producer.ledger_commits``)."""
        self.table_path = table_path
        self.folder = folder
        self.staged = staged
        private_dir(folder)
        id_file = folder / "app_id"
        if app_id is not None and not id_file.exists():
            with os.fdopen(private_file(id_file), "w") as f:
                f.write(app_id)
        self.app_id = app_id or id_file.read_text().strip()
        self._lock_fd: int | None = None
        # the newest version this app id has in the table's transaction log, as last read or
        # written here; None = unknown, read it again (after a failure the write may have landed)
        self._committed: int | None = None
        self.rows_written = 0  # ledger rows (runs)
        self.reports_written = 0  # delivery reports those rows stand for
        self.write_failures = 0
        self.last_error: str | None = None
        #: what the next commit's ``commitInfo`` carries (:data:`LEDGER_NOTES`), until one
        #: carries it: the owner's drops, so the warehouse holds them too
        self.notes: dict | None = None

    # ---- ownership ----------------------------------------------------------------------
    def lock(self) -> bool:
        """Take the folder for this process; False if a live process holds it."""
        fd = private_file(self.folder / ".lock", os.O_RDWR)
        try:
            fcntl.flock(fd, fcntl.LOCK_EX | fcntl.LOCK_NB)
        except BlockingIOError:
            os.close(fd)
            return False
        self._lock_fd = fd
        return True

    def release(self, remove_if_empty: bool = True) -> None:
        if remove_if_empty and not self.segments():
            shutil.rmtree(self.folder, ignore_errors=True)  # still ours: nobody can be inside
        if self._lock_fd is not None:
            os.close(self._lock_fd)
            self._lock_fd = None

    # ---- spooling -------------------------------------------------------------------------
    def segments(self) -> list[Path]:
        return sorted(self.folder.glob("*.arrow"))

    def first_version(self) -> int:
        spooled = [int(p.stem) for p in self.segments()]
        return max([time.time_ns() // 1000, *(v + 1 for v in spooled)])

    def spool(self, table: pa.Table, version: int) -> None:
        path = self.folder / f"{version:020d}.arrow"
        tmp = path.with_suffix(".tmp")
        try:
            os.close(private_file(tmp))  # 0600 before a byte is written; Arrow keeps the mode
            with pa.OSFile(str(tmp), "wb") as sink, ipc.new_file(sink, table.schema) as writer:
                writer.write_table(table)
            fd = os.open(tmp, os.O_RDONLY)
            try:
                os.fsync(fd)
            finally:
                os.close(fd)
        except OSError:
            tmp.unlink(missing_ok=True)  # a full disk keeps no half segment of ours
            raise
        os.replace(tmp, path)

    # ---- committing -----------------------------------------------------------------------
    def _committed_version(self) -> int:
        """Read from the table only when unknown: replaying the Delta log on every flush
        would grow with the table, and this folder's owner is the only writer of its app id."""
        if self._committed is None:
            v = transaction_version(self.table_path, self.app_id)
            self._committed = -1 if v is None else int(v)
        return self._committed

    def commit(self) -> int:
        """Append every spooled segment not yet in the table; return rows appended."""
        segments = self.segments()
        if not segments:
            return 0
        if self.staged:
            return self._hand_over(segments)
        # the table kept from the last commit and brought up to date (its new commits read),
        # not loaded anew each second: on an object store a load reads the log's checkpoint
        with one_snapshot_each():
            return self._append(segments)

    def _append(self, segments: list[Path]) -> int:
        """Append the spooled ``segments`` not yet in the table (:meth:`commit`)."""
        written = 0
        try:
            committed = self._committed_version()
            pending = []
            for seg in segments:
                if int(seg.stem) <= committed:  # committed before a crash: never append twice
                    seg.unlink()
                else:
                    pending.append(seg)
            # a backlog (the warehouse was away, or commits were lost to other writers) goes
            # in as few commits as it can: each takes its run of segments as one append, the
            # transaction at the run's last version
            for start in range(0, len(pending), BACKLOG_SEGMENTS_PER_COMMIT):
                run = pending[start:start + BACKLOG_SEGMENTS_PER_COMMIT]
                parts = []
                for seg in run:
                    with pa.memory_map(str(seg)) as src:
                        parts.append(ipc.open_file(src).read_all())
                # a batch file's metadata is the spool's business (the native shipper
                # keeps its cursor there), not the table's; its notes (the shipper's of
                # the plugin's drops) go to the commit
                carried = segment_notes(parts)
                tables = [p.replace_schema_metadata(None) for p in parts]
                # segments an older version spooled lack the columns added since: nulls
                table = (pa.concat_tables(tables, promote_options="default")
                         if len(tables) > 1 else tables[0])
                version = int(run[-1].stem)
                append_arrow_once(self.table_path, "acks", table, self.app_id, version,
                                  known=committed, metadata=self._metadata(carried))
                self._committed = committed = version
                self.notes = None
                for seg in run:
                    seg.unlink()
                written += table.num_rows
                self.reports_written += _reports(table)
            self.rows_written += written
            if self.last_error is not None:
                print(f"ack ledger {self.app_id}: warehouse writable again", file=sys.stderr)
                self.last_error = None
        except Exception as exc:  # noqa: BLE001 - keep the segments, say so, retry next flush
            self._committed = None
            self.note_failure(exc)
        return written

    def _metadata(self, carried: dict[str, list] | None = None) -> dict | None:
        """A commit's ``commitInfo`` notes: those its batch files carry, and this ledger's
        own (a list per key: :data:`LEDGER_NOTES` holds every note of the commit)."""
        notes = dict(carried or {})
        if self.notes is not None:
            notes[LEDGER_NOTES] = [*notes.get(LEDGER_NOTES, []), self.notes]
        return notes or None

    def _with_notes(self, table: pa.Table) -> pa.Table:
        """``table`` with the notes in its schema's metadata, for a staged segment (the
        committer's commit carries them: ``store.commit_staged``)."""
        if self.notes is None:
            return table
        return table.replace_schema_metadata({**(table.schema.metadata or {}),
                                              LEDGER_NOTES.encode(): json.dumps(self.notes)})

    def commit_table(self, table: pa.Table, version: int) -> int:
        """Append (or stage) one batch held in memory as ``version``, the spool bypassed:
        the caller's spool cannot be written. Only with no segment spooled (those come
        first: versions are committed in order; the caller has looked). Raises what the
        warehouse raises."""
        if self.staged:
            stage_segment(self.table_path, self.app_id, version,
                          _ipc_bytes(self._with_notes(table)))
            self.notes = None
        else:
            try:
                with one_snapshot_each():
                    append_arrow_once(self.table_path, "acks", table, self.app_id, version,
                                      known=self._committed_version(),
                                      metadata=self._metadata())
            except Exception:
                self._committed = None  # the write may have landed: read it again
                raise
            self._committed = version
            self.notes = None
        self.rows_written += table.num_rows
        self.reports_written += _reports(table)
        return table.num_rows

    def _hand_over(self, segments: list[Path]) -> int:
        """Stage every segment, oldest first (the committer relies on that order: it takes
        an app's newest staged version as the app's transaction); a segment is deleted here
        once the store holds it. Returns the rows handed over."""
        written = 0
        try:
            for seg in segments:
                data = seg.read_bytes()
                if self.notes is not None:  # the committer carries them into its commit
                    with pa.BufferReader(data) as src:
                        data = _ipc_bytes(self._with_notes(ipc.open_file(src).read_all()))
                stage_segment(self.table_path, self.app_id, int(seg.stem), data)
                self.notes = None
                with pa.BufferReader(data) as src:
                    counts = ipc.open_file(src).read_all().column("count")
                seg.unlink()
                written += len(counts)
                self.reports_written += pc.sum(counts).as_py() or 0
            self.rows_written += written
            if self.last_error is not None:
                print(f"ack ledger {self.app_id}: warehouse writable again", file=sys.stderr)
                self.last_error = None
        except Exception as exc:  # noqa: BLE001 - keep the segments, say so, retry next flush
            self.note_failure(exc)
        return written

    def note_failure(self, exc: Exception) -> None:
        self.write_failures += 1
        self.last_error = f"{type(exc).__name__}: {exc}"
        print(f"ack ledger {self.app_id}: cannot write {self.table_path} ({self.last_error}); "
              f"{len(self.segments())} segments kept in {self.folder}", file=sys.stderr)


def _ipc_bytes(table: pa.Table) -> bytes:
    sink = pa.BufferOutputStream()
    with ipc.new_file(sink, table.schema) as writer:
        writer.write_table(table)
    return sink.getvalue().to_pybytes()


def unrecorded_spans(table: pa.Table, producer_id: str, run_id: str) -> list[dict]:
    """What a dropped batch of ledger rows covered, per topic and partition: the producer,
    the first and last seq, the reports and the ack times (what the judgement lacks)."""
    last = pc.add(table["seq"], pc.subtract(table["count"], 1))  # a run's last seq
    by = table.append_column("last", last).group_by(["topic", "partition"]).aggregate([
        ("seq", "min"), ("last", "max"), ("count", "sum"), ("ack_time", "min"),
        ("last_ack_time", "max")]).sort_by([("topic", "ascending"), ("partition", "ascending")])
    return [{"producer_id": producer_id, "run_id": run_id, "topic": r["topic"],
             "partition": r["partition"], "first_seq": r["seq_min"], "last_seq": r["last_max"],
             "reports": r["count_sum"], "first_ack": r["ack_time_min"],
             "last_ack": r["last_ack_time_max"]} for r in by.to_pylist()]


def _folder_name(app_id: str) -> str:
    return app_id.replace("/", "_")


def recover_orphaned_spools(spool_root: Path, table_path: str, staged: bool = False) -> int:
    """Commit (or with ``staged``, hand over) the spool folders no live process holds (runs
    that crashed); return rows."""
    rows = 0
    if not spool_root.is_dir():
        return 0
    for folder in sorted(p for p in spool_root.iterdir() if (p / "app_id").is_file()):
        orphan = SpoolCommitter(table_path, folder, staged=staged)
        if not orphan.lock():
            continue  # a live ledger owns it
        try:
            rows += orphan.commit()
            if orphan.rows_written:
                print(f"ack ledger: recovered {orphan.reports_written} acks of crashed run "
                      f"{orphan.app_id} from {folder}", file=sys.stderr)
        finally:
            orphan.release()
    return rows


class AckLedger:
    """Buffers raw delivery reports and writes them to the ``acks`` table exactly once."""

    def __init__(self, table_path: str, spool_dir: Path, app_id: str, producer_id: str,
                 run_id: str, durability: Durability, flush_seconds: float = 1.0,
                 flush_rows: int = 50_000, staged: bool = False,
                 max_held_reports: int = 1_000_000) -> None:
        """``staged``: hand the segments over to the service's committer instead of
        committing them (:class:`SpoolCommitter`). ``max_held_reports``: while the spool
        cannot be written (a full disk), batches wait in memory, committed straight to the
        warehouse if it can be written; past this many delivery reports held, the oldest
        batches are dropped, counted (:attr:`dropped_reports`) and described
        (:attr:`unrecorded`)."""
        self.table_path = table_path
        self.staged = staged
        self.app_id = app_id
        self.producer_id = producer_id
        self.run_id = run_id
        self.durability = durability
        self.flush_seconds = flush_seconds
        self.flush_rows = flush_rows
        self.spool_root = private_dir(Path(spool_dir))
        check_table(table_path, "acks")  # another version's table: say so before producing
        self._spool = SpoolCommitter(table_path, self.spool_root / _folder_name(app_id), app_id,
                                     staged=staged)
        if not self._spool.lock():
            raise LedgerWriteError(f"another live ledger holds {self._spool.folder}")
        self.spool = self._spool.folder
        self._raw: deque[tuple] = deque()
        self._topics_written: set[str] = set()  # topics of the reports drained so far
        self._lock = threading.Lock()  # one drain at a time
        self._wake = threading.Event()
        self._stop = threading.Event()
        self._thread: threading.Thread | None = None
        self._next_version = self._spool.first_version()
        self.max_held_reports = max_held_reports
        #: batches no spool segment holds (its write failed), oldest first, with versions
        self._held: deque[tuple[int, pa.Table]] = deque()
        self.spool_failures = 0  # spool writes that failed (a full or broken disk)
        self.spool_error: str | None = None  # the last one's, until a spool write succeeds
        self.dropped_reports = 0  # delivery reports recorded nowhere: held too long, dropped
        #: what was dropped, a span per topic and partition of each dropped batch: the seqs
        #: (first, last) and ack times the judgement lacks
        self.unrecorded: list[dict] = []
        #: reports dropped in the current outage (None: none now; said at its first drop
        #: and at its end, when nothing is held any more)
        self._dropping: int | None = None

    @property
    def rows_written(self) -> int:
        return self._spool.rows_written

    @property
    def reports_written(self) -> int:
        return self._spool.reports_written

    @property
    def write_failures(self) -> int:
        return self._spool.write_failures

    @property
    def last_error(self) -> str | None:
        return self._spool.last_error

    # ---- hot path -----------------------------------------------------------------------
    def add(self, raw: tuple) -> None:
        """Called from the delivery callback: O(1), no I/O, no locks."""
        self._raw.append(raw)

    # ---- background writer -----------------------------------------------------------------
    def start(self) -> AckLedger:
        self._thread = threading.Thread(target=self._run, name=f"ack-ledger-{self.app_id}",
                                        daemon=True)
        self._thread.start()
        return self

    def _run(self) -> None:
        try:  # acks of earlier runs that crashed, off the producer's path
            recover_orphaned_spools(self.spool_root, self.table_path, self.staged)
        except Exception as exc:  # noqa: BLE001 - recovery is retried by the next ledger
            log.warning("recovering orphaned ack spools failed: %s", exc)
        # flush every flush_seconds, or sooner once flush_rows reports are waiting or the
        # newest report is of a topic this ledger has not written yet (the first acks of a
        # topic in the table at once: the audit reads a topic from when the ledger first
        # names it); the checks run here, off the delivery path (a deque's len and last
        # item are O(1))
        tick = min(self.flush_seconds, 0.1)
        last = time.monotonic() - NEW_TOPIC_GAP_SECONDS
        while not self._stop.is_set():
            self._wake.wait(tick)
            self._wake.clear()
            if len(self._raw) < self.flush_rows and not flush_due(
                    time.monotonic() - last, self.flush_seconds, self._new_topic_waits):
                continue
            last = time.monotonic()
            try:
                self.flush()
            except Exception as exc:  # noqa: BLE001 - the writer must outlive a bad flush
                log.exception("ack ledger flush failed: %s", exc)

    def _new_topic_waits(self) -> bool:
        """Whether the newest buffered report is of a topic no flush of this ledger has
        written (a sample: one look a tick, so a new topic's reports are found among an
        old one's in proportion to their share)."""
        try:
            return self._raw[-1][1] not in self._topics_written
        except IndexError:  # nothing buffered (or drained meanwhile)
            return False

    def spooled_segments(self) -> list[Path]:
        return self._spool.segments()

    @property
    def held_reports(self) -> int:
        """Delivery reports in batches waiting in memory (their spool write failed)."""
        return sum(_reports(t) for _, t in self._held)

    def flush(self) -> int:
        """Spool what is buffered, then commit every spooled segment; return rows committed.

        A batch whose spool write fails (a full disk) is held in memory, spooled again at
        the next flush, and while no segment waits before it, committed straight to the
        warehouse: a full spool disk costs the crash safety of those batches, not the
        batches. Past ``max_held_reports`` the oldest are dropped, counted and described."""
        with self._lock:
            batch = self._drain()
            if batch is not None and batch.num_rows:
                self._held.append((self._next_version, batch))
                self._next_version += 1
            self._spool_held()
            written = self._spool.commit()
            if self._held and not self._spool.segments():
                written += self._commit_held()
            self._bound_held(self.max_held_reports)
            if self._dropping is not None and not self._held:
                log.warning("ack ledger %s: recording again; %d delivery reports of this "
                            "outage were dropped (%d in all this run)", self.app_id,
                            self._dropping, self.dropped_reports)
                self._dropping = None
            return written

    def _spool_held(self) -> None:
        """Each held batch to its segment, oldest first; the first failure stops (order)."""
        while self._held:
            version, table = self._held[0]
            try:
                self._spool.spool(table, version)
            except OSError as exc:
                self.spool_failures += 1
                if self.spool_error is None:  # once an outage
                    print(f"ack ledger {self.app_id}: cannot write the spool {self.spool} "
                          f"({type(exc).__name__}: {exc}); acks held in memory and "
                          f"committed without it while the warehouse can be written",
                          file=sys.stderr)
                self.spool_error = f"{type(exc).__name__}: {exc}"
                return
            self._held.popleft()
            if self.spool_error is not None:
                print(f"ack ledger {self.app_id}: spool writable again", file=sys.stderr)
                self.spool_error = None

    def _commit_held(self) -> int:
        written = 0
        try:
            while self._held:
                version, table = self._held[0]
                written += self._spool.commit_table(table, version)
                self._held.popleft()
        except Exception as exc:  # noqa: BLE001 - held, said, retried at the next flush
            self._spool.note_failure(exc)
        return written

    def _bound_held(self, limit: int) -> None:
        """Drop the oldest held batches until at most ``limit`` reports are held."""
        held = self.held_reports
        while self._held and held > limit:
            _version, table = self._held.popleft()
            reports = _reports(table)
            held -= reports
            if self._dropping is None:  # the first drop of this outage
                log.error("ack ledger %s: neither the spool nor the warehouse can be written; "
                          "%d delivery reports dropped, counted (dropped_reports) and "
                          "described (unrecorded)", self.app_id, reports)
                self._dropping = 0
            self._dropping += reports
            self.dropped_reports += reports
            spans = unrecorded_spans(table, self.producer_id, self.run_id)
            self.unrecorded += spans
            told = (self._spool.notes or {}).get("unrecorded", [])
            self._spool.notes = {
                "app_id": self.app_id, "dropped_reports": self.dropped_reports,
                "unrecorded": told + [{**u, "first_ack": u["first_ack"].isoformat(),
                                       "last_ack": u["last_ack"].isoformat()} for u in spans]}

    def close(self, timeout: float = 30) -> None:
        """Stop the writer and flush; raise LedgerWriteError if segments remain unwritten."""
        self._stop.set()
        self._wake.set()
        if self._thread is not None:
            self._thread.join(timeout)
        deadline = time.monotonic() + timeout
        while True:
            self.flush()
            left = self.spooled_segments()
            if not left and not self._raw and not self._held:
                self._spool.release()
                return
            if time.monotonic() > deadline:
                self._spool.release()  # the next ledger under this spool root recovers it
                lost = ""
                if self._held:  # in memory only: gone with this process, counted first
                    self._bound_held(0)
                    lost = (f"; {self.dropped_reports} delivery reports could be recorded "
                            f"nowhere (spool: {self.spool_error})")
                raise LedgerWriteError(
                    f"{len(left)} ack segments remain spooled in {self.spool} "
                    f"(last error: {self.last_error}); they will be written on the next "
                    f"start{lost}")
            time.sleep(0.5)

    # ---- internals ----------------------------------------------------------------------
    def _drain(self) -> pa.Table | None:
        raw = self._raw
        items = []
        pop = raw.popleft
        try:
            while True:
                items.append(pop())
        except IndexError:
            pass
        if not items:
            return None
        table = self._to_table(items)
        # from the rows, whatever made them (a subclass's own _to_table: RabbitLedger)
        self._topics_written.update(pc.unique(table.column("topic")).to_pylist())
        return table

    def _to_table(self, items: list[tuple]) -> pa.Table:
        """Reports to ledger rows, one per run: consecutive seqs at consecutive offsets of
        one partition (or sharing one error). Column-wise: the per-report work stays in C."""
        # item: (seq, topic, partition, offset, err, latency_seconds, ack_epoch_seconds)
        n = len(items)
        seqs, topics, parts, offsets, errs, latencies, acked = zip(*items, strict=True)
        seq = np.fromiter(seqs, np.int64, n)
        ack_us = (np.fromiter(acked, np.float64, n) * 1e6).astype(np.int64)
        lat = np.fromiter((x or 0.0 for x in latencies), np.float64, n)
        send_us = ack_us - (lat * 1e6).astype(np.int64)
        part = np.fromiter((-1 if x is None else x for x in parts), np.int64, n)
        off = np.fromiter((-1 if x is None else x for x in offsets), np.int64, n)
        names = sorted(set(topics))
        topic_ix = (np.zeros(n, np.int64) if len(names) == 1
                    else np.fromiter(map({t: i for i, t in enumerate(names)}.get, topics),
                                     np.int64, n))
        code = np.full(n, np.iinfo(np.int32).min, np.int64)  # no error
        err_name: dict[int, str] = {}
        for i, e in enumerate(errs):
            if e is not None:
                code[i] = e.code()
                err_name[int(code[i])] = e.name()
        order = np.lexsort((seq, code, part, topic_ix))
        seq, part, off, code, topic_ix = seq[order], part[order], off[order], code[order], \
            topic_ix[order]
        ack_us, send_us = ack_us[order], send_us[order]
        ok = code == np.iinfo(np.int32).min
        starts = np.ones(n, bool)
        starts[1:] = ((topic_ix[1:] != topic_ix[:-1]) | (part[1:] != part[:-1])
                      | (code[1:] != code[:-1]) | (seq[1:] != seq[:-1] + 1)
                      | (ok[1:] & (off[1:] != off[:-1] + 1)))
        first = np.flatnonzero(starts)
        count = np.diff(np.append(first, n))
        run_ok = ok[first]
        run_code = code[first]
        m = len(first)
        ts = pa.timestamp("us", tz="UTC")
        acks, idem, retries, inflight = self.durability
        cols: dict[str, Any] = {
            "run_id": pa.repeat(pa.scalar(self.run_id, pa.string()), m),
            "producer_id": pa.repeat(pa.scalar(self.producer_id, pa.string()), m),
            "seq": pa.array(seq[first], pa.int64()),
            "count": pa.array(count, pa.int64()),
            "topic": pa.array([names[i] for i in topic_ix[first]], pa.string()),
            "partition": pa.array(part[first], pa.int32()),
            "offset": pa.array(off[first], pa.int64(), mask=~run_ok | (off[first] < 0)),
            "send_time": pa.array(np.minimum.reduceat(send_us, first), pa.int64()).cast(ts),
            "ack_time": pa.array(np.minimum.reduceat(ack_us, first), pa.int64()).cast(ts),
            "last_ack_time": pa.array(np.maximum.reduceat(ack_us, first), pa.int64()).cast(ts),
            "error_code": pa.array(run_code, pa.int32(), mask=run_ok),
            "error_name": pa.array([None if k else err_name[int(c)]
                                    for k, c in zip(run_ok, run_code, strict=True)], pa.string()),
            "acks": pa.repeat(pa.scalar(acks, pa.string()), m),
            "idempotence": pa.repeat(pa.scalar(idem, pa.bool_()), m),
            "retries": pa.repeat(pa.scalar(retries, pa.int32()), m),
            "max_in_flight": pa.repeat(pa.scalar(inflight, pa.int32()), m),
            # librdkafka gives a produced message no leader epoch (consumers only), and
            # confluent-kafka's reports do not name the broker
            "leader_epoch": pa.nulls(m, pa.int32()),
            "broker": pa.nulls(m, pa.int32()),
            "system": pa.repeat(pa.scalar(KAFKA, pa.string()), m),
        }
        return pa.Table.from_pydict(cols, schema=_SCHEMA)
