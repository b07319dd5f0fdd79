"""Delta table access shared by the jobs, the watcher and the API (no Spark needed here)."""

from __future__ import annotations

from pathlib import Path

import pyarrow as pa
import pyarrow.compute as pc

from kafka_audit.schemas.tables import arrow_schema

__all__ = ["table_exists", "read_table", "append_rows"]


def table_exists(path: str) -> bool:
    return (Path(path) / "_delta_log").is_dir()


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
