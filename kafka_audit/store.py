"""The table layer: every Delta table access of producers, jobs, watcher and API.

The ground floor of the project: it knows the declared schemas
(``schemas/tables.py``) and delta-rs, nothing of Spark, of the audit's rules or
of the API. Nothing above it imports ``deltalake`` or opens a table's files; Spark's
own Delta writer (``jobs/sink.py``) is the one other path into the tables (the import
contracts in ``pyproject.toml`` say who may import ``deltalake`` and ``delta``).

* read: :func:`read_table` (an empty table of the declared schema if absent),
  :func:`table_dataset` (a version to scan batch by batch),
  :func:`files_added_since` (the rows appended since a version: data-changing adds in
  the commit files, so compactions never make old rows look new), read with
  :func:`read_files` / :func:`read_file`, and :func:`max_in_files`, :func:`live_files`,
  :func:`probe_version`, :func:`commit_time` (answered from the Delta log);
* write: :func:`append_rows`, :func:`write_arrow`, and the idempotent appends
  :func:`append_once` / :func:`append_arrow_once` keyed by ``(app_id, version)``;
* upkeep: :func:`compact` (OPTIMIZE, then a checkpoint), :func:`vacuum`,
  :func:`vacuum_unnamed`, :func:`checkpoint`, :func:`footprint` (what a table holds on
  disk);
* check: :func:`check_table` refuses a table whose columns are not the declared
  ones (a table of an older version of this project) with a clear error;
* the audit's commit point: :func:`committed_progress` and :func:`committed_pass`
  say which audit pass is committed, so readers never see a pass that died.
"""

from __future__ import annotations

import json
import logging
import re
import threading
import time
import uuid
from collections.abc import Callable, Collection, Iterable, Iterator
from concurrent.futures import ThreadPoolExecutor
from contextlib import contextmanager
from contextvars import ContextVar
from dataclasses import dataclass, field
from datetime import UTC, datetime
from typing import TYPE_CHECKING, Any
from urllib.parse import quote, unquote

import pyarrow as pa
import pyarrow.compute as pc
import pyarrow.ipc as ipc
from pyarrow.fs import FileSelector, FileType

from kafka_audit.errors import TableError
from kafka_audit.schemas.tables import arrow_schema
from kafka_audit.storage import delta_options, is_remote, locate

if TYPE_CHECKING:
    import pyarrow.dataset as ds

__all__ = ["table_exists", "check_table", "read_table", "append_rows",
           "append_once",
           "append_arrow_once", "write_arrow", "write_arrow_stream", "transaction_version",
           "commit_metadata",
           "STAGED", "stage_segment", "staged_segments", "commit_staged", "StagedCommit",
           "segment_notes",
           "files_added_since", "CommitNotes", "data_changes_since", "appends_by_commit",
           "latest_version",
           "AppendedRows", "conform", "table_dataset", "read_files", "read_file",
           "probe_version", "commit_time",
           "max_in_files", "rows_in_files", "live_files",
           "compact", "vacuum", "vacuum_unnamed", "keep_tombstones", "checkpoint", "trim_log",
           "Footprint", "footprint", "Progress",
           "committed_progress", "committed_pass", "one_snapshot_each", "forget",
           "RETENTION_APP", "applied_round", "table_state", "DropPlan", "plan_drop",
           "commit_drop"]

log = logging.getLogger(__name__)

_CHECKED: set[str] = set()  # table paths whose columns were checked in this process
#: the idempotent transaction a retention round's drop commits as (its version: the
#: table's round, which the ``rollups`` rows of that round carry). Readers of appended rows
#: skip these commits whole (:func:`data_changes_since`): a drop appends nothing, and the
#: rows a drop copies out of a file it rewrites were appended long before
RETENTION_APP = "kafka_audit_retention"
#: how long a file that a compaction or an overwrite removed stays named in the table's
#: checkpoints (Delta's ``delta.deletedFileRetentionDuration``, a week by default). Every
#: load of a table reads its last checkpoint whole, and a table appended every second and
#: compacted every 10 minutes removes a file a second: after the hour soak of 2026-11-27
#: the ledger's checkpoint named 3,086 removed files beside 1 live one, a week's would
#: name half a million. Two hours is more than the upkeep's vacuum retention
#: (``steady.vacuum_retention_hours``, 1 h) plus its round; a file whose name expired
#: before its vacuum is deleted by the listing one (:func:`vacuum_unnamed`). The default
#: of new tables; ``steady.tombstone_retention_hours`` sets it on every table
#: (:func:`keep_tombstones`, from the upkeep)
TOMBSTONE_RETENTION_HOURS = 2
#: the table property holding it
TOMBSTONE_PROPERTY = "delta.deletedFileRetentionDuration"


def tombstone_retention(hours: float | None = None) -> str:
    """``hours`` (:data:`TOMBSTONE_RETENTION_HOURS`) as a Delta interval (Spark's and
    delta-rs's)."""
    hours = TOMBSTONE_RETENTION_HOURS if hours is None else hours
    return (f"interval {int(hours)} hours" if hours == int(hours)
            else f"interval {round(hours * 3600)} seconds")


def keep_tombstones(path: str, hours: float) -> bool:
    """Set the table at ``path`` to name removed files in its checkpoints for ``hours``
    (:data:`TOMBSTONE_PROPERTY`), if it says otherwise; whether it changed. A metadata
    commit: a delta-rs writer that loaded the table before it tries again
    (:func:`_past_removals`), Spark's fails its micro-batch or pass, which is run again.
    New tables are made with the default, so this commits only when the setting differs
    from it (a soak's minutes) or for a table made before the setting was."""
    want = tombstone_retention(hours)
    dt = _dt(path)
    if dt.metadata().configuration.get(TOMBSTONE_PROPERTY) == want:
        return False
    dt.alter.set_table_properties({TOMBSTONE_PROPERTY: want})
    forget(path)
    return True


def _new_table() -> dict[str, str]:
    """What new tables get (Spark gives the tables it creates the same: jobs/spark.py)."""
    return {"delta.checkpointInterval": "100", TOMBSTONE_PROPERTY: tombstone_retention()}


#: the tables loaded in this context's :func:`one_snapshot_each` by path, and their live
#: files by ``(path, "adds")`` (None: outside one)
_SNAPSHOTS: ContextVar[dict[Any, Any] | None] = ContextVar("kafka_audit_snapshots",
                                                           default=None)


@contextmanager
def one_snapshot_each() -> Iterator[None]:
    """Inside, each table's newest version is loaded once and read again from memory until
    this context writes it (``forget``): an audit pass asks its own tables (``audit_hot``,
    ``findings``, ``partition_state``) several small questions, and on an object store each
    load lists the Delta log and reads its checkpoint. Readers in other threads or
    processes are not affected (a context variable: a thread pool's threads start
    outside it). Only for tables nobody else changes meanwhile but by appending. Inside
    another, it is that one. A thread's next context takes each table from its last one
    and reads only the commits since (:func:`_kept`)."""
    if _SNAPSHOTS.get() is not None:
        yield
        return
    token = _SNAPSHOTS.set({})
    try:
        yield
    finally:
        _SNAPSHOTS.reset(token)


def forget(path: str) -> None:
    """The table at ``path`` was written: the next :func:`_dt` of this context brings it up
    to date (the same object, moved forward in place: a caller holding it sees it move)."""
    cache = _SNAPSHOTS.get()
    if cache is not None:
        cache.pop(path, None)
        cache.pop((path, "adds"), None)


def _dt(path: str, version: int | None = None):
    """The Delta table at ``path`` (a folder or an object store's URI: ``storage.py``);
    inside :func:`one_snapshot_each`, loaded once a context and brought up to date from the
    thread's last context (:func:`_kept`)."""
    from deltalake import DeltaTable

    cache = _SNAPSHOTS.get()
    if cache is None or version is not None:
        return DeltaTable(path, version=version, storage_options=delta_options(path))
    if path not in cache:
        cache[path] = _kept(path)
    return cache[path]


