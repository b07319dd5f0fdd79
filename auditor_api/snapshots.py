"""Table snapshots kept between requests: each Delta table read once per version.

The API answers from Arrow copies of the warehouse's tables held in memory, one
per table, each tagged with the Delta version it stands for:

* **is it current?** Two ``stat`` calls a table a request: the commit file after
  the held version (``_delta_log/<v+1>.json``) must be absent and the held one
  present. No log replay, no listing, whatever the table's history;
* **a new version** is found in the commit files after the held one
  (``store.appends_by_commit``): when they only appended files (the ledger, the
  consumed runs, the events, findings), only those files are read and their rows
  appended to the held copy; a compaction changes no row, so nothing is read; anything
  else (an overwrite, a delete, a missing commit file) reads the table again with
  delta-rs. The cost of a new version is its own files', whatever the table's size
  and file count;
* **running aggregates** (:class:`Fold`: the totals behind ``/v1/summary``) are updated
  with the appended rows only;
* **derived values** (sorted findings, per-topic totals, per-partition indexes)
  are memoized by the versions of the tables they come from: a repeated query
  costs a dictionary lookup and the filter of an in-memory table.

Readers get immutable values (an Arrow table and its version): a reload swaps
them under a lock, requests running meanwhile keep the ones they took. **Nobody waits
on a reload:** while one request reads a table's new version (or computes a derived
value anew), the others answer from the version held, never older than one they
were given before; such an answer is marked (:func:`answering_stale`) so that the
response cache does not keep it under the newer version.
"""

from __future__ import annotations

import contextvars
import logging
import os
import threading
import time
from bisect import bisect_right
from collections import OrderedDict
from collections.abc import Callable, Collection, Iterable, Iterator, Mapping
from dataclasses import dataclass, field
from typing import Any

import pyarrow as pa

from kafka_audit.schemas.tables import TABLES, arrow_schema
from kafka_audit.store import (
    AppendedRows,
    appends_by_commit,
    check_table,
    conform,
    probe_version,
    read_file,
    read_table,
    table_dataset,
    table_exists,
    table_state,
)

__all__ = ["Fold", "Snapshot", "Snapshots", "answering_stale"]

log = logging.getLogger(__name__)

#: per request (the response cache sets it): a list that gets True when an answer was
#: computed from a version held while a newer one was being read
_STALE: contextvars.ContextVar[list[bool] | None] = contextvars.ContextVar(
    "kafka_audit_stale", default=None)


def answering_stale() -> list[bool]:
    """Start watching the current request: the returned flag turns True when it is
    answered from a table version held while a newer one was being read."""
    flag = [False]
    _STALE.set(flag)
    return flag


def _stale() -> None:
    flag = _STALE.get()
    if flag is not None:
        flag[0] = True

#: versions whose rows :meth:`Snapshots.as_of` finds without reading (a prefix each)
_MAX_MARKS = 4096
#: rows folded at once when a table whose rows are not all held is read whole
_FOLD_ROWS = 262_144
#: filtered row sets kept up to date by :meth:`Snapshots.rows_of` (the least recent goes)
_MAX_ROW_SETS = 16
#: derived values kept at most (they are per query shape: topics, partitions, versions)
_MAX_MEMO = 4096
#: what the derived Arrow tables kept weigh at most in all (the oldest go first): a listing
#: per filter is a sorted copy of the findings it matches, and a client varying a filter
#: (``since`` a microsecond later each time) would otherwise keep _MAX_MEMO such copies
_MAX_MEMO_BYTES = 256 << 20


@dataclass(frozen=True)
class Fold:
    """A running aggregate of one table's rows, kept by the snapshots beside each version.

    ``add(state, rows, version)`` returns the state with ``rows`` (those the commit
    ``version`` appended, or the whole table read at ``version``) taken in, without
    changing ``state`` (requests may hold it). An append folds only its new rows; any
    other change (a delete, an overwrite) folds the table anew from ``empty()``: the
    answer costs the same whatever the table's size."""

    name: str
    table: str
    empty: Callable[[], Any]
    add: Callable[[Any, pa.Table, int], Any]


