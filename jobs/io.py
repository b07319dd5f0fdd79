"""Delta table access shared by the jobs, the watcher and the API (no Spark needed here)."""

from __future__ import annotations

import json
import logging
from dataclasses import dataclass
from pathlib import Path

import pyarrow as pa
import pyarrow.compute as pc

from kafka_audit.schemas.tables import arrow_schema

log = logging.getLogger(__name__)
_UP_TO_DATE: set[str] = set()  # table paths checked by upgrade_table in this process

__all__ = ["table_exists", "read_table", "append_rows", "append_once", "files_added_since",
           "max_in_files", "Progress", "read_progress", "upgrade_table", "upgrade_tables"]


def table_exists(path: str) -> bool:
    return (Path(path) / "_delta_log").is_dir()


def upgrade_table(path: str, table: str) -> list[str]:
    """Add the declared columns an existing table lacks (nullable), as an older version of
    this project left it; return their names. Columns are only ever added, never changed
    or dropped, so old rows read back with nulls there (for example an ``audit_hot`` row
    without ``horizon``: a failed write that gets one next pass)."""
    from deltalake import DeltaTable, Field, Schema

    if path in _UP_TO_DATE or not table_exists(path):
        return []
    dt = DeltaTable(path)
    have = {f.name for f in dt.schema().fields}
    missing = [f for f in Schema.from_arrow(arrow_schema(table)).fields if f.name not in have]
    if missing:
        dt.alter.add_columns([Field(f.name, f.type, nullable=True) for f in missing])
        log.warning("table %s at %s: added columns %s", table, path,
                    ", ".join(f.name for f in missing))
    _UP_TO_DATE.add(path)  # once per process: this runs at the start of every audit pass
    return [f.name for f in missing]


def upgrade_tables(settings, tables: tuple[str, ...]) -> None:
    """:func:`upgrade_table` for each named table under ``settings``."""
    for table in tables:
        upgrade_table(settings.table_path(table), table)


def read_table(path: str, table: str, columns: list[str] | None = None,
               where: pc.Expression | None = None) -> pa.Table:
    """The table as Arrow; an empty table of the declared schema if it does not exist yet.

    ``where`` is applied inside the scan (row groups whose statistics exclude it are skipped).
    """
    from deltalake import DeltaTable

    if not table_exists(path):
        found = arrow_schema(table).empty_table()
        found = found.filter(where) if where is not None else found
        return found.select(columns) if columns else found
    return DeltaTable(path).to_pyarrow_dataset().to_table(columns=columns, filter=where)


def append_rows(path: str, table: str, rows: list[dict]) -> None:
    """Append plain rows with delta-rs, typed by the table's declared schema."""
    from deltalake import write_deltalake

    if not rows:
        return
    write_deltalake(path, pa.Table.from_pylist(rows, schema=arrow_schema(table)), mode="append")


def append_once(path: str, table: str, rows: list[dict], app_id: str, version: int) -> bool:
    """Append ``rows`` as the idempotent Delta transaction ``(app_id, version)``: nothing is
    written if that app already committed ``version`` or a later one. True if appended."""
    from deltalake import CommitProperties, DeltaTable, Transaction, write_deltalake

    if not rows:
        return False
    done = DeltaTable(path).transaction_version(app_id) if table_exists(path) else None
    if done is not None and done >= version:
        return False
    write_deltalake(path, pa.Table.from_pylist(rows, schema=arrow_schema(table)), mode="append",
                    commit_properties=CommitProperties(
                        app_transactions=[Transaction(app_id, version)]))
    return True


def _add_actions(dt) -> pa.Table:
    """The live files of a loaded ``DeltaTable`` with their statistics, one row each."""
    return pa.table(dt.get_add_actions(flatten=True))  # delta-rs hands arro3: to pyarrow


def max_in_files(path: str, column: str) -> int | None:
    """The largest value of a numeric ``column`` over the table's live files, from the file
    statistics in the Delta log (no data read); None if the table is empty or absent, and
    raises ``LookupError`` if some file carries no statistic for it (the caller must scan)."""
    from deltalake import DeltaTable

    if not table_exists(path):
        return None
    adds = _add_actions(DeltaTable(path))
    if adds.num_rows == 0:
        return None
    name = f"max.{column}"
    if name not in adds.column_names or adds.column(name).null_count:
        raise LookupError(f"{path}: no {column} statistics in some files")
    return pc.max(adds.column(name)).as_py()


def files_added_since(path: str, version: int) -> tuple[int, list[str], int | None]:
    """The table's current version, the data files added after ``version`` (-1: all) and
    their rows (from the Delta log's statistics; None if a file carries none).

    Exact for append-only tables (``acks``, ``consumed``): their files are only ever added.
    Paths are absolute.
    """
    from urllib.parse import unquote

    from deltalake import DeltaTable

    dt = DeltaTable(path)
    current = dt.version()
    if version >= current:
        return current, [], 0
    adds = _add_actions(dt)
    rows = dict(zip(adds.column("path").to_pylist(), adds.column("num_records").to_pylist(),
                    strict=True))
    if version >= 0:
        for f in _add_actions(DeltaTable(path, version=version)).column("path").to_pylist():
            rows.pop(f, None)
    counts = list(rows.values())
    total = None if any(n is None for n in counts) else sum(counts)
    return current, sorted(str(Path(path) / unquote(f)) for f in rows), total


@dataclass(frozen=True)
class Progress:
    """The audit's committed progress: the last pass and the source versions it consumed.

    ``generation`` is the ``pass_id`` column the committed state's ``audit_hot`` rows
    carry: the committing pass, or None in a table written before generations (where
    the state is the rows without one)."""

    pass_id: int = 0
    acks_version: int = -1
    consumed_version: int = -1
    generation: int | None = None

    def to_json(self) -> str:
        return json.dumps({"pass_id": self.pass_id, "acks_version": self.acks_version,
                           "consumed_version": self.consumed_version})


def read_progress(settings) -> Progress:
    """The latest progress row of ``audit_hot``: each pass appends its state and its
    progress row in one commit, so the latest one names the committed state."""
    t = read_table(settings.table_path("audit_hot"), "audit_hot", ["progress", "pass_id"],
                   where=pc.field("kind") == "progress")
    if t.num_rows == 0:
        return Progress()
    rows = [(json.loads(p), g) for p, g in zip(t.column("progress").to_pylist(),
                                               t.column("pass_id").to_pylist(), strict=True)]
    latest, generation = max(rows, key=lambda r: r[0]["pass_id"])
    return Progress(**latest, generation=generation)
