"""Table snapshots kept between requests: each Delta table read once per version.

The API answers from Arrow copies of the warehouse's tables held in memory, one
per table, each tagged with the Delta version it stands for:

* **is it current?** Two ``stat`` calls a table a request: the commit file after
  the held version (``_delta_log/<v+1>.json``) must be absent and the held one
  present. No log replay, no listing, whatever the table's history;
* **a new version** is loaded with delta-rs (``DeltaTable.update_incremental``:
  only the new commits are read). When the new version only added files (the
  ledger, the consumed runs, the events, findings: appends), only those files
  are read and appended to the held copy; anything else (an overwrite, a delete)
  reads the table again;
* **derived values** (sorted findings, per-topic totals, per-partition indexes)
  are memoized by the versions of the tables they come from: a repeated query
  costs a dictionary lookup and the filter of an in-memory table.

Readers get immutable values (an Arrow table and its version): a reload swaps
them under a lock, requests running meanwhile keep the ones they took.
"""

from __future__ import annotations

import os
import threading
from collections.abc import Callable
from dataclasses import dataclass
from typing import Any

import pyarrow as pa
import pyarrow.compute as pc

from kafka_audit.schemas.tables import TABLES, arrow_schema
from kafka_audit.store import check_table, table_exists

__all__ = ["Snapshot", "Snapshots"]

#: an Arrow copy is compacted into one chunk per column when appends made it this ragged
_MAX_CHUNKS = 32
#: derived values kept at most (they are per query shape: topics, partitions, versions)
_MAX_MEMO = 4096


def _commit(log: str, version: int) -> str:
    return f"{log}/{version:020d}.json"


def latest_version(path: str, known: int | None) -> int | None:
    """The table's newest version (None: no table), found from ``known`` (a version read
    before) by probing the next commit files; a listing of the log only without one.
    Plain ``os.path`` calls: this runs for every table on every request."""
    log = f"{path}/_delta_log"
    if known is not None and known >= 0 and os.path.exists(_commit(log, known)):
        v = known
        while os.path.exists(_commit(log, v + 1)):
            v += 1
        return v
    if not os.path.isdir(log):
        return None
    versions = [int(name[:20]) for name in os.listdir(log)
                if name.endswith(".json") and name[:20].isdigit()]
    if not versions:  # a table being created: not there yet
        return None
    v = max(versions)
    while os.path.exists(_commit(log, v + 1)):
        v += 1
    return v


@dataclass(frozen=True)
class Snapshot:
    """One table as of ``version`` (-1: the table does not exist: ``data`` is empty).

    ``files[i]`` is the data file row ``i`` was read from, for the tracked tables (time
    travel within the held rows: :meth:`Snapshots.as_of`); empty for the others."""

    name: str
    version: int
    data: pa.Table
    files: pa.ChunkedArray


class _Held:
    def __init__(self, name: str) -> None:
        self.lock = threading.Lock()
        self.snapshot = _absent(name)
        self.dt = None  # the DeltaTable, kept for update_incremental
        self.files: frozenset[str] = frozenset()


def _absent(name: str) -> Snapshot:
    data = _nullable(arrow_schema(name)).empty_table() if name in TABLES else pa.table({})
    return Snapshot(name, -1, data, pa.chunked_array([], pa.string()))