@dataclass(frozen=True)
class Snapshot:
    """One table as of ``version`` (-1: the table does not exist: ``data`` is empty).

    ``marks``: (version, rows held through it) for the versions since the table was last
    read whole (the latest :data:`_MAX_MARKS`): appends only add rows at the end, so the
    table as of such a version is a prefix of ``data`` (:meth:`Snapshots.as_of`).
    ``folds``: each :class:`Fold` of this table, as of ``version``. ``data`` is None for a
    table the snapshots fold without holding its rows (``unheld``)."""

    name: str
    version: int
    data: pa.Table | None  # None: a table whose rows are not held (folded only)
    marks: tuple[tuple[int, int], ...] = ()
    folds: Mapping[str, Any] = field(default_factory=dict)
    segments: tuple[pa.Table, ...] = ()  # ``data`` in one-chunk pieces (:func:`_merged`)
    #: the last retention round this version committed (its folds hold what it dropped)
    retention_round: int = 0


class _Held:
    def __init__(self, name: str, folds: tuple[Fold, ...], held: bool) -> None:
        self.lock = threading.Lock()
        self.snapshot = _absent(name, folds, held)
        self.loaded = False  # read at least once: until then there is nothing to serve


def _absent(name: str, folds: tuple[Fold, ...] = (), held: bool = True) -> Snapshot:
    data = conform(arrow_schema(name).empty_table(), arrow_schema(name)) if name in TABLES \
        else pa.table({})
    return Snapshot(name, -1, data if held else None, (), {f.name: f.empty() for f in folds})


