"""The ledger shipper: the native plugin's spool folders into the Delta ``acks`` table,
exactly once.

The plugin (``producers/plugin/kaudit.c``) records each producer run's delivery reports
as *runs* in memory-mapped segment files of a spool folder
(``<kaudit.spool.dir>/<producer>_<run>/``). The shipper turns them into rows of the
``acks`` table, the same rows the pure-Python ledger (``producers/ledger.py``) writes:
one row per run, the producer's durability settings on each. It runs as a thread of
``AuditedProducer`` (:class:`NativeShipper`) and as ``kafka-audit ship``
(:func:`ship_spools`) for producers in other languages.

A ship of one folder (:class:`FolderShipper`), holding the folder's ship lock
(``ship/.lock``: one shipper at a time):

1. **close**: while the producer lives (it holds ``.lock``), ask the plugin to close its
   open runs (``SpoolState.request_close``: a run grows while reports come in, a closed
   one never changes); once the producer is gone, every run is final;
2. **cut**: the closed runs after the *cursor* (segment, slot) become one Arrow batch,
   written to ``ship/<version>.arrow`` (fsynced, renamed into place) with its end cursor
   in the file's metadata; then the cursor and the next version go to ``ship/cursor.json``
   (fsynced, renamed);
3. **commit**: every batch file is appended to ``acks`` as the idempotent Delta
   transaction ``(producer/run, version)`` (``SpoolCommitter``, the pure-Python ledger's
   committer), then deleted; segments wholly behind the cursor are deleted; a folder whose
   producer is gone and whose every run is committed is removed.

So a crash anywhere ships nothing twice and loses nothing: a batch file written before
its cursor is found again by its metadata; one committed before its deletion is skipped
(its version is in the table's transaction log); the spool itself is in the page cache
from the moment the plugin recorded a report, so a producer killed with SIGKILL loses no
report: the next shipper commits its folder.

:func:`read_segment`, :func:`closed_prefix` and :func:`runs_to_table` are the pure parts
(``tests/unit/test_plugin_shipper.py``).
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
from dataclasses import dataclass
from datetime import UTC, datetime
from pathlib import Path

import numpy as np
import pyarrow as pa
import pyarrow.ipc as ipc

from kafka_audit.errors import AuditorError, LedgerWriteError
from kafka_audit.producers.ledger import (
    NEW_TOPIC_GAP_SECONDS,
    SpoolCommitter,
    flush_due,
    private_dir,
    private_file,
)
from kafka_audit.producers.native import SpoolState
from kafka_audit.schemas.policy import Durability
from kafka_audit.schemas.systems import KAFKA
from kafka_audit.schemas.tables import LEDGER_NOTES, arrow_schema
from kafka_audit.store import check_table

__all__ = ["RECORD", "RECORD_V1", "FORMS", "SEGMENT_HEADER", "Meta", "Cursor", "SpoolError",
           "read_meta", "read_topics", "read_segment", "closed_prefix", "runs_to_table",
           "FolderShipper", "NativeShipper", "ShipReport", "ship_spools"]

log = logging.getLogger(__name__)
_SCHEMA = arrow_schema("acks")

#: one run record of a segment of the first form (``KAUDSEG1``: plugins before the broker
#: and the leader epoch were recorded), 64 bytes, little-endian; still shipped
RECORD_V1 = np.dtype([("kind", "<u2"), ("flags", "<u2"), ("topic", "<i4"),
                      ("partition", "<i4"), ("err", "<i4"), ("seq", "<i8"), ("offset", "<i8"),
                      ("count", "<i8"), ("first_ack_us", "<i8"), ("last_ack_us", "<i8"),
                      ("send_min_us", "<i8")])
#: one run record (``struct krec`` in kaudit.c, ``KAUDSEG2``): the first form, then the
#: broker that acknowledged the run and its leader epoch (-1: not known), 80 bytes
RECORD = np.dtype(RECORD_V1.descr + [("broker", "<i4"), ("leader_epoch", "<i4"),
                                     ("reserved", "<i8")])
#: each segment form's magic and its record
FORMS = {b"KAUDSEG1": RECORD_V1, b"KAUDSEG2": RECORD}
#: a segment's header (``struct kseg``): 64 bytes
SEGMENT_HEADER = np.dtype([("magic", "S8"), ("rec_size", "<u4"), ("capacity", "<u4"),
                           ("segno", "<u4"), ("used", "<u4"), ("sealed", "<u4"),
                           ("pad", "<u4", (9,))])
KIND_RUN = 1
FLAG_CLOSED = 1
_CURSOR_KEY = b"kaudit.cursor"


class SpoolError(AuditorError):
    """Raised when a spool folder is not what the plugin writes (damaged, another format)."""

    code = "spool"


@dataclass(frozen=True)
class Meta:
    """A spool folder's ``meta``: whose reports they are and the settings behind them."""

    producer_id: str
    run_id: str
    durability: Durability
    librdkafka: str
    stamp_version: int

    @property
    def app_id(self) -> str:
        return f"{self.producer_id}/{self.run_id}"