class Snapshots:
    """Every table of one warehouse, as of its latest version, kept between requests."""

    def __init__(self, table_path: Callable[[str], str],
                 keep: dict[str, Any] | None = None, track: tuple[str, ...] = ("acks",)
                 ) -> None:
        """``keep``: per table, a filter (a pyarrow expression) on the rows held: the rest is
        never read (``audit_hot``: its progress rows, not the audit's whole state).
        ``track``: tables whose rows remember their file, for :meth:`as_of`."""
        self._path = table_path
        self._keep = keep or {}
        self._track = frozenset(track)
        self._held: dict[str, _Held] = {}
        self._seen: dict[str, int] = {}  # versions seen by version(), to probe from
        self._lock = threading.Lock()
        self._memo: dict[Any, tuple[tuple, Any]] = {}
        self._memo_lock = threading.Lock()
        self._computing: dict[Any, threading.Lock] = {}
        self.loads = 0  # full table reads: for tests and the benchmark
        self.appends = 0  # incremental reads of added files

    def _entry(self, name: str) -> _Held:
        held = self._held.get(name)
        if held is None:
            with self._lock:
                held = self._held.setdefault(name, _Held(name))
        return held

    def version(self, name: str) -> int:
        """The table's version now (-1: absent): two ``stat`` calls when nothing changed."""
        known = max(self._entry(name).snapshot.version, self._seen.get(name, -1))
        v = latest_version(self._path(name), known)
        v = -1 if v is None else v
        self._seen[name] = v
        return v

    def get(self, name: str) -> Snapshot:
        """The table as of its latest version, read now only if it changed."""
        held = self._entry(name)
        current = held.snapshot
        v = latest_version(self._path(name), current.version)
        if (v is None and current.version < 0) or v == current.version:
            return current
        with held.lock:
            if held.snapshot.version == v:  # another request loaded it meanwhile
                return held.snapshot
            held.snapshot = self._load(name, held, v)
            return held.snapshot

    def _load(self, name: str, held: _Held, version: int | None) -> Snapshot:
        from deltalake import DeltaTable

        path = self._path(name)
        if version is None or not table_exists(path):
            held.dt, held.files = None, frozenset()
            return _absent(name)
        if name in TABLES:
            check_table(path, name)  # a table of another version of the project: refused
        old = held.snapshot
        if held.dt is None:
            held.dt = DeltaTable(path)
        else:
            try:
                held.dt.update_incremental()
            except Exception:  # noqa: BLE001 - a table replaced under us: load it anew
                held.dt = DeltaTable(path)
        dt = held.dt
        dataset = dt.to_pyarrow_dataset()
        fragments = list(dataset.get_fragments())
        files = frozenset(f.path for f in fragments)
        schema = arrow_schema(name) if name in TABLES else dataset.schema
        appended = old.version >= 0 and held.files <= files and dt.version() > old.version
        if appended:
            data, rows_from = _read(dataset, [f for f in fragments if f.path not in held.files],
                                    self._keep.get(name), schema, name in self._track)
            data = pa.concat_tables([old.data, data])
            rows_from = pa.chunked_array(old.files.chunks + rows_from.chunks, pa.string())
            if data.num_columns and data.column(0).num_chunks > _MAX_CHUNKS:
                data = data.combine_chunks()
                rows_from = pa.chunked_array([rows_from.combine_chunks()])
            self.appends += 1
        else:
            data, rows_from = _read(dataset, fragments, self._keep.get(name), schema,
                                    name in self._track)
            self.loads += 1
        held.files = files
        return Snapshot(name, dt.version(), data, rows_from)

    def files_at(self, name: str, version: int) -> frozenset[str]:
        """The data files of ``name`` at ``version`` (memoized: a version never changes)."""
        from deltalake import DeltaTable

        def files() -> frozenset[str]:
            dt = DeltaTable(self._path(name), version=version)
            return frozenset(f.path for f in dt.to_pyarrow_dataset().get_fragments())

        return self.memo(("files_at", name, version), (), files)

    def as_of(self, name: str, version: int) -> pa.Table:
        """The held rows of ``name`` that its ``version`` held: exact for tables whose files
        are only ever added (the ack ledger); no data read, only that version's log."""
        snap = self.get(name)
        if version < 0 or snap.version < 0:
            return snap.data.slice(0, 0)
        if version >= snap.version:
            return snap.data
        if name not in self._track:
            raise ValueError(f"{name}: rows do not remember their files (not tracked)")
        keep = pa.array(sorted(self.files_at(name, version)), pa.string())
        return snap.data.filter(pc.is_in(snap.files, value_set=keep))

    def memo(self, key: Any, tables: tuple[str, ...], compute: Callable[..., Any]) -> Any:
        """``compute(*snapshots)`` of ``tables``, kept until one of them changes version."""
        snaps = tuple(self.get(t) for t in tables)
        versions = tuple(s.version for s in snaps)
        hit = self._memo.get(key)
        if hit is not None and hit[0] == versions:
            return hit[1]
        with self._memo_lock:
            computing = self._computing.setdefault(key, threading.Lock())
        with computing:  # one request computes it; the others wait for its answer
            hit = self._memo.get(key)
            if hit is not None and hit[0] == versions:
                return hit[1]
            value = compute(*snaps)
        with self._memo_lock:
            if len(self._computing) > _MAX_MEMO:
                self._computing.clear()
            self._memo.pop(key, None)
            self._memo[key] = (versions, value)
            if len(self._memo) > _MAX_MEMO:  # the oldest half goes (one per query shape)
                for old in list(self._memo)[:_MAX_MEMO // 2]:
                    del self._memo[old]
        return value


def _read(dataset, fragments: list, keep, schema: pa.Schema, track: bool
          ) -> tuple[pa.Table, pa.ChunkedArray]:
    """The rows of ``fragments`` (``keep`` applied) in the declared ``schema``, and (if
    ``track``) the file each row came from."""
    import pyarrow.dataset as pds

    if not fragments:
        return _absent_data(schema), pa.chunked_array([], pa.string())
    part = pds.FileSystemDataset(fragments, dataset.schema, dataset.format, dataset.filesystem)
    batches, names = [], []
    for tagged in part.scanner(filter=keep).scan_batches():
        b = tagged.record_batch
        if b.num_rows:
            batches.append(b)
            if track:
                names.append(pa.repeat(pa.scalar(tagged.fragment.path, pa.string()),
                                       b.num_rows))
    if not batches:
        return _absent_data(schema), pa.chunked_array([], pa.string())
    data = _conform(pa.Table.from_batches(batches), schema)
    return data, pa.chunked_array(names, pa.string())


def _absent_data(schema: pa.Schema) -> pa.Table:
    return _nullable(schema).empty_table()


def _nullable(schema: pa.Schema) -> pa.Schema:
    return pa.schema([pa.field(f.name, f.type) for f in schema])


def _conform(t: pa.Table, schema: pa.Schema) -> pa.Table:
    """``t`` in the declared column order and types, every column nullable (as Spark writes
    them), so that copies read from files of either engine concatenate."""
    target = _nullable(schema)
    if t.schema.equals(target):
        return t
    cols = [t.column(f.name).cast(f.type) if f.name in t.column_names
            else pa.nulls(t.num_rows, f.type) for f in target]
    return pa.Table.from_arrays(cols, schema=target)