class Snapshots:
    """Every table of one warehouse, as of its latest version, kept between requests."""

    def __init__(self, table_path: Callable[[str], str],
                 keep: dict[str, Any] | None = None, folds: tuple[Fold, ...] = (),
                 columns: dict[str, list[str]] | None = None,
                 unheld: Collection[str] = (), spooled: Collection[str] = (),
                 spool_dir: str | os.PathLike | None = None,
                 recheck_seconds: float = 0.0,
                 seed: Callable[[str, int], pa.Table | None] | None = None) -> None:
        """``keep``: per table, a filter (a pyarrow expression) on the rows held: the rest is
        never read (``audit_hot``: its progress rows, not the audit's whole state).
        ``folds``: the running aggregates kept per table (:class:`Fold`). ``columns``: per
        table, the only columns read (the others are held as nulls). ``unheld``: tables whose
        rows are folded and let go (the ledger and the consumed stream grow with every
        write: a copy in memory grows with the hours the API runs); their snapshots carry
        the version and the folds, ``data`` is None, and their rows are read from the
        table when asked (:meth:`read`, :meth:`rows_of`). ``spooled``: tables whose rows
        are held in files under ``spool_dir``, mapped into memory, not on the heap
        (:class:`_Spool`: the findings, whose rows grow with the writes judged).
        ``recheck_seconds``: a table's newest version, once probed, answers for this long
        (:meth:`_probe`; 0: every request probes, as on local disk). ``seed(name, round)``:
        rows a table's folds start from when it is read whole, given the last retention
        round its version committed (the sums of the rows retention dropped, as rows of the
        table: ``rollups.as_table_rows``); None: none."""
        self._table_path = table_path
        self._seed = seed
        self._spooled = frozenset(spooled)
        self._spool = None
        if self._spooled and spool_dir is not None:
            try:
                self._spool = _Spool(spool_dir)
            except OSError as exc:  # a read-only home: held on the heap, as before
                log.warning("the findings are held on the heap: no spool at %s (%s)",
                            spool_dir, exc)
        self._paths: dict[str, str] = {}
        self._keep = keep or {}
        self._columns = columns or {}
        self._unheld = frozenset(unheld)
        self._folds: dict[str, tuple[Fold, ...]] = {}
        for f in folds:
            self._folds[f.table] = (*self._folds.get(f.table, ()), f)
        self._fold_table = {f.name: f.table for f in folds}
        self._held: dict[str, _Held] = {}
        self._row_sets: OrderedDict[tuple, tuple[threading.Lock, AppendedRows]] = OrderedDict()
        self._seen: dict[str, int] = {}  # versions seen by version(), to probe from
        self._recheck = recheck_seconds
        self._probed: dict[str, tuple[float, int | None]] = {}  # name -> (when, version)
        self._probing: dict[str, threading.Lock] = {}
        self.probes = 0  # probes of the warehouse: for tests
        self._lock = threading.Lock()
        self._memo: dict[Any, tuple[tuple, Any]] = {}
        self._weights: dict[Any, int] = {}  # key -> bytes of a memoized Arrow table
        self.memo_bytes = 0
        self._families: dict[Any, OrderedDict] = {}  # family -> its keys, the oldest first
        self._memo_lock = threading.Lock()
        self._computing: dict[Any, threading.Lock] = {}
        self._kept: dict[Any, Any] = {}
        self.loads = 0  # full table reads: for tests and the benchmark
        self.appends = 0  # incremental reads of appended files

    def _path(self, name: str) -> str:
        """The table's directory, asked of ``table_path`` once: it resolves the home, a
        dozen system calls, and every request asks for every table's version."""
        path = self._paths.get(name)
        if path is None:
            path = self._paths[name] = self._table_path(name)
        return path

    def _entry(self, name: str) -> _Held:
        held = self._held.get(name)
        if held is None:
            with self._lock:
                held = self._held.setdefault(name, _Held(name, self._folds.get(name, ()),
                                                           name not in self._unheld))
        return held

    def _probe(self, name: str, known: int) -> int | None:
        """The table's newest version (None: absent), found from ``known``: asked of the
        warehouse, or, within ``recheck_seconds`` of the last time it was, that answer. One
        request probes at a time; the others meanwhile take the last answer."""
        if self._recheck <= 0:
            self.probes += 1
            return probe_version(self._path(name), known)
        last = self._probed.get(name)
        if last is not None and time.monotonic() - last[0] < self._recheck:
            return last[1]
        lock = self._probing.get(name) or self._probing.setdefault(name, threading.Lock())
        if not lock.acquire(blocking=last is None):
            return last[1]  # type: ignore[index]
        try:
            last = self._probed.get(name)
            if last is not None and time.monotonic() - last[0] < self._recheck:
                return last[1]
            self.probes += 1
            v = probe_version(self._path(name), known)
            self._probed[name] = (time.monotonic(), v)
            return v
        finally:
            lock.release()

    def version(self, name: str) -> int:
        """The table's version now (-1: absent): two ``stat`` calls when nothing changed."""
        known = max(self._entry(name).snapshot.version, self._seen.get(name, -1))
        v = self._probe(name, known)
        v = -1 if v is None else v
        self._seen[name] = v
        return v

    def get(self, name: str) -> Snapshot:
        """The table as of its latest version, read now only if it changed."""
        held = self._entry(name)
        current = held.snapshot
        v = self._probe(name, current.version)
        if (v is None and current.version < 0) or v == current.version:
            return current
        if not held.lock.acquire(blocking=not held.loaded):
            _stale()  # another request is reading the new version: answer from this one
            return held.snapshot
        try:
            if held.snapshot.version == v:  # another request loaded it meanwhile
                return held.snapshot
            held.snapshot = self._load(name, held.snapshot, v)
            held.loaded = True
            return held.snapshot
        finally:
            held.lock.release()

    def fold(self, name: str) -> Any:
        """The state of the fold ``name`` as of its table's latest version."""
        table = self._fold_table.get(name)
        if table is None:
            raise KeyError(f"no fold named {name!r} is kept by these snapshots")
        return self.get(table).folds[name]

    def _load(self, name: str, old: Snapshot, version: int | None) -> Snapshot:
        """``name`` at ``version``: from ``old`` and the files the commits since appended
        (compactions change nothing held), or read whole when a commit did more."""
        path = self._path(name)
        folds = self._folds.get(name, ())
        if version is None or not table_exists(path):
            return _absent(name, folds, name not in self._unheld)
        if old.version >= 0 and version > old.version:
            commits = appends_by_commit(path, old.version, version)
            if commits is not None:
                self.appends += 1
                return self._append(name, old, commits, folds)
        return self._read_whole(name, path, folds)

    def _schema(self, name: str, data: pa.Table | None) -> pa.Schema:
        return arrow_schema(name) if name in TABLES or data is None else data.schema

    def _append(self, name: str, old: Snapshot, commits: list[tuple[int, list[str]]],
                folds: tuple[Fold, ...]) -> Snapshot:
        held = name not in self._unheld
        keep, schema = self._keep.get(name), self._schema(name, old.data)
        segments, marks, states = list(old.segments), list(old.marks), dict(old.folds)
        rows = old.data.num_rows if held else 0
        for v, files in commits:
            for f in files:
                t = read_file(f, self._columns.get(name), keep)
                t = conform(t, schema)
                if t.num_rows:
                    for fold in folds:
                        states[fold.name] = fold.add(states[fold.name], t, v)
                    if held:
                        segments = _merged(segments, t, self._keeper(name))
                        rows += t.num_rows
            marks.append((v, rows))
        if not held:
            return Snapshot(name, commits[-1][0], None, (), states,
                            retention_round=old.retention_round)
        data = pa.concat_tables(segments) if segments else old.data  # no copy
        return Snapshot(name, commits[-1][0], data, tuple(marks[-_MAX_MARKS:]), states,
                        tuple(segments), old.retention_round)

    def _read_whole(self, name: str, path: str, folds: tuple[Fold, ...]) -> Snapshot:
        if name in TABLES:
            check_table(path, name, grow=False)  # another version's: refused (never grown)
        version, dataset, applied = table_state(path)
        keep = self._keep.get(name)
        states = {f.name: f.empty() for f in folds}
        # what retention dropped up to the round this version committed, summed: asked
        # after the table was loaded (a round writes its sums before its drop)
        seed = self._dropped(name, applied) if folds else None
        if seed is not None and seed.num_rows:
            states = {f.name: f.add(states[f.name], seed, version) for f in folds}
        if name in self._unheld:  # folded a batch at a time: never the whole table at once
            batches = dataset.to_batches(columns=self._columns.get(name), filter=keep)
            for chunk in _chunks(batches, _FOLD_ROWS):  # not a file's rows at a time
                t = conform(pa.Table.from_batches(chunk), self._schema(name, None))
                for f in folds:
                    states[f.name] = f.add(states[f.name], t, version)
            self.loads += 1
            return Snapshot(name, version, None, (), states, retention_round=applied)
        data = dataset.to_table(columns=self._columns.get(name), filter=keep)
        data = self._keeper(name)(conform(data, self._schema(name, data)))  # the one copy
        self.loads += 1
        return Snapshot(name, version, data, ((version, data.num_rows),),
                        {f.name: f.add(states[f.name], data, version) for f in folds},
                        (data,) if data.num_rows else (), applied)

    def dropped(self, name: str, snapshot: Snapshot) -> pa.Table | None:
        """What retention dropped from ``name`` up to the round ``snapshot`` committed,
        summed, as rows of the table (None: nothing, or no seed)."""
        return self._dropped(name, snapshot.retention_round)

    def _dropped(self, name: str, round_: int) -> pa.Table | None:
        if self._seed is None or round_ <= 0:
            return None
        seed = self._seed(name, round_)
        return None if seed is None else conform(seed, self._schema(name, None))

    def _keeper(self, name: str) -> Callable[[pa.Table], pa.Table]:
        """How the rows of ``name`` are held: in one chunk on the heap, or in a file of the
        spool mapped into memory."""
        if self._spool is not None and name in self._spooled:
            return self._spool.keep
        return _one_chunk

    def as_of(self, name: str, version: int) -> pa.Table:
        """The held rows of ``name`` as its ``version`` held them: a prefix of the held rows
        for the versions since it was last read whole (no data read), else that version
        read (memoized). Exact for tables whose rows are only appended (the ack ledger)."""
        snap = self.get(name)
        if snap.data is None:  # rows not held: the version read, not kept
            return self.read(name, min(version, snap.version))
        if version < 0 or snap.version < 0:
            return snap.data.slice(0, 0)
        if version >= snap.version:
            return snap.data
        at = bisect_right(snap.marks, (version, float("inf"))) - 1
        if at >= 0:
            return snap.data.slice(0, snap.marks[at][1])

        def read() -> pa.Table:
            data = table_dataset(self._path(name), version)[1].to_table(
                columns=self._columns.get(name), filter=self._keep.get(name))
            return conform(data, self._schema(name, data))

        return self.memo(("as_of", name, version), (), read)

    def rows_of(self, name: str, where: Any, columns: list[str]) -> pa.Table:
        """The rows of ``name`` under ``where`` as of the table's latest version, kept from
        one call to the next and read on from the files appended since
        (:class:`~kafka_audit.store.AppendedRows`): a partition's timeline pays for the new
        commits' files, not for a scan of the table at every commit. The
        :data:`_MAX_ROW_SETS` most recently asked sets are kept."""
        key = (name, str(where), tuple(columns))
        with self._lock:
            found = self._row_sets.pop(key, None)
            if found is None:
                found = (threading.Lock(), AppendedRows(self._path(name), name, where, columns))
            self._row_sets[key] = found
            while len(self._row_sets) > _MAX_ROW_SETS:
                self._row_sets.popitem(last=False)
        lock, rows = found
        with lock:
            return rows.read()

    def read(self, name: str, version: int, where: Any = None,
             columns: list[str] | None = None) -> pa.Table:
        """Rows of ``name`` as of ``version`` (-1: none) read from the table now, filtered
        inside the scan; nothing of it is kept (for tables whose rows are not held)."""
        schema = self._schema(name, None)
        if columns:
            schema = pa.schema([schema.field(c) for c in columns])
        if version < 0:
            return conform(schema.empty_table(), schema)
        return conform(read_table(self._path(name), name, columns=columns or self._columns.get(
            name), where=_and(where, self._keep.get(name)), version=version), schema)

    def memo(self, key: Any, tables: tuple[str, ...], compute: Callable[..., Any],
             family: Any = None, keep: int = 4) -> Any:
        """``compute(*snapshots)`` of ``tables``, kept until one of them changes version.
        Keys of one ``family`` (values that may be large, e.g. a listing per pass it is as
        of): only the ``keep`` stored last are kept."""
        snaps = tuple(self.get(t) for t in tables)
        versions = tuple(s.version for s in snaps)
        hit = self._memo.get(key)
        if hit is not None and hit[0] == versions:
            return hit[1]
        with self._memo_lock:
            computing = self._computing.setdefault(key, threading.Lock())
        # one request computes it; the others answer from the value held (the one for
        # older versions), or wait when there is none
        if not computing.acquire(blocking=hit is None):
            _stale()
            return hit[1]  # type: ignore[index]
        try:
            hit = self._memo.get(key)
            if hit is not None and hit[0] == versions:
                return hit[1]
            value = compute(*snaps)
            self._store(key, versions, value, family, keep)
            return value
        finally:
            # the map holds what is being computed now: a key leaves it with its
            # computation, answered or raised (an unknown topic's summary), so that
            # requests for ever new keys leave nothing behind; a request still waiting on
            # this lock finds the value stored
            with self._memo_lock:
                if self._computing.get(key) is computing:
                    del self._computing[key]
            computing.release()

    def kept(self, key: Any, make: Callable[[], Any]) -> Any:
        """An object made once (``make()``) and kept as long as the snapshots, never let go
        with the memoized values: state a derivation carries from one version to the next
        (it guards itself against concurrent use)."""
        found = self._kept.get(key)
        if found is None:
            with self._memo_lock:
                found = self._kept.setdefault(key, make())
        return found

    def _store(self, key: Any, versions: tuple, value: Any, family: Any, keep: int) -> None:
        with self._memo_lock:
            self._forget(key)
            self._memo[key] = (versions, value)
            if isinstance(value, pa.Table):
                self._weights[key] = value.nbytes
                self.memo_bytes += value.nbytes
            if family is not None:
                members = self._families.setdefault(family, OrderedDict())
                members.pop(key, None)
                members[key] = None
                while len(members) > keep:
                    self._forget(members.popitem(last=False)[0])
            if len(self._memo) > _MAX_MEMO:  # the oldest half goes (one per query shape)
                for old in list(self._memo)[:_MAX_MEMO // 2]:
                    self._forget(old)
                if len(self._families) > _MAX_MEMO:
                    self._families.clear()
            for old in list(self._weights):  # the oldest tables go, this one last
                if self.memo_bytes <= _MAX_MEMO_BYTES or old == key:
                    break
                self._forget(old)

    def _forget(self, key: Any) -> None:
        self._memo.pop(key, None)
        self.memo_bytes -= self._weights.pop(key, 0)


def _chunks(batches: Iterable[pa.RecordBatch], rows: int) -> Iterator[list[pa.RecordBatch]]:
    """``batches`` (empty ones left out) in runs of at least ``rows`` rows, the last shorter."""
    run: list[pa.RecordBatch] = []
    held = 0
    for b in batches:
        if b.num_rows:
            run.append(b)
            held += b.num_rows
        if held >= rows:
            yield run
            run, held = [], 0
    if run:
        yield run


def _and(a: Any, b: Any) -> Any:
    return a if b is None else b if a is None else a & b


def _one_chunk(t: pa.Table) -> pa.Table:
    return t.combine_chunks()


def _merged(segments: list[pa.Table], new: pa.Table,
            keep: Callable[[pa.Table], pa.Table] = _one_chunk) -> list[pa.Table]:
    """``segments`` with ``new`` after them, the trailing ones merged while the last is at
    least half the one before (as a binary counter carries): a few dozen one-chunk pieces
    for any number of appends, each row copied O(log rows) times in all, never the whole
    table at one append. ``keep`` makes a piece of a table (one chunk on the heap, or a
    file of the spool)."""
    out = [*segments, keep(new)]
    while len(out) >= 2 and 2 * out[-1].num_rows >= out[-2].num_rows:
        last = out.pop()
        out[-1] = keep(pa.concat_tables([out[-1], last]))
    return out


class _Spool:
    """Rows held in files mapped into memory instead of on the heap.

    A table of rows that only grows (the findings: a row per batch of writes judged, some
    200 bytes each, 25-40 MB an hour at 5,000 msg/s) held on the heap makes the API's
    memory grow with the hours it runs. Here each piece is written once as an Arrow IPC file
    and read back memory-mapped (zero copy); the file is unlinked at once, so it lives as
    long as a table refers to it and no longer (nothing is left behind, even by a crash, but
    the files a crash interrupted between write and unlink, removed at the next start). Its
    pages are the kernel's page cache: read when a request scans them, dropped under memory
    pressure, never anonymous memory of the process."""

    def __init__(self, directory: str | os.PathLike) -> None:
        self.dir = os.fspath(directory)
        os.makedirs(self.dir, exist_ok=True)
        for name in os.listdir(self.dir):  # left by a process that died mid-write
            if name.endswith(".arrow") and not _alive(name.split("-", 1)[0]):
                try:
                    os.unlink(os.path.join(self.dir, name))
                except OSError:
                    pass
        self._n = 0
        self._lock = threading.Lock()

    def keep(self, t: pa.Table) -> pa.Table:
        with self._lock:
            self._n += 1
            path = os.path.join(self.dir, f"{os.getpid()}-{id(self):x}-{self._n}.arrow")
        try:
            with pa.OSFile(path, "wb") as sink, pa.ipc.new_file(sink, t.schema) as writer:
                writer.write_table(t.combine_chunks(), max_chunksize=max(t.num_rows, 1))
            return pa.ipc.open_file(pa.memory_map(path)).read_all()
        finally:
            try:
                os.unlink(path)
            except OSError:
                pass


def _alive(pid: str) -> bool:
    """Whether ``pid`` names a running process (a spool file's owner)."""
    if not pid.isdigit():
        return False
    try:
        os.kill(int(pid), 0)
    except ProcessLookupError:
        return False
    except PermissionError:
        return True
    return True