#: the tables each thread's :func:`one_snapshot_each` contexts loaded, kept between them:
#: path -> (DeltaTable, when last brought up to date, monotonic)
_KEPT = threading.local()
#: a kept table unused this long is loaded anew (the log's cleanup, ``trim_log``, keeps
#: commit files for hours: the commits since a kept version are still there to read)
KEPT_IDLE_SECONDS = 60.0


def _kept(path: str):
    """The table at ``path`` at its newest version, from the one this thread's last
    context loaded: brought up to date by reading only the commits since
    (``update_incremental``: on an object store one listing and those commits, where a
    load reads the log's checkpoint and every commit after it again; an audit pass loads
    its six tables, each of a ledger's appends its table). A table unused for
    :data:`KEPT_IDLE_SECONDS`, or one whose update fails, is loaded anew (and the thread's
    other tables unused that long are let go). As everywhere here, a table is never
    deleted and made again at its path while a process uses it: an update would lay the
    new log's commits over the old state."""
    from deltalake import DeltaTable

    kept = getattr(_KEPT, "tables", None)
    if kept is None:
        kept = _KEPT.tables = {}
    now = time.monotonic()
    for other, (_, at) in list(kept.items()):  # tables this thread stopped using: let go
        if now - at > KEPT_IDLE_SECONDS:
            del kept[other]
    held = kept.pop(path, None)
    dt = None
    if held is not None:
        try:
            held[0].update_incremental()
            dt = held[0]
        except Exception as exc:  # noqa: BLE001 - load it anew
            log.info("%s: the table kept from the last pass could not be brought up to "
                     "date (%s): loaded anew", path, exc)
    if dt is None:
        dt = DeltaTable(path, storage_options=delta_options(path))
    kept[path] = (dt, now)
    return dt


def table_exists(path: str) -> bool:
    cache = _SNAPSHOTS.get()
    if cache is not None and path in cache:
        return True  # loaded in this context, and a table is never removed while in use
    return _is_dir(_log_name(path))


def check_table(path: str, table: str, grow: bool = True) -> None:
    """Raise :class:`TableError` if the table at ``path`` exists with other columns than the
    declared ``table`` (written by another version of this project); once per process.

    A table an older version wrote, whose columns are the declared ones' beginning and
    whose missing ones are all nullable, is grown in place (one metadata commit, Delta's
    ``ADD COLUMNS``): its older files read those columns as null, so a warehouse outlives
    an upgrade that adds a column. A reader (``grow`` False) takes such a table as it is
    and writes nothing. Anything else (a column dropped, renamed, or one this version
    does not know) is refused. Upgrade every writer of a table together: a process of
    the older version cannot append to the grown table (its spool keeps what it could
    not write; the upgraded version commits it)."""
    if path in _CHECKED or not table_exists(path):
        return
    for attempt in range(3):
        have = [f.name for f in _dt(path).schema().fields]
        want = arrow_schema(table)
        if have == want.names:
            break
        missing = want.names[len(have):]
        if not (have == want.names[:len(have)]
                and all(want.field(n).nullable for n in missing)):
            raise TableError(
                f"table {table} at {path} has columns {sorted(set(have) ^ set(want.names))} "
                f"that differ from this version's; it was written by another version of "
                f"kafka-audit: move the warehouse away (or point `home` elsewhere) and audit "
                f"again")
        if not grow:
            return  # read as it is (the missing columns are not there to read); not kept
        try:
            _grow(path, table)
        except Exception as exc:  # noqa: BLE001 - another process grew it first: check again
            if attempt == 2:
                raise TableError(f"table {table} at {path}: could not add the columns "
                                 f"{missing} this version declares: {exc}") from exc
        forget(path)
    _CHECKED.add(path)


def _grow(path: str, table: str) -> None:
    """Add the declared nullable columns the table at ``path`` lacks (a metadata commit;
    nothing when another process added them since it was read)."""
    from deltalake import Schema

    forget(path)  # as it is now: another process may have grown it
    dt = _dt(path)
    have = {f.name for f in dt.schema().fields}
    fields = pa.schema([f for f in arrow_schema(table) if f.name not in have])
    if not fields.names:
        return
    dt.alter.add_columns(Schema.from_arrow(fields).fields)
    log.info("%s: columns %s added (declared by this version, nullable)", path, fields.names)


def read_table(path: str, table: str, columns: list[str] | None = None,
               where: pc.Expression | None = None, version: int | None = None) -> pa.Table:
    """The table as Arrow; an empty table of the declared schema if it does not exist yet.

    ``where`` is applied inside the scan (row groups whose statistics exclude it are skipped).
    """
    if not table_exists(path):
        found = arrow_schema(table).empty_table()
        found = found.filter(where) if where is not None else found
        return found.select(columns) if columns else found
    dt = _dt(path, version)
    return dt.to_pyarrow_dataset().to_table(columns=columns, filter=where)


def table_dataset(path: str, version: int | None = None) -> tuple[int, ds.Dataset]:
    """The table loaded at ``version`` (None: its latest): that version, and its rows as a
    pyarrow dataset to scan whole or batch by batch (the table must exist)."""
    dt = _dt(path, version)
    return dt.version(), dt.to_pyarrow_dataset()


def applied_round(path: str, version: int | None = None) -> int:
    """The last retention round whose drop the table at ``path`` committed (as of
    ``version``; 0: none, or no table)."""
    if not table_exists(path):
        return 0
    return _dt(path, version).transaction_version(RETENTION_APP) or 0


def table_state(path: str) -> tuple[int, ds.Dataset, int]:
    """The table's latest version, its rows as a dataset, and the last retention round it
    committed, all of one load (the table must exist)."""
    dt = _dt(path)
    return dt.version(), dt.to_pyarrow_dataset(), dt.transaction_version(RETENTION_APP) or 0


@dataclass
class DropPlan:
    """The files a retention round removes from one table, and the rows it writes again
    (those of the removed files that stay), from the table's ``version``
    (:func:`plan_drop`, then :func:`commit_drop`)."""

    path: str
    version: int
    table: Any  # the DeltaTable loaded at ``version``
    removed: list[tuple[str, int]] = field(default_factory=list)  # (log path, size)
    kept: list[pa.Table] = field(default_factory=list)
    dropped_rows: int = 0


def plan_drop(path: str, table: str, where: pc.Expression, time_column: str, cutoff,
              on_dropped) -> DropPlan:
    """What dropping the rows of the table at ``path`` that match ``where`` takes, from its
    latest version: the live files whose statistics admit a ``time_column`` older than
    ``cutoff`` (every row ``where`` matches must be older: the files' statistics prune the
    rest unread) are read one at a time; ``on_dropped(rows)`` gets each file's matching rows
    (in the declared schema), and a file that keeps rows has them written again. A row
    where ``where`` is null is kept."""
    import pyarrow.dataset as ds

    forget(path)  # loaded now, not one a one_snapshot_each context holds
    dt = _dt(path)
    adds = _add_actions(dt)
    plan = DropPlan(path, dt.version(), dt)
    if adds.num_rows == 0:
        return plan
    low = f"min.{time_column}"
    stats = adds.column(low) if low in adds.column_names else None
    declared = arrow_schema(table)
    own = pa.schema(dt.schema().to_arrow())
    for i, rel in enumerate(adds.column("path").to_pylist()):
        oldest = None if stats is None else stats[i].as_py()
        if isinstance(oldest, datetime):
            if oldest.tzinfo is None:  # the log's statistics are UTC
                oldest = oldest.replace(tzinfo=UTC)
            if oldest >= cutoff:
                continue
        rows = read_file(_data_file(path, rel))
        mine = conform(rows, declared)
        mask = pc.fill_null(ds.dataset(mine).to_table(columns={"m": where}).column("m"), False)
        gone = mine.filter(mask)
        if gone.num_rows == 0:
            continue
        on_dropped(gone)
        plan.dropped_rows += gone.num_rows
        plan.removed.append((rel, int(adds.column("size_bytes")[i].as_py() or 0)))
        if gone.num_rows < rows.num_rows:
            plan.kept.append(conform(rows, own).filter(pc.invert(mask)).cast(own))
    return plan


