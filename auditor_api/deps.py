"""Injected dependencies: settings and the table reader (tests replace them).

The reader answers from :class:`~kafka_audit.auditor_api.snapshots.Snapshots`: Arrow
copies of the Delta tables (delta-rs, no Spark), one per table and version, kept
between requests by the app (``app.state.snapshots``, one per warehouse).
"""

from __future__ import annotations

import json
import os
from typing import Annotated, Any

import pyarrow as pa
import pyarrow.compute as pc
from fastapi import Depends, Request

from kafka_audit.auditor_api.folds import SUMMARY_FOLDS
from kafka_audit.auditor_api.snapshots import Snapshot, Snapshots
from kafka_audit.rollups import ROLLED_UP, as_table_rows
from kafka_audit.settings import Settings, get_settings
from kafka_audit.store import Progress, read_table, table_exists

#: rows of a table the snapshots hold; the rest is never read (the audit's state is large)
KEEP = {"audit_hot": pc.field("kind") == "progress"}
#: columns of a table the snapshots read (the others are held as nulls)
COLUMNS = {"audit_hot": ["kind", "pass_id", "progress"]}
#: tables whose rows the snapshots fold and let go: they gain rows with every write (the
#: ledger, the consumed stream); a request that needs their rows reads them from the
#: table. The findings are held whole (in the spool, below): the default listing starts
#: with confirmations, and reading those from the table at every pass cost 1.7-2.2 s a page
#: under a live audit's commits (``bench/api_bench.py --churn --live``, 2026-11-26)
UNHELD = frozenset({"acks", "consumed"})
#: tables whose rows are held in files mapped into memory (``snapshots._Spool``), not on the
#: heap: the findings gain a row per batch of writes judged, and held on the heap they made
#: the API's memory grow with the hours it ran (25-40 MB an hour at 5,000 msg/s)
SPOOLED = frozenset({"findings"})


def new_snapshots(settings: Settings) -> Snapshots:
    """The API's snapshots of ``settings``' warehouse: the running sums of every table, the
    rows of those that do not grow with every write (``UNHELD``), the findings' in files
    mapped into memory under ``<home>/api-spool`` (``SPOOLED``)."""
    recheck = settings.api.version_check_seconds
    if recheck is None:
        recheck = 1.0 if settings.remote_warehouse else 0.0
    return Snapshots(settings.table_path, KEEP, SUMMARY_FOLDS, COLUMNS, UNHELD, SPOOLED,
                     settings.home_dir / "api-spool", recheck_seconds=recheck,
                     seed=rollup_seed(settings))


def rollup_seed(settings: Settings):
    """What a table's running sums start from when it is read whole: the ``rollups`` rows of
    the retention rounds its version has committed (none of a later round: a round writes
    its sums before it drops), as rows of the table (``rollups.as_table_rows``)."""
    path = settings.table_path("rollups")

    def seed(name: str, applied: int) -> pa.Table | None:
        if name not in ROLLED_UP or applied <= 0 or not table_exists(path):
            return None
        t = read_table(path, "rollups", where=(pc.field("table") == name)
                       & (pc.field("round") <= pa.scalar(applied, pa.int64())))
        return as_table_rows(name, t)

    return seed


#: (home as configured, working directory) -> the warehouse's resolved path
_WAREHOUSES: dict[tuple[str, str | None, str], str] = {}


def warehouse_of(settings: Settings) -> str:
    """``settings.warehouse_uri``, resolved once per home and warehouse: resolving a folder
    costs a dozen system calls and every request asks for it."""
    key = (str(settings.home), settings.warehouse, os.getcwd())
    found = _WAREHOUSES.get(key)
    if found is None:
        found = _WAREHOUSES[key] = settings.warehouse_uri
    return found


def snapshots_for(app, settings: Settings) -> Snapshots:
    """The app's snapshots of the warehouse ``settings`` name (made on first use)."""
    registry: dict[str, Snapshots] | None = getattr(app.state, "snapshots", None)
    if registry is None:
        app.state.snapshots = registry = {}
    key = warehouse_of(settings)
    found = registry.get(key)
    if found is None:
        found = registry.setdefault(key, new_snapshots(settings))
    return found