@dataclass(frozen=True, order=True)
class Cursor:
    """Everything before (segment, slot) is shipped, and the first ``drops`` of the
    plugin's drop spans are reported (both only grow)."""

    segment: int = 1
    slot: int = 0
    drops: int = 0

    def encode(self) -> bytes:
        return f"{self.segment}:{self.slot}:{self.drops}".encode()

    @classmethod
    def decode(cls, raw: bytes) -> Cursor:
        return cls(*(int(x) for x in raw.decode().split(":")))  # a 2-part one: drops 0


def read_meta(folder: Path) -> Meta:
    try:
        lines = (Path(folder) / "meta").read_text().splitlines()
    except OSError as exc:
        raise SpoolError(f"{folder}: no meta ({exc.strerror})") from None
    kv = dict(line.split("=", 1) for line in lines if "=" in line)
    try:
        acks = kv["acks"]
        return Meta(bytes.fromhex(kv["producer_id_hex"]).decode(),
                    bytes.fromhex(kv["run_id_hex"]).decode(),
                    Durability(acks, kv["idempotence"] == "true", int(kv["retries"]),
                               int(kv["max_in_flight"])),
                    kv.get("librdkafka", "?"), int(kv.get("stamp_version", "2")))
    except (KeyError, ValueError) as exc:
        raise SpoolError(f"{folder}/meta is not a kaudit meta file ({exc})") from None


def read_topics(folder: Path) -> dict[int, str]:
    """The topics file: ``index<TAB>name`` lines (a line cut by a crash is ignored: no run
    can name its index, the name is written before any)."""
    out: dict[int, str] = {}
    path = Path(folder) / "topics"
    if not path.exists():
        return out
    for line in path.read_text().split("\n"):
        idx, sep, name = line.partition("\t")
        if sep and idx.isdigit() and name:
            out[int(idx)] = name
    return out