def commit_drop(plan: DropPlan, round_: int | None, note: dict) -> int | None:
    """Commit ``plan`` as retention round ``round_`` of its table: one commit that removes
    its files and adds the rows they keep, written again (by delta-rs, in a hidden folder
    of the table, then moved in), as the transaction ``(RETENTION_APP, round_)`` (none if
    ``round_`` is None) with ``note`` in its ``commitInfo``. The files are named, not a
    predicate: rows appended meanwhile are never touched, and the rows dropped are exactly
    those :func:`plan_drop` handed over. Returns them; None when the commit lost to a
    concurrent one that removed a file it names (nothing changed: try again later)."""
    from deltalake import CommitProperties, Transaction, write_deltalake
    from deltalake.exceptions import CommitFailedError
    from deltalake.transaction import AddAction, RemoveAction

    if not plan.removed:
        return 0
    fs = locate(plan.path).fs
    actions: list = []
    moved: list[str] = []
    if plan.kept:
        scratch = f"{plan.path}/_retention/{uuid.uuid4().hex}"
        write_deltalake(scratch, pa.concat_tables(plan.kept),
                        storage_options=delta_options(plan.path))
        try:
            written = [a["add"] for a in (_commit_actions(scratch, 0) or []) if "add" in a]
            for a in written:
                fs.move(locate(_data_file(scratch, a["path"])).path,
                        locate(_data_file(plan.path, a["path"])).path)
                moved.append(a["path"])
                actions.append(AddAction(a["path"], a["size"], {}, a["modificationTime"],
                                         True, a["stats"]))
        finally:
            fs.delete_dir(locate(scratch).path)
    now = int(time.time() * 1000)
    actions += [RemoveAction(rel, True, now, size, {}) for rel, size in plan.removed]
    note = {**note, "commit": uuid.uuid4().hex}  # to find the commit in the log after
    forget(plan.path)
    try:
        plan.table.create_write_transaction(
            actions, "append", plan.table.schema(),
            commit_properties=CommitProperties(
                app_transactions=None if round_ is None else [Transaction(RETENTION_APP,
                                                                          round_)],
                custom_metadata={"kafka_audit.retention": json.dumps(note)}))
    except CommitFailedError as exc:
        for rel in moved:  # written for nothing: no commit names them
            fs.delete_file(locate(_data_file(plan.path, rel)).path)
        log.info("retention round %s of %s lost to a concurrent commit, tried again later: "
                 "%s", round_, plan.path, exc)
        return None
    _check_no_race(plan, round_, note["commit"])
    return plan.dropped_rows


def _check_no_race(plan: DropPlan, round_: int | None, commit: str) -> None:
    """Delta's conflict check does not stop a removal racing a compaction (its removes do
    not change data): the round's rows would then live on in the compacted file while the
    rollup counts them. Compaction and retention share one thread of the upkeep, so this
    is never expected; said loudly if a commit between the round's version and its own
    removed one of its files."""
    names = {rel for rel, _size in plan.removed}
    for v, actions in _commits(plan.path, plan.version + 1, latest_version(plan.path)):
        if actions is None:
            continue
        info = next((a["commitInfo"] for a in actions if "commitInfo" in a), {})
        if commit in str(info.get("kafka_audit.retention", "")):
            return  # the round's own commit: those before it raced it
        hit = [a["remove"]["path"] for a in actions
               if "remove" in a and a["remove"].get("path") in names]
        if hit:
            log.error("retention round %s of %s raced commit %d, which removed %d of its "
                      "files: the rows the round summed may still be in the table (its "
                      "totals count them twice)", round_, plan.path, v, len(hit))


def read_files(files: list[str], table: str, columns: list[str] | None = None,
               where: pc.Expression | None = None) -> pa.Table:
    """The rows of some data files of ``table`` (those :func:`files_added_since` named), in
    one threaded scan typed by the declared schema (a column an older file lacks reads as
    null), under ``where`` if given."""
    import pyarrow.dataset as ds

    if not files:
        return arrow_schema(table).empty_table().select(columns or arrow_schema(table).names)
    at = locate(files[0])
    return ds.dataset([locate(f).path for f in files], format="parquet",
                      schema=arrow_schema(table), filesystem=at.fs).to_table(
        columns=columns, filter=where)


def read_admitting(path: str, table: str, column: str, value: int,
                   columns: list[str] | None = None,
                   where: pc.Expression | None = None) -> pa.Table:
    """The rows of the table at ``path`` whose numeric ``column`` equals ``value`` (and
    ``where``), read from the live files whose statistics admit ``value`` alone: those are
    picked from the Delta log, then scanned (the dataset :func:`read_table` builds carries
    every file's statistics of every column as expressions, tens of milliseconds over a
    few files of a wide table). Raises ``LookupError`` where only :func:`read_table` is
    exact: a file without the statistic, or a file with a deletion vector."""
    if not table_exists(path):
        return read_table(path, table, columns, where)
    adds = live_files(path)
    if any(c.startswith("deletionVector") and adds.column(c).null_count < adds.num_rows
           for c in adds.column_names):
        raise LookupError(f"{path}: deletion vectors")
    files = [_data_file(path, f) for f in adds.column("path").filter(
        _admitting(adds, path, column, value)).to_pylist()] if adds.num_rows else []
    match = pc.field(column) == pa.scalar(value, arrow_schema(table).field(column).type)
    return read_files(files, table, columns, match if where is None else match & where)


def read_file(file: str, columns: list[str] | None = None,
              where: pc.Expression | None = None) -> pa.Table:
    """The rows of one data file of a table (a path :func:`appends_by_commit` or
    :func:`files_added_since` named) under ``where``, in the file's own types; of
    ``columns``, those the file has (one written before a column was added lacks it:
    :func:`conform` makes it null)."""
    import pyarrow.dataset as ds

    at = locate(file)
    data = ds.dataset(at.path, format="parquet", filesystem=at.fs)
    if columns is not None:
        columns = [c for c in columns if c in data.schema.names]
    return data.to_table(columns=columns, filter=where)


def partition_slices(t: pa.Table) -> Iterator[tuple[tuple[str, int], pa.Table]]:
    """``((topic, partition), rows)`` for each partition of ``t``, which must be sorted
    by topic and partition (found with Arrow: a pass's state is 70,000 rows and more)."""
    if t.num_rows == 0:
        return
    topic, partition = t.column("topic"), t.column("partition")

    def as_before(c):  # each row's value equals the one before (null equals null)
        now, before = c.slice(1), c.slice(0, t.num_rows - 1)
        if pa.types.is_null(c.type):  # no value at all: every row the same
            return pc.is_null(now)
        return pc.or_(pc.fill_null(pc.equal(now, before), False),
                      pc.and_(pc.is_null(now), pc.is_null(before)))

    # a new key where the row differs from the one before
    starts = [0, *(pc.indices_nonzero(pc.invert(pc.and_(as_before(topic), as_before(partition))))
                   .to_numpy() + 1).tolist(), t.num_rows]
    for start, end in zip(starts, starts[1:], strict=False):
        yield (topic[start].as_py(), partition[start].as_py()), t.slice(start, end - start)