class TableReader:
    """Reads the warehouse's Delta tables from the snapshots: no Spark session, no table read
    twice at one version."""

    def __init__(self, settings: Settings, snapshots: Snapshots | None = None) -> None:
        self.settings = settings
        self.snapshots = snapshots or new_snapshots(settings)

    def snapshot(self, table: str) -> Snapshot:
        return self.snapshots.get(table)

    def read(self, table: str, where: pc.Expression | None = None,
             columns: list[str] | None = None) -> pa.Table:
        """The table as its snapshot stands, filtered; a table whose rows are not held
        (``UNHELD``) is read as of the version its snapshot stands for."""
        snap = self.snapshot(table)
        if snap.data is None:  # rows not held: read as of the version the snapshot stands for
            return self.snapshots.read(table, snap.version, where, columns)
        t = snap.data
        if where is not None:
            t = t.filter(where)
        return t.select(columns) if columns else t

    def memo(self, key: Any, tables: tuple[str, ...], compute, family: Any = None) -> Any:
        """``compute(*snapshots)``, kept until one of ``tables`` changes (the last few of a
        ``family`` only)."""
        return self.snapshots.memo(key, tables, compute, family)

    def dropped(self, table: str) -> pa.Table | None:
        """What retention dropped from ``table`` (up to the round its snapshot committed),
        summed, as rows of the table: for totals computed from its rows rather than from
        its running sums."""
        return self.memo(("dropped", table), (table, "rollups"),
                         lambda snap, _r: self.snapshots.dropped(table, snap))

    def exists(self, table: str) -> bool:
        return table_exists(self.settings.table_path(table))

    def newest_acks(self, acks_version: int) -> dict:
        """topic -> the newest ack time the ledger held at ``acks_version``: from the running
        sums for a recent version, else from the rows that version held."""
        if acks_version < 0:
            return {}
        found = self.snapshots.fold("ack_sums").newest_at(acks_version)
        if found is not None:
            return found

        def compute() -> dict:  # only the answer is kept, not the rows
            t = self.snapshots.read("acks", acks_version, columns=["topic", "last_ack_time"])
            if t.num_rows == 0:
                return {}
            return {r["topic"]: r["last_ack_time_max"] for r in
                    t.group_by("topic").aggregate([("last_ack_time", "max")]).to_pylist()}

        return self.snapshots.memo(("newest_acks", acks_version), (), compute)

    def known_partitions(self) -> dict[str, frozenset[int]]:
        """topic -> the partitions any table names (the ledger, the consumed records, the
        findings of any pass, the cluster events): from the running sums and the events
        held, no table scanned. A request naming anything else is a 404 at once: computing
        its answer would scan the ledger and the stream for nothing, and keep what it
        found."""
        def compute(acks, consumed, findings, events) -> dict[str, frozenset[int]]:
            found = findings.folds["finding_sums"]
            pairs = set(acks.folds["ack_sums"].by_partition)
            pairs |= consumed.folds["stream_sums"].partitions
            pairs |= {(t, p) for sums in (found.base, *found.recent.values())
                      for t, p, _kind in sums}
            if events.data.num_rows:
                seen = events.data.group_by(["topic", "partition"]).aggregate([])
                pairs |= set(zip(seen.column("topic").to_pylist(),
                                 seen.column("partition").to_pylist(), strict=True))
            out: dict[str, set[int]] = {}
            for topic, partition in pairs:
                out.setdefault(topic, set()).add(partition)
            return {t: frozenset(p) for t, p in out.items()}

        return self.memo("known_partitions", ("acks", "consumed", "findings", "cluster_events"),
                         compute)

    def committed_pass(self) -> int:
        """The last committed audit pass: rows of later passes are never served."""
        return self.progress().pass_id

    def progress(self) -> Progress:
        """The committed pass and the source table versions it had taken in: the latest
        progress row of ``audit_hot`` (the audit's commit point, ``store.committed_progress``)."""
        return self.memo("progress", ("audit_hot",), progress_of)


def progress_of(hot: Snapshot) -> Progress:
    """The committed pass and its source versions as of the ``audit_hot`` snapshot ``hot``."""
    t = hot.data
    if t.num_rows == 0:
        return Progress()
    rows = [(json.loads(p), g) for p, g in zip(t.column("progress").to_pylist(),
                                               t.column("pass_id").to_pylist(), strict=True)
            if p is not None]
    if not rows:
        return Progress()
    latest, generation = max(rows, key=lambda r: r[0]["pass_id"])
    return Progress(**latest, generation=generation)


def get_reader(request: Request,
               settings: Annotated[Settings, Depends(get_settings)]) -> TableReader:
    return TableReader(settings, snapshots_for(request.app, settings))


SettingsDep = Annotated[Settings, Depends(get_settings)]
ReaderDep = Annotated[TableReader, Depends(get_reader)]