def read_segment(path: Path) -> tuple[np.void, np.ndarray]:
    """A segment's header and its published records (``used`` of them)."""
    with open(path, "rb") as f:
        head = f.read(SEGMENT_HEADER.itemsize)
        if len(head) < SEGMENT_HEADER.itemsize:
            raise SpoolError(f"{path}: truncated segment header")
        header = np.frombuffer(head, SEGMENT_HEADER)[0]
        form = FORMS.get(bytes(header["magic"]))
        if form is None or header["rec_size"] != form.itemsize:
            raise SpoolError(f"{path}: not a kaudit segment")
        used = int(header["used"])
        body = f.read(used * form.itemsize)
    records = np.frombuffer(body, form, len(body) // form.itemsize)
    if form is RECORD:
        return header, records
    newer = np.zeros(len(records), RECORD)  # the first form: broker and epoch unknown
    for name in RECORD_V1.names:
        newer[name] = records[name]
    newer["broker"] = newer["leader_epoch"] = -1
    return header, newer


def closed_prefix(records: np.ndarray, start: int, final: bool) -> int:
    """The end of the shippable records from ``start``: every record when ``final`` (the
    producer is gone, nothing changes), else up to the first one still open."""
    if final:
        return len(records)
    open_ = np.flatnonzero((records["flags"][start:] & FLAG_CLOSED) == 0)
    return start + int(open_[0]) if len(open_) else len(records)


def runs_to_table(records: np.ndarray, topics: dict[int, str], meta: Meta) -> pa.Table:
    """Run records to rows of the ``acks`` table (the pure-Python ledger's rows)."""
    from confluent_kafka import KafkaError

    records = records[records["kind"] == KIND_RUN]
    m = len(records)
    missing = set(np.unique(records["topic"]).tolist()) - set(topics)
    if missing:
        raise SpoolError(f"runs name topic indexes {sorted(missing)} the topics file lacks")
    ok = records["err"] == 0
    offsets = records["offset"]
    ts = pa.timestamp("us", tz="UTC")
    acks, idem, retries, inflight = meta.durability
    names = {int(e): KafkaError(int(e)).name() for e in np.unique(records["err"]) if e}
    cols = {
        "run_id": pa.repeat(pa.scalar(meta.run_id, pa.string()), m),
        "producer_id": pa.repeat(pa.scalar(meta.producer_id, pa.string()), m),
        "seq": pa.array(records["seq"], pa.int64()),
        "count": pa.array(records["count"], pa.int64()),
        "topic": pa.array([topics[int(t)] for t in records["topic"]], pa.string()),
        "partition": pa.array(records["partition"], pa.int32()),
        "offset": pa.array(offsets, pa.int64(), mask=~ok | (offsets < 0)),
        "send_time": pa.array(records["send_min_us"], pa.int64()).cast(ts),
        "ack_time": pa.array(records["first_ack_us"], pa.int64()).cast(ts),
        "last_ack_time": pa.array(records["last_ack_us"], pa.int64()).cast(ts),
        "error_code": pa.array(records["err"], pa.int32(), mask=ok),
        "error_name": pa.array([names.get(int(e)) for e in records["err"]], pa.string()),
        "acks": pa.repeat(pa.scalar(acks, pa.string()), m),
        "idempotence": pa.repeat(pa.scalar(idem, pa.bool_()), m),
        "retries": pa.repeat(pa.scalar(min(retries, 2**31 - 1), pa.int32()), m),
        "max_in_flight": pa.repeat(pa.scalar(min(inflight, 2**31 - 1), pa.int32()), m),
        "leader_epoch": pa.array(records["leader_epoch"], pa.int32(),
                                 mask=records["leader_epoch"] < 0),
        "broker": pa.array(records["broker"], pa.int32(), mask=records["broker"] < 0),
        "system": pa.repeat(pa.scalar(KAFKA, pa.string()), m),
    }
    return pa.Table.from_pydict(cols, schema=_SCHEMA)


def _iso(us: int) -> str:
    return datetime.fromtimestamp(us / 1e6, UTC).isoformat()


def _fsync_write(path: Path, data: bytes) -> None:
    tmp = path.with_name(path.name + ".tmp")
    with os.fdopen(private_file(tmp), "wb") as f:
        f.write(data)
        f.flush()
        os.fsync(f.fileno())
    os.replace(tmp, path)


class FolderShipper:
    """Ships one spool folder (module docstring). ``acquire()`` first: one shipper at a
    time per folder."""

    def __init__(self, folder: Path, table_path: str, staged: bool = False) -> None:
        """``staged``: hand the batches over to the service's committer (SpoolCommitter)."""
        self.folder = Path(folder)
        self.table_path = table_path
        self.meta = read_meta(self.folder)
        self.app_id = self.meta.app_id
        self.committer = SpoolCommitter(table_path, self.folder / "ship", self.app_id,
                                        staged=staged)
        self._state: SpoolState | None = None
        self.finished = False  # the producer is gone and every report is committed
        self.reports_cut = 0
        self.spool_error: str | None = None  # the last batch file write's, until one works

    @property
    def state(self) -> SpoolState:
        if self._state is None:
            self._state = SpoolState(self.folder)
        return self._state

    # ---- ownership ----------------------------------------------------------------------
    def acquire(self) -> bool:
        return self.committer.lock()

    def release(self) -> None:
        if self._state is not None:
            self._state.close()
            self._state = None
        self.committer.release(remove_if_empty=False)

    def producer_alive(self) -> bool:
        """Whether the producing process still holds the folder (``.lock``)."""
        if not self.folder.is_dir():
            return False
        fd = private_file(self.folder / ".lock", os.O_RDWR)
        try:
            fcntl.flock(fd, fcntl.LOCK_EX | fcntl.LOCK_NB)
        except BlockingIOError:
            return True
        finally:
            os.close(fd)  # closing drops the lock if this process took it
        return False

    # ---- the cursor ---------------------------------------------------------------------
    def _cursor_file(self) -> Path:
        return self.committer.folder / "cursor.json"

    def cursor(self) -> tuple[Cursor, int]:
        """The shipped position and the next batch version (module docstring, step 2)."""
        cur, version = Cursor(), 0
        path = self._cursor_file()
        if path.exists():
            saved = json.loads(path.read_text())
            cur, version = (Cursor(saved["segment"], saved["slot"], saved.get("drops", 0)),
                            saved["next_version"])
        for seg in self.committer.segments():  # batch files cut after the cursor was saved
            with pa.memory_map(str(seg)) as src:
                meta = ipc.open_file(src).schema.metadata or {}
            if _CURSOR_KEY in meta:
                cur = max(cur, Cursor.decode(meta[_CURSOR_KEY]))
        return cur, max(version, self.committer.first_version())

    def _segments(self) -> list[Path]:
        return sorted(self.folder.glob("*.seg"))

    # ---- one ship -----------------------------------------------------------------------
    def cut(self, close_timeout: float = 1.0) -> int:
        """Steps 1 and 2: the closed runs after the cursor into one batch file; its rows."""
        final = not self.producer_alive()
        if not final:
            self.state.request_close(close_timeout)
        start, version = self.cursor()
        cur = start
        topics: dict[int, str] | None = None
        parts: list[np.ndarray] = []
        for path in self._segments():
            segno = int(path.stem)
            if segno < cur.segment:
                continue
            header, records = read_segment(path)
            if segno > cur.segment:
                cur = Cursor(segno, 0, cur.drops)
            end = closed_prefix(records, cur.slot, final)
            if end > cur.slot:
                # read again: a record's bytes must be the same twice (copies are not atomic)
                _, again = read_segment(path)
                while not np.array_equal(records[cur.slot:end], again[cur.slot:end]):
                    records, (_, again) = again, read_segment(path)
                parts.append(records[cur.slot:end].copy())
            cur = Cursor(segno, end, cur.drops)
            if end < len(records) or not (final or header["sealed"]):
                break  # an open run here, or the producer may still add to this segment
        spans = self.state.drop_spans(include_open=final)[start.drops:]
        cur = Cursor(cur.segment, cur.slot, start.drops + len(spans))
        if cur == start:
            return 0
        runs = np.concatenate(parts) if parts else np.empty(0, RECORD)
        if len(runs) or spans:
            meta = {_CURSOR_KEY: cur.encode()}
            if spans:  # said once: the batch and the cursor carry how many were reported
                meta[LEDGER_NOTES.encode()] = json.dumps(self._drop_note(spans)).encode()
            topics = read_topics(self.folder) if len(runs) else {}
            table = runs_to_table(runs, topics, self.meta).replace_schema_metadata(meta)
            self.committer.spool(table, version)
            version += 1
            self.reports_cut += int(runs["count"].sum())
            self._say_drops(spans)
        _fsync_write(self._cursor_file(), json.dumps(
            {"segment": cur.segment, "slot": cur.slot, "drops": cur.drops,
             "next_version": version}).encode())
        return len(runs)

    def _drop_note(self, spans: list[dict]) -> dict:
        """The ledger's note (``schemas/tables.LEDGER_NOTES``) of the plugin's drop spans:
        the delivery reports it could not record."""
        state = self.state
        return {"app_id": self.app_id, "dropped_reports": state.dropped,
                "unspanned": state.unspanned, "unrecorded": [{
                    "producer_id": self.meta.producer_id, "run_id": self.meta.run_id,
                    "topic": d["topic"], "partition": d["partition"],
                    "first_seq": d["first_seq"], "last_seq": d["last_seq"],
                    "reports": d["reports"], "first_ack": _iso(d["first_us"]),
                    "last_ack": _iso(d["last_us"])} for d in spans]}

    def _say_drops(self, spans: list[dict]) -> None:
        """A line per drop span handed to the ledger (once: its batch is spooled)."""
        state = self.state
        for d in spans:
            log.error("kaudit plugin %s could not record %d delivery reports of %s/%d "
                      "(seqs %d-%d): its spool's disk was full; reported as unrecorded",
                      self.app_id, d["reports"], d["topic"], d["partition"], d["first_seq"],
                      d["last_seq"])
        if state.unspanned:
            log.error("kaudit plugin %s: %d dropped delivery reports fit no drop span (16 a "
                      "run): counted in dropped_reports only", self.app_id, state.unspanned)

    def ship(self, close_timeout: float = 1.0) -> int:
        """Close, cut and commit (module docstring); return rows committed. Delivery
        reports stay spooled when the table cannot be written (said on stderr, retried)."""
        final = not self.producer_alive()
        try:
            self.cut(close_timeout)
        except OSError as exc:  # its disk full: the runs wait in the plugin's segments
            if self.spool_error is None:
                print(f"ack shipper {self.app_id}: cannot write its batch files in "
                      f"{self.committer.folder} ({type(exc).__name__}: {exc}); the delivery "
                      f"reports wait in the plugin's segments", file=sys.stderr)
            self.spool_error = f"{type(exc).__name__}: {exc}"
        else:
            if self.spool_error is not None:
                print(f"ack shipper {self.app_id}: batch files writable again",
                      file=sys.stderr)
                self.spool_error = None
        rows = self.committer.commit()
        cur, _ = self.cursor()
        for path in self._segments():
            if int(path.stem) < cur.segment:
                path.unlink()  # wholly behind a saved cursor
        if final and not self.committer.segments() and self._all_shipped(cur):
            self.finished = True
            if self._state is not None:
                self._state.close()
                self._state = None
            shutil.rmtree(self.folder, ignore_errors=True)
        return rows

    def _all_shipped(self, cur: Cursor) -> bool:
        segments = self._segments()
        if not segments:
            return True
        last = segments[-1]
        if int(last.stem) != cur.segment:
            return int(last.stem) < cur.segment
        _, records = read_segment(last)
        return cur.slot >= len(records)

    @property
    def rows_written(self) -> int:
        return self.committer.rows_written

    @property
    def reports_written(self) -> int:
        return self.committer.reports_written


@dataclass
class ShipReport:
    folders: int = 0  # spool folders looked at
    busy: int = 0  # folders another shipper holds
    rows: int = 0  # rows committed
    reports: int = 0  # delivery reports those rows stand for
    finished: int = 0  # folders whose producer is gone and whose reports are all committed
    failed: int = 0  # folders that could not be shipped (kept; said on stderr)

    def line(self) -> str:
        return (f"shipped {self.rows} ledger rows ({self.reports} delivery reports) from "
                f"{self.folders} spool folders; {self.finished} finished and removed, "
                f"{self.busy} busy, {self.failed} failed")


def ship_spools(root: Path, table_path: str, only_dead: bool = False,
                skip: tuple[Path, ...] = (), staged: bool = False) -> ShipReport:
    """Ship every spool folder under ``root`` that no other shipper holds (``only_dead``:
    only those whose producer is gone, as a starting producer recovers crashed runs;
    ``staged``: hand them over to the service's committer)."""
    report = ShipReport()
    root = Path(root)
    if not root.is_dir():
        return report
    private_dir(root)  # a root others may write could hold forged acks: refused
    check_table(table_path, "acks")
    for folder in sorted(p for p in root.iterdir() if (p / "meta").is_file()):
        if folder in skip:
            continue
        report.folders += 1
        try:
            shipper = FolderShipper(folder, table_path, staged)
        except SpoolError as exc:
            report.failed += 1
            print(f"kafka-audit ship: {exc}", file=sys.stderr)
            continue
        if only_dead and shipper.producer_alive():
            continue
        if not shipper.acquire():
            report.busy += 1
            continue
        try:
            report.rows += shipper.ship()
            report.reports += shipper.reports_written
            report.finished += shipper.finished
            if shipper.committer.last_error is not None:
                report.failed += 1
        except (SpoolError, OSError) as exc:
            report.failed += 1
            print(f"kafka-audit ship: {folder}: {exc}", file=sys.stderr)
        finally:
            shipper.release()
    return report


class NativeShipper:
    """``AuditedProducer``'s shipper thread for its own spool folder: ships every
    ``flush_seconds``; first recovers the folders of crashed runs under the same root.
    The surface of ``AckLedger``.

    Unlike the Python ledger it does not ship early once many reports wait: they wait on
    disk, in the spool, not in memory, and each ship is a Delta commit that costs the
    producing process the same CPU however few runs it carries (shipping every 50,000
    reports cost a producer at 500,000 msg/s about 0.8 us a message: bench/README.md).
    As the Python ledger, it ships at once (at most every quarter second) when the
    plugin's ``topics`` file has grown since the last ship, the plugin having met a topic
    new to it: the audit reads a topic from when the ledger first names it."""

    def __init__(self, table_path: str, folder: Path, flush_seconds: float = 1.0,
                 staged: bool = False) -> None:
        self.table_path = table_path
        self.staged = staged
        self.folder = Path(folder)
        self.spool = self.folder
        self.flush_seconds = flush_seconds
        check_table(table_path, "acks")
        self._shipper = FolderShipper(self.folder, table_path, staged)
        if not self._shipper.acquire():
            raise LedgerWriteError(f"another shipper holds {self.folder}")
        self._lock = threading.Lock()
        self._stop = threading.Event()
        self._thread: threading.Thread | None = None
        self.recovered = 0
        self._topics_shipped = 0  # the topics file's size when the last ship began

    @property
    def rows_written(self) -> int:
        return self._shipper.rows_written

    @property
    def reports_written(self) -> int:
        return self._shipper.reports_written

    @property
    def write_failures(self) -> int:
        return self._shipper.committer.write_failures

    @property
    def last_error(self) -> str | None:
        return self._shipper.committer.last_error

    def spooled_segments(self) -> list[Path]:
        """Batch files cut but not committed yet."""
        return self._shipper.committer.segments()

    def start(self) -> NativeShipper:
        self._thread = threading.Thread(target=self._run, name=f"ack-shipper-{self.folder.name}",
                                        daemon=True)
        self._thread.start()
        return self

    def _run(self) -> None:
        try:  # runs of crashed producers under the same root, off the producer's path
            self.recovered = ship_spools(self.folder.parent, self.table_path, only_dead=True,
                                         skip=(self.folder,), staged=self.staged).reports
        except Exception as exc:  # noqa: BLE001 - the next producer or `ship` retries
            log.warning("shipping orphaned ack spools failed: %s", exc)
        # ship every flush_seconds, or within a quarter second of a topic's first report
        # (a stat of the topics file a tick: the plugin appends a line at each new topic)
        tick = min(self.flush_seconds, 0.1)
        last = time.monotonic() - NEW_TOPIC_GAP_SECONDS
        while not self._stop.wait(tick):
            if not flush_due(time.monotonic() - last, self.flush_seconds,
                             self._new_topic_waits):
                continue
            last = time.monotonic()
            try:
                self.flush()
            except Exception as exc:  # noqa: BLE001 - the thread must outlive a bad ship
                log.exception("ack shipper failed: %s", exc)

    def _topics_size(self) -> int:
        try:
            return (self.folder / "topics").stat().st_size
        except OSError:  # not there yet, or the folder shipped and removed
            return 0

    def _new_topic_waits(self) -> bool:
        """Whether the plugin named a topic since the last ship began."""
        return self._topics_size() > self._topics_shipped

    def flush(self) -> int:
        """Ship now: every report recorded so far is committed (unless the table cannot be
        written); return rows committed."""
        with self._lock:
            if self._shipper.finished:
                return 0
            # read first: a topic the plugin names during this ship makes the next one early
            self._topics_shipped = self._topics_size()
            return self._shipper.ship()

    def close(self, timeout: float = 30) -> None:
        """Stop the thread and ship the rest (the producer should be closed first, so the
        folder is final); raise LedgerWriteError if batches remain uncommitted."""
        self._stop.set()
        if self._thread is not None:
            self._thread.join(timeout)
        deadline = time.monotonic() + timeout
        try:
            while True:
                self.flush()
                left = self.spooled_segments() if not self._shipper.finished else []
                if not left and (self._shipper.finished or self._shipper.producer_alive()):
                    return
                if time.monotonic() > deadline:
                    raise LedgerWriteError(
                        f"{len(left)} ack batches remain spooled in {self.folder} (last error: "
                        f"{self.last_error}); `kafka-audit ship` or the next producer "
                        "commits them")
                time.sleep(0.5)
        finally:
            self._shipper.release()