def _arrow(table: str, rows: list[dict]) -> pa.Table:
    return pa.Table.from_pylist(rows, schema=arrow_schema(table))


def append_rows(path: str, table: str, rows: list[dict]) -> None:
    """Append plain rows with delta-rs, typed by the table's declared schema."""
    if rows:
        write_arrow(path, table, _arrow(table, rows))


def transaction_version(path: str, app_id: str) -> int | None:
    """The last version the idempotent writer ``app_id`` committed (None: none, or no table)."""
    return _dt(path).transaction_version(app_id) if table_exists(path) else None


def append_arrow_once(path: str, table: str, data: pa.Table, app_id: str, version: int,
                      known: int | None = None, metadata: dict | None = None) -> bool:
    """Append ``data`` as the idempotent Delta transaction ``(app_id, version)``: nothing is
    written if that app already committed ``version`` or a later one. ``known``: the app's
    committed version if the caller knows it (its transaction is then not looked up).
    ``metadata``: keys added to the commit's ``commitInfo``. True if appended."""
    from deltalake import CommitProperties, Transaction, write_deltalake

    declared = arrow_schema(table)
    # rows an older version spooled before an upgrade added a column: that column null
    whole = data if data.schema.names == declared.names else _filled(data, declared)

    def attempt(again: bool) -> bool:
        if again or known is not None:
            forget(path)  # as it is now (a context's load may be older than the caller's)
        done = transaction_version(path, app_id) if known is None or again else known
        if done is not None and done >= version:
            return False
        # the table as loaded (inside one_snapshot_each: the context's, brought up to date
        # when ``known`` was given; Delta's conflict check commits it past any newer
        # append); none yet: created by this append
        into = _dt(path) if table_exists(path) else path
        try:
            write_deltalake(into, whole, mode="append",
                            storage_options=delta_options(path) if into is path else None,
                            configuration=_new_table() if into is path else None,
                            commit_properties=CommitProperties(
                                custom_metadata=metadata,
                                app_transactions=[Transaction(app_id, version)]))
        finally:
            forget(path)
        return True

    return _past_removals(path, attempt, (*_RETRIED, _OWN_TRANSACTION))


#: an append that loaded the table before a concurrent commit removed rows (a retention
#: round, the audit deleting a dead pass's findings) or added columns (an upgraded
#: process growing it: :func:`check_table`) is refused by delta-rs's conflict check; it
#: is tried again on the table as it is now, this many times
_REMOVAL_RETRIES = 3
_RETRIED = ("deleted data this operation read", "Metadata changed since last commit")
#: refused because an app transaction the commit carries was committed since the table was
#: loaded: only an idempotent append (which reads the transaction again and finds itself
#: done) may try again; the staged committer that lost to another must not (its segments
#: stay staged: :func:`commit_staged`)
_OWN_TRANSACTION = "Concurrent transaction failed"


def _past_removals(path: str, attempt, retried: tuple[str, ...] = _RETRIED):
    """``attempt(again)`` (one commit; ``again``: after a refusal), tried again while
    delta-rs refuses it for one of the ``retried`` reasons: by default because a
    concurrent commit removed rows it "read" or changed the columns (an append reads
    nothing, and its rows are the same on the new version)."""
    from deltalake.exceptions import CommitFailedError

    for n in range(_REMOVAL_RETRIES + 1):
        try:
            return attempt(n > 0)
        except CommitFailedError as exc:
            if n == _REMOVAL_RETRIES or not any(why in str(exc) for why in retried):
                raise
            log.info("%s: an append refused by a concurrent commit (%s), tried again on the "
                     "new version", path, str(exc).splitlines()[0][:120])
    raise AssertionError("unreachable")


def append_once(path: str, table: str, rows: list[dict], app_id: str, version: int) -> bool:
    """:func:`append_arrow_once` of plain rows; an empty list writes nothing."""
    return bool(rows) and append_arrow_once(path, table, _arrow(table, rows), app_id, version)


def write_arrow(path: str, table: str, data: pa.Table, mode: str = "append",
                user_metadata: str | None = None) -> None:
    """One delta-rs commit of ``data`` (the declared ``table``'s columns, in any order).

    Written in the table's own schema when it has one (nullability, order: Spark creates
    its columns nullable, the declaration may not); the table's log is read once a write.
    """
    _write(path, table, _dt(path) if table_exists(path) else None, [data], mode,
           _marked(user_metadata))


def _marked(user_metadata: str | None):
    """A delta-rs commit's properties carrying ``user_metadata`` as Delta's
    ``userMetadata`` (what Spark's writer option of that name writes)."""
    from deltalake import CommitProperties

    return CommitProperties(custom_metadata={"userMetadata": user_metadata}
                            if user_metadata is not None else None)


def _deltalake_write(path: str, into, data, mode: str, properties) -> None:
    """delta-rs's write of ``data`` into ``into`` (the table at ``path``, loaded; None:
    create it, with the options and properties new tables get)."""
    from deltalake import write_deltalake

    write_deltalake(path if into is None else into, data, mode=mode,
                    storage_options=delta_options(path) if into is None else None,
                    configuration=_new_table() if into is None else None,
                    commit_properties=properties)


def write_arrow_stream(path: str, table: str, batches: Callable[[], Iterable[pa.RecordBatch]],
                       user_metadata: str | None = None) -> int:
    """One delta-rs append of the record batches ``batches()`` yields (the declared
    ``table``'s columns), each written as it comes, so this process never holds the whole.
    ``batches()`` is called here, in the caller's thread (delta-rs reads the batches on
    one of its own), and what it returns is closed after the write if it can be.
    Returns the rows written. A commit refused by a concurrent one
    (:func:`_past_removals`) calls ``batches()`` again: the files of the refused try are
    named in no commit (a vacuum removes them)."""
    properties = _marked(user_metadata)
    target = _dt(path) if table_exists(path) else None

    def attempt(again: bool) -> int:
        forget(path)
        into = _dt(path) if again else target
        schema = arrow_schema(table) if into is None else pa.schema(into.schema().to_arrow())
        source, written = batches(), 0

        def conformed() -> Iterator[pa.RecordBatch]:
            nonlocal written
            for batch in source:
                part = _filled(pa.Table.from_batches([batch]), schema)
                written += part.num_rows
                yield from part.to_batches()

        try:
            _deltalake_write(path, into, pa.RecordBatchReader.from_batches(schema, conformed()),
                             "append", properties)
        finally:
            if hasattr(source, "close"):
                source.close()  # a write that failed midway: its source stops too
        return written

    if target is None:
        return attempt(False)
    return _past_removals(path, attempt)


def _filled(part: pa.Table, schema: pa.Schema) -> pa.Table:
    """``part`` in ``schema`` (:func:`conform`, then its nullability); a nullable column it
    lacks as nulls (rows an older version spooled before an upgrade added the column), any
    other missing one an error."""
    for f in schema:
        if not f.nullable and f.name not in part.column_names:
            raise KeyError(f"column {f.name!r} is missing and may not be null")
    return conform(part, schema).cast(schema)


def _write(path: str, table: str, target, parts: list[pa.Table], mode: str,
           properties) -> pa.Table:
    """One delta-rs commit of ``parts`` into ``target`` (the table at ``path``, loaded;
    None: create it), each in the table's own schema; returns what was written."""
    schema = arrow_schema(table) if target is None else pa.schema(target.schema().to_arrow())
    data = pa.concat_tables([_filled(p, schema) for p in parts])

    def attempt(again: bool) -> pa.Table:
        forget(path)
        _deltalake_write(path, _dt(path) if again else target, data, mode, properties)
        return data

    if target is None or mode != "append":
        return attempt(False)
    return _past_removals(path, attempt)


# ---- staged appends: producer hosts hand segments over, one committer commits them ----
#: the folder of a table where producer hosts put the segments they hand over (hidden: no
#: Delta reader or vacuum looks under a folder whose name starts with "_")
STAGED = "_staged"
_STAGED_THREADS = 16


def _staged_name(path: str, app_id: str, version: int) -> str:
    return f"{path}/{STAGED}/{quote(app_id, safe='')}/{version:020d}.arrow"


def stage_segment(path: str, app_id: str, version: int, segment: bytes) -> None:
    """Hand the segment ``version`` of the idempotent writer ``app_id`` (an Arrow IPC file's
    bytes) over to the committer of the table at ``path``: an object in its staging folder,
    whole or absent (a rename on local disk, one PUT in an object store). Staging a
    version again (a host that crashed before it knew) writes the same bytes."""
    name = _staged_name(path, app_id, version)
    at = locate(name)
    if is_remote(name):
        with at.fs.open_output_stream(at.path) as out:
            out.write(segment)
        return
    at.fs.create_dir(at.path.rsplit("/", 1)[0], recursive=True)
    tmp = f"{at.path}.{uuid.uuid4().hex}.tmp"
    with at.fs.open_output_stream(tmp) as out:
        out.write(segment)
    at.fs.move(tmp, at.path)


@dataclass(frozen=True)
class StagedCommit:
    """What :func:`commit_staged` did: the segments it committed (and their rows) in
    ``version`` (None: nothing to commit), and the staged ones it dropped as committed
    before."""

    version: int | None
    segments: int
    rows: int
    apps: int
    dropped: int


def staged_segments(path: str) -> dict[str, list[tuple[int, str]]]:
    """The segments waiting in the table's staging folder: per app id, ``(version, path
    in the file system)`` in version order."""
    found: dict[str, list[tuple[int, str]]] = {}
    for info in _listing(f"{path}/{STAGED}", recursive=True):
        parent, _, base = info.path.rpartition("/")
        if info.type != FileType.File or not re.fullmatch(r"\d{20}\.arrow", base):
            continue  # a folder, or a local stage's temporary file
        app_id = unquote(parent.rpartition("/")[2])
        found.setdefault(app_id, []).append((int(base[:20]), info.path))
    return {app: sorted(segs) for app, segs in sorted(found.items())}


def commit_staged(path: str, table: str, max_segments: int = 10_000) -> StagedCommit:
    """Commit the segments staged for the table at ``path`` in one Delta commit that
    records each app id's newest version as its transaction (at most ``max_segments``,
    oldest first per app); then delete them. A segment at or below its app's committed
    version was committed before (a crash between the commit and the deletes, or a host
    that staged it twice) and is deleted unread: nothing is appended twice. The committer
    must be the only writer of these app ids; a second committer racing it loses the
    commit (Delta's conflict on an app's transaction), and its segments stay staged."""
    from deltalake import CommitProperties, Transaction

    staged = staged_segments(path)
    if not staged:
        return StagedCommit(None, 0, 0, 0, 0)
    check_table(path, table)  # hosts may not grow it (they write _staged/ alone): here
    target = _dt(path) if table_exists(path) else None
    fs = locate(path).fs
    txns, done, stale = [], [], []
    for app_id, segments in staged.items():
        known = target.transaction_version(app_id) if target is not None else None
        newest = None
        for version, name in segments:
            if known is not None and version <= known:
                stale.append(name)
                continue
            if len(done) >= max_segments:
                break
            done.append(name)
            newest = version
        if newest is not None:
            txns.append(Transaction(app_id, newest))

    def read(name: str) -> pa.Table:
        with fs.open_input_file(name) as src:
            return ipc.open_file(src).read_all()

    # an object store answers each request in milliseconds: a hundred hosts' segments are
    # read, and deleted, side by side
    with ThreadPoolExecutor(_STAGED_THREADS) as pool:
        list(pool.map(fs.delete_file, stale))
        parts = list(pool.map(read, done))
    if not done:
        return StagedCommit(None, 0, 0, 0, len(stale))
    notes = segment_notes(parts)
    data = _write(path, table, target, [p.replace_schema_metadata(None) for p in parts],
                  "append", CommitProperties(app_transactions=txns,
                                             custom_metadata=notes or None))
    with ThreadPoolExecutor(_STAGED_THREADS) as pool:
        list(pool.map(fs.delete_file, done))
    return StagedCommit(_dt(path).version() if target is None else target.version(),
                        len(done), data.num_rows, len(txns), len(stale))


#: a segment's schema metadata under a key with this prefix is a writer's note for the
#: commit that appends it (JSON), carried into its ``commitInfo``; any other key is the
#: spool's own (the native shipper's cursor)
NOTE_PREFIX = b"kafka_audit."


def segment_notes(parts: list[pa.Table]) -> dict[str, list]:
    """The notes the segments of one commit carry (staged ones, or a ledger's spooled
    batch files): per key, each segment's, in order (a list: several writers' notes share
    the commit). A note that is not JSON is left out, said in a line."""
    notes: dict[str, list] = {}
    for part in parts:
        for key, value in (part.schema.metadata or {}).items():
            if not key.startswith(NOTE_PREFIX):
                continue
            try:
                notes.setdefault(key.decode(), []).append(json.loads(value))
            except (UnicodeDecodeError, ValueError):
                log.warning("a staged segment's note %r is not JSON: left out", key[:64])
    return notes


def commit_metadata(path: str) -> Iterator[str]:
    """The ``userMetadata`` of every commit of the table, newest first ("" where none)."""
    if not table_exists(path):
        return
    for commit in _dt(path).history():
        yield commit.get("userMetadata") or ""


def _add_actions(dt) -> pa.Table:
    """The live files of a loaded ``DeltaTable`` with their statistics, one row each."""
    return pa.table(dt.get_add_actions(flatten=True))  # delta-rs hands arro3: to pyarrow


def live_files(path: str) -> pa.Table:
    """The live files of the table at ``path`` with their statistics (``path``,
    ``num_records``, ``min.<column>``, ``max.<column>``, ...), one row each, from the Delta
    log (no data read; the table must exist); inside :func:`one_snapshot_each` found once
    per loaded version (a pass asks its tables' statistics several times)."""
    cache = _SNAPSHOTS.get()
    if cache is None:
        return _add_actions(_dt(path))
    if (path, "adds") not in cache:
        cache[(path, "adds")] = _add_actions(_dt(path))
    return cache[(path, "adds")]


def max_in_files(path: str, column: str) -> int | None:
    """The largest value of a numeric ``column`` over the table's live files, from the file
    statistics in the Delta log (no data read); None if the table is empty or absent, and
    raises ``LookupError`` if some file carries no statistic for it (the caller must scan)."""
    if not table_exists(path):
        return None
    adds = live_files(path)
    if adds.num_rows == 0:
        return None
    name = f"max.{column}"
    if name not in adds.column_names or adds.column(name).null_count:
        raise LookupError(f"{path}: no {column} statistics in some files")
    return pc.max(adds.column(name)).as_py()


def rows_in_files(path: str, column: str, value: int) -> int:
    """An upper bound of the rows whose numeric ``column`` equals ``value``: the rows of the
    live files whose statistics admit it (from the Delta log, no data read). Raises
    ``LookupError`` if some file carries no statistic for it."""
    if not table_exists(path):
        return 0
    adds = live_files(path)
    if adds.num_rows == 0:
        return 0
    if adds.column("num_records").null_count:
        raise LookupError(f"{path}: no row counts in some files")
    return int(pc.sum(adds.column("num_records").filter(
        _admitting(adds, path, column, value))).as_py() or 0)


def _admitting(adds: pa.Table, path: str, column: str, value: int) -> pa.Array:
    """Which live files (``adds``, at least one) may hold ``column == value``, by their
    statistics; ``LookupError`` if some file carries none for it."""
    lo, hi = f"min.{column}", f"max.{column}"
    if lo not in adds.column_names or adds.column(lo).null_count or adds.column(hi).null_count:
        raise LookupError(f"{path}: no {column} statistics in some files")
    return pc.and_(pc.less_equal(adds.column(lo), value), pc.greater_equal(adds.column(hi), value))


# ---- the Delta log and data files, through pyarrow.fs: a folder or an object store ----
# (the same calls for both; on local disk a probe costs about what os.path's did:
# docs/benchmarks.md, "a probe for a Delta log file")


def _info(name: str):
    """pyarrow's FileInfo of ``name`` (a path or a URI)."""
    at = locate(name)
    return at.fs.get_file_info(at.path)


def _exists(name: str) -> bool:
    return _info(name).type == FileType.File


def _is_dir(name: str) -> bool:
    """A folder (local), or a prefix some object has (an object store has no folders)."""
    info = _info(name)
    if info.type == FileType.Directory:
        return True
    return info.type == FileType.NotFound and is_remote(name) and bool(_names(name))


def _read_text(name: str) -> str | None:
    """A small file's text (a commit, ``_last_checkpoint``); None if it does not exist."""
    at = locate(name)
    try:
        with at.fs.open_input_stream(at.path) as f:
            return f.read().decode("utf-8")
    except FileNotFoundError:
        return None
    except OSError as exc:  # pyarrow's S3 "not found" is an OSError naming it
        if "NoSuchKey" in str(exc) or "Path does not exist" in str(exc):
            return None
        raise


def _listing(name: str, recursive: bool = False) -> list:
    """The FileInfos under the folder or prefix ``name`` (none if there is none); their
    ``path`` is as the file system names it (no scheme)."""
    at = locate(name)
    return at.fs.get_file_info(FileSelector(at.path, allow_not_found=True,
                                            recursive=recursive))


def _names(name: str) -> list[str] | None:
    """The entries' names in the folder or prefix ``name``; None if it has none."""
    found = [i.base_name for i in _listing(name)]
    return found or None


def _delete(fs_path: str, table: str) -> None:
    """Delete a file that :func:`_listing` of ``table``'s folder named."""
    locate(table).fs.delete_file(fs_path)


def _data_file(path: str, relative: str) -> str:
    """A data file named in the log (relative, URL-quoted) as a path or URI."""
    return f"{path}/{unquote(relative)}"


def _log_name(path: str) -> str:
    return f"{path}/_delta_log"


def _commit_name(path: str, version: int) -> str:
    """A commit's file name as plain text (the API probes these with ``os.path`` calls)."""
    return f"{_log_name(path)}/{version:020d}.json"


#: an object store's round trips side by side: the commits an audit pass reads (a producer's
#: ledger commits every second), the next commit files probed (bench/table_paths.py)
_LOG_THREADS = 16


def _side_by_side(path: str, fn, items: list) -> list:
    """``fn`` over ``items`` in order; on an object store, side by side (each call is a
    round trip of milliseconds), on disk one after another (each is microseconds)."""
    if len(items) < 2 or not is_remote(path):
        return [fn(i) for i in items]
    with ThreadPoolExecutor(min(_LOG_THREADS, len(items)),
                            thread_name_prefix="kafka-audit-log") as pool:
        return list(pool.map(fn, items))


def _last_from(path: str, version: int) -> int:
    """The newest version from ``version`` on, a commit that exists: the next commit files
    probed (commits appear whole, written beside and then created atomically, and in
    order: a writer creates version n + 1 only after reading n). On an object store, after
    the first probe finds a newer commit, the following ones are probed side by side,
    2, 4, ... 16 at a time: an idle table costs one request, one behind by 30 commits
    five rounds instead of 31."""
    batch = 1
    while True:
        found = _side_by_side(path, _exists, [_commit_name(path, version + i)
                                              for i in range(1, batch + 1)])
        for there in found:
            if not there:
                return version
            version += 1
        if is_remote(path):
            batch = min(2 * batch, _LOG_THREADS)


def _commit_actions(path: str, version: int) -> list[dict] | None:
    """The actions of one commit, from its JSON file in the Delta log (None: no such file,
    e.g. removed by the log's own cleanup after a checkpoint)."""
    text = _read_text(_commit_name(path, version))
    if text is None:
        return None
    return [json.loads(line) for line in text.splitlines() if line.strip()]


def _commits(path: str, first: int, last: int) -> Iterator[tuple[int, list[dict] | None]]:
    """Each commit from ``first`` to ``last`` and its actions (None: its file is gone), in
    order; on an object store read ``_LOG_THREADS`` at a time, side by side."""
    step = _LOG_THREADS if is_remote(path) else 1
    for start in range(first, last + 1, step):
        versions = list(range(start, min(start + step, last + 1)))
        yield from zip(versions, _side_by_side(
            path, lambda v: _commit_actions(path, v), versions), strict=True)


def _last_checkpoint(path: str) -> int:
    try:
        return int(json.loads(_read_text(f"{_log_name(path)}/_last_checkpoint"))["version"])
    except (ValueError, KeyError, TypeError):  # TypeError: no such file (None)
        return -1


def probe_version(path: str, known: int | None) -> int | None:
    """The table's newest version (None: no table), found from ``known`` (a version read
    before) by probing the next commit files; a listing of the log only without one.
    Plain ``os.path`` calls: the API runs this for every table on every request."""
    if known is not None and known >= 0 and _exists(_commit_name(path, known)):
        return _last_from(path, known)
    names = _names(_log_name(path))
    if names is None:
        return None
    versions = [int(name[:20]) for name in names if name.endswith(".json") and name[:20].isdigit()]
    if not versions:  # a table being created: not there yet
        return None
    return _last_from(path, max(versions))


def commit_time(path: str, version: int) -> float | None:
    """The commit timestamp (s) of the table's ``version``, from its commitInfo (or the
    commit file's time); None if that commit file cannot be read."""
    commit = _commit_name(path, version)
    try:
        text = _read_text(commit)
        if text is None:
            return None
        for line in text.splitlines():
            if '"commitInfo"' in line:
                ts = json.loads(line)["commitInfo"].get("timestamp")
                if ts is not None:
                    return ts / 1000.0
        info = _info(commit)
        return None if info.mtime is None else info.mtime.timestamp()
    except (OSError, ValueError):
        return None


def latest_version(path: str, at_least: int = -1) -> int:
    """The table's newest version, found by looking for the commit files after ``at_least``
    (or after the last checkpoint): no table state is loaded. -1 if there is no commit.

    Commits appear whole (written beside, then created atomically), so a version seen
    here can be read."""
    v = max(at_least, _last_checkpoint(path))
    if v < 0 and not _exists(_commit_name(path, 0)):
        return -1
    return _last_from(path, max(v, 0))


def _records(add: dict) -> int | None:
    try:
        return int(json.loads(add.get("stats") or "{}")["numRecords"])
    except (KeyError, TypeError, ValueError):
        return None


def data_changes_since(path: str, version: int, skip_apps: Collection[str] = (),
                       notes: CommitNotes | None = None
                       ) -> tuple[int, dict[str, int | None]] | None:
    """The current version and the files that commits after ``version`` added with
    ``dataChange`` true (relative path -> rows, None where the log holds no statistic),
    read from each commit's JSON file; None if one of those files is gone (the log's
    cleanup removed it after a checkpoint).

    A compaction (OPTIMIZE) removes files and adds their rows again in new files, both
    with ``dataChange`` false: its files are left out, so rows appended once are
    reported once, whatever was compacted since. A file added and removed again as a
    data change (a delete) inside the range is left out too. Commits that carry an
    idempotent transaction of an app in ``skip_apps`` are left out whole. ``notes``: also
    collect what the commits read say under its key in their ``commitInfo``."""
    current = latest_version(path, version)
    files: dict[str, int | None] = {}
    for v, actions in _commits(path, version + 1, current):
        if actions is None:
            return None
        if notes is not None:
            notes.take(v, actions)
        apps = {(a.get("txn") or {}).get("appId") for a in actions} - {None}
        if RETENTION_APP in apps or (skip_apps and apps & set(skip_apps)):
            continue
        for a in actions:
            if (add := a.get("add")) is not None and add.get("dataChange", True):
                files[add["path"]] = _records(add)
            elif (rm := a.get("remove")) is not None and rm.get("dataChange", True):
                files.pop(rm["path"], None)
    return current, files


def appends_by_commit(path: str, version: int, until: int
                      ) -> list[tuple[int, list[str]]] | None:
    """Per commit after ``version`` up to ``until``, the data files it appended (absolute
    paths); None if a commit did anything else to the rows (a delete or an overwrite, a
    schema or protocol change, a deletion vector) or its commit file is gone: then only
    reading the table again is exact. A compaction (adds and removes with ``dataChange``
    false) leaves the rows as they were: it contributes no file."""
    out: list[tuple[int, list[str]]] = []
    for v, actions in _commits(path, version + 1, until):
        if actions is None:
            return None
        files = []
        for a in actions:
            if "metaData" in a or "protocol" in a:
                return None
            if (add := a.get("add")) is not None:
                if add.get("deletionVector"):
                    return None
                if add.get("dataChange", True):
                    files.append(_data_file(path, add["path"]))
            elif (rm := a.get("remove")) is not None and rm.get("dataChange", True):
                return None
        out.append((v, files))
    return out


def conform(t: pa.Table, schema: pa.Schema) -> pa.Table:
    """``t`` in ``schema``'s column order and types, every column nullable (as Spark writes
    them; a column ``t`` lacks is nulls), so that rows read from files of either engine
    concatenate."""
    target = pa.schema([pa.field(f.name, f.type) for f in schema])
    if t.schema.equals(target):
        return t
    cols = [t.column(f.name).cast(f.type) if f.name in t.column_names
            else pa.nulls(t.num_rows, f.type) for f in target]
    return pa.Table.from_arrays(cols, schema=target)


class AppendedRows:
    """A filtered read of a table whose rows are appended (``acks``, ``findings``), kept
    from one call to the next: a call reads only the files that the commits since the
    last call appended (:func:`appends_by_commit`), the table again only when a commit did
    more than append; a compaction reads nothing. A job that looks at the same rows every
    few seconds then pays for the new files, not for the table's whole history.

    ``full_reads`` and ``appended_files`` count the two kinds of read (for tests)."""

    def __init__(self, path: str, table: str, where: pc.Expression | None = None,
                 columns: list[str] | None = None) -> None:
        self.path, self.table, self.where, self.columns = path, table, where, columns
        self.version = -1
        empty = arrow_schema(table).empty_table()
        self.data = conform(empty.select(columns) if columns else empty,
                            (empty.select(columns) if columns else empty).schema)
        self.full_reads = self.appended_files = 0

    def read(self) -> pa.Table:
        """The rows as of the table's latest version."""

        if not table_exists(self.path):
            return self.data
        v = latest_version(self.path, self.version)
        if v == self.version:
            return self.data
        commits = appends_by_commit(self.path, self.version, v) if self.version >= 0 else None
        if commits is None:
            self.data = conform(read_table(self.path, self.table, self.columns, self.where,
                                           version=v), self.data.schema)
            self.full_reads += 1
        else:
            new = [conform(read_file(f, self.columns, self.where), self.data.schema)
                   for _, files in commits for f in files]
            self.appended_files += len(new)
            self.data = pa.concat_tables([self.data, *new])
            if self.data.column(0).num_chunks > 64:
                self.data = self.data.combine_chunks()
        self.version = v
        return self.data


@dataclass
class CommitNotes:
    """What commits say under ``key`` in their ``commitInfo`` (a writer's notes beside its
    rows, e.g. the ack ledgers' :data:`~kafka_audit.schemas.tables.LEDGER_NOTES`), as
    ``(version, note)`` in commit order, collected by :func:`files_added_since`.
    ``unread``: the versions whose commit file was gone (the log's cleanup): their notes,
    if any, are out of reach."""

    key: str
    found: list[tuple[int, Any]] = field(default_factory=list)
    unread: list[int] = field(default_factory=list)

    def take(self, version: int, actions: list[dict]) -> None:
        for a in actions:
            info = a.get("commitInfo")
            if isinstance(info, dict) and self.key in info:
                self.found.append((version, info[self.key]))

    def read(self, path: str, first: int, last: int) -> None:
        """Collect from the commits ``first`` to ``last`` (their files only)."""
        for v, actions in _commits(path, first, last):
            if actions is None:
                self.unread.append(v)
            else:
                self.take(v, actions)


def files_added_since(path: str, version: int, skip_apps: Collection[str] = (),
                      notes: CommitNotes | None = None
                      ) -> tuple[int, list[str], int | None]:
    """The table's current version, the data files holding the rows appended after
    ``version`` (-1: every live file) and their row count (from the Delta log's
    statistics; None if a file carries none). Paths are absolute. ``notes``: also collect
    the commits' notes under its key, of every commit after ``version`` (from version 0
    when ``version`` is -1: the first read of a table reads its whole log once).

    Exact for append-only tables (``acks``, ``consumed``, ``cluster_events``), also across
    compactions: the appended files are those of :func:`data_changes_since` (a file a
    later compaction removed is still read: vacuum keeps it for
    ``steady.vacuum_retention_hours``, or below an hour ``tombstone_retention_hours``,
    at least 5 minutes: longer than one audit pass). Should a commit
    file after ``version`` be gone (:func:`trim_log` keeps ``steady.log_retention_hours`` of
    log), the answer falls back to the live files now less those live at ``version``,
    which is exact only if no compaction ran in between (logged); :class:`TableError` if
    ``version`` itself is gone.
    """
    if version < 0:  # everything: the live files (a compaction's rows counted once)
        dt = _dt(path)
        adds = _add_actions(dt)
        rows = dict(zip(adds.column("path").to_pylist(), adds.column("num_records").to_pylist(),
                        strict=True))
        current = dt.version()
        if notes is not None:
            notes.read(path, 0, current)
    else:
        found = data_changes_since(path, version, skip_apps, notes)
        if found is not None:
            current, rows = found
        else:
            log.warning("%s: commit files after version %d are gone (log cleanup); new files "
                        "found by comparing snapshots, exact only without a compaction since",
                        path, version)
            dt = _dt(path)
            current = dt.version()
            if notes is not None:  # again: those read before the gap were collected
                notes.found.clear()
                notes.read(path, version + 1, current)
            adds = _add_actions(dt)
            rows = dict(zip(adds.column("path").to_pylist(),
                            adds.column("num_records").to_pylist(), strict=True))
            try:
                then = _dt(path, version)
            except Exception as exc:  # noqa: BLE001 - delta-rs names no class for it
                raise TableError(
                    f"{path}: its Delta log no longer holds version {version} (the last one "
                    f"read from it): the rows added since cannot be told from the older "
                    f"ones. Its log is kept steady.log_retention_hours; a reader stopped "
                    f"longer than that must start again (a new warehouse or `home`)"
                ) from exc
            for f in _add_actions(then).column("path").to_pylist():
                rows.pop(f, None)
        if version >= current:
            return current, [], 0
    counts = list(rows.values())
    total = None if any(n is None for n in counts) else sum(counts)
    return current, sorted(_data_file(path, f) for f in rows), total


# ---- upkeep: compaction, vacuum, checkpoints (scheduled by jobs/upkeep/maintenance.py) ----

def compact(path: str, target_size: int | None = None) -> dict | None:
    """OPTIMIZE: rewrite the table's small files into few (``dataChange`` false: readers of
    appended rows, :func:`files_added_since`, are not fooled), then write a checkpoint so
    readers replay the log from there. Files of ``target_size`` bytes or more (delta-rs's
    default: 100 MB) are left as they are, and a file that would be rewritten alone is
    too. Returns delta-rs's metrics; None if the table is absent or a concurrent commit
    conflicted with this one (nothing changed: try again later). Appends by other writers
    meanwhile are kept: they do not conflict."""
    from deltalake.exceptions import CommitFailedError

    if not table_exists(path):
        return None
    forget(path)
    try:
        metrics = _dt(path).optimize.compact(target_size=target_size)
    except CommitFailedError as exc:
        log.info("compaction of %s lost to a concurrent commit, retried later: %s", path, exc)
        return None
    if metrics.get("numFilesRemoved"):
        checkpoint(path)
    return metrics


def vacuum(path: str, retention_hours: int | None, keep_last_versions: int = 0) -> int:
    """Delete the data files no version newer than ``retention_hours`` references (and,
    with ``keep_last_versions``, none of the last so many versions: a reader that loaded
    one of them a moment ago still finds its files). Returns the files deleted. None:
    the table's own tombstone retention (:data:`TOMBSTONE_PROPERTY`, which may be
    minutes; delta-rs takes whole hours otherwise).

    Only the files the log names as removed (delta-rs's default vacuum): those names
    leave the checkpoints after the tombstone retention; what that misses is
    :func:`vacuum_unnamed`'s."""
    if not table_exists(path):
        return 0
    dt = _dt(path)
    keep = list(range(max(0, dt.version() - keep_last_versions + 1), dt.version() + 1)) \
        if keep_last_versions else None
    return _vacuum(path, dt, retention_hours=retention_hours, keep_versions=keep)


def vacuum_unnamed(path: str, hours: int | None) -> int:
    """Delete the table's files that no live version names and that were written (or
    removed) ``hours`` ago: a file replaced while the service was stopped longer than
    the tombstone retention (its name gone from the checkpoints before :func:`vacuum`
    saw it), a failed writer's file that no commit names. The folder is listed
    (delta-rs's ``full`` vacuum). ``hours`` must exceed what any writer takes from
    writing a file to committing it: a younger file may be about to be committed. None:
    the table's tombstone retention, as for :func:`vacuum`."""
    if not table_exists(path):
        return 0
    return _vacuum(path, _dt(path), retention_hours=hours, full=True)


def _vacuum(path: str, dt, **how) -> int:
    from deltalake.exceptions import CommitFailedError

    try:
        return len(dt.vacuum(dry_run=False, enforce_retention_duration=False, **how))
    except CommitFailedError as exc:  # its log entries only: nothing lost, retried later
        log.info("vacuum of %s lost to a concurrent commit, retried later: %s", path, exc)
        return 0


def checkpoint(path: str) -> None:
    """Write a Delta checkpoint at the current version (readers then replay the log from
    it: the cost of loading the table stops growing with its commits)."""
    if table_exists(path):
        _dt(path).create_checkpoint()


_LOG_ENTRY = re.compile(r"^(\d{20})\.(json|crc|checkpoint\.parquet|checkpoint\.\d+\.\d+\.parquet)$")


def trim_log(path: str, keep_hours: float, now: float | None = None) -> int:
    """Delete the table's Delta log entries (commit files and checkpoints) that are both
    older than ``keep_hours`` and before its last checkpoint, as the Delta protocol allows
    and as Delta's own log cleanup does; returns how many were deleted.

    A table that commits every second gains a log file a second, kept 30 days by default
    (``delta.logRetentionDuration``): gigabytes of history that only time travel needs.
    Readers load the last checkpoint and the commits after it, so none of them needs
    what is deleted here; what it takes away is time travel to those versions and the
    incremental reads' "what changed since version N" for an N that old
    (:func:`files_added_since` then says so). Written here rather than delta-rs's
    ``cleanup_metadata``, which reads the retention from that table property only:
    setting it is a metadata commit, and a metadata commit fails every blind append in
    flight (the ledger's, the consume job's) as a conflict."""
    last = _last_checkpoint(path)
    if last <= 0:
        return 0
    cutoff = (time.time() if now is None else now) - keep_hours * 3600
    deleted = 0
    for info in _listing(_log_name(path)):
        m = _LOG_ENTRY.match(info.base_name)
        if m is None or int(m.group(1)) >= last or info.mtime is None \
                or info.mtime.timestamp() >= cutoff:
            continue
        try:
            _delete(info.path, path)
            deleted += 1
        except FileNotFoundError:  # deleted by another cleanup meanwhile
            continue
    return deleted


@dataclass(frozen=True)
class Footprint:
    """What a table costs on disk: its version, its live files and every file it holds."""

    version: int
    live_files: int
    live_bytes: int
    data_files: int  # parquet files on disk, live or not yet vacuumed
    data_bytes: int
    log_bytes: int


def footprint(path: str) -> Footprint | None:
    """The table's :class:`Footprint` (None if it does not exist)."""
    if not table_exists(path):
        return None
    dt = _dt(path)
    adds = _add_actions(dt)
    files = [i for i in _listing(path, recursive=True) if i.type == FileType.File]
    data = [i for i in files if i.base_name.endswith(".parquet")
            and "/_delta_log/" not in i.path]
    log_files = [i for i in files if i.path.rsplit("/", 1)[0].endswith("/_delta_log")]
    return Footprint(dt.version(), adds.num_rows,
                     int(pc.sum(adds.column("size_bytes")).as_py() or 0),
                     len(data), sum(i.size or 0 for i in data),
                     sum(i.size or 0 for i in log_files))


@dataclass(frozen=True)
class Progress:
    """The audit's committed progress: the last pass and the source versions it consumed.

    ``generation`` is the ``pass_id`` the committed state's ``audit_hot`` rows carry
    (the committing pass; None before the first pass)."""

    pass_id: int = 0
    acks_version: int = -1
    consumed_version: int = -1
    generation: int | None = None

    def to_json(self) -> str:
        return json.dumps({"pass_id": self.pass_id, "acks_version": self.acks_version,
                           "consumed_version": self.consumed_version})


def committed_progress(settings) -> Progress:
    """The audit's commit point: each pass appends its state and its progress row to
    ``audit_hot`` in one commit, so the latest progress row names the committed pass."""
    path = settings.table_path("audit_hot")
    progress = pc.field("kind") == "progress"
    with one_snapshot_each():  # the log loaded once for the questions below
        try:  # the newest generation's files alone, by their statistics
            top = max_in_files(path, "pass_id")
            t = None if top is None else read_admitting(path, "audit_hot", "pass_id", top,
                                                        ["progress", "pass_id"], progress)
        except LookupError:
            t = None
        if t is None or t.num_rows == 0:  # not where expected: every file
            t = read_table(path, "audit_hot", ["progress", "pass_id"], where=progress)
    if t.num_rows == 0:
        return Progress()
    rows = [(json.loads(p), g) for p, g in zip(t.column("progress").to_pylist(),
                                               t.column("pass_id").to_pylist(), strict=True)]
    latest, generation = max(rows, key=lambda r: r[0]["pass_id"])
    return Progress(**latest, generation=generation)


def committed_pass(settings) -> int:
    """The last committed audit pass (0: none yet). Findings and partition states of later
    passes belong to a pass that died before its commit point and are never served."""
    return committed_progress(settings).pass_id
