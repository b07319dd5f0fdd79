"""Delta table access shared by the jobs, the watcher and the API (no Spark needed here)."""

from __future__ import annotations

from pathlib import Path

import pyarrow as pa

from kafka_audit.schemas.tables import arrow_schema

__all__ = ["table_exists", "read_table", "append_rows"]


def table_exists(path: str) -> bool:
    return (Path(path) / "_delta_log").is_dir()


def read_table(path: str, table: str, columns: list[str] | None = None,
               filters: list | None = None) -> pa.Table:
    """The table as Arrow; an empty table of the declared schema if it does not exist yet."""
    from deltalake import DeltaTable

    if not table_exists(path):
        empty = arrow_schema(table).empty_table()
        return empty.select(columns) if columns else empty
    dt = DeltaTable(path)
    return dt.to_pyarrow_table(columns=columns, filters=filters)


def append_rows(path: str, table: str, rows: list[dict]) -> None:
    """Append plain rows with delta-rs, typed by the table's declared schema."""
    from deltalake import write_deltalake

    if not rows:
        return
    write_deltalake(path, pa.Table.from_pylist(rows, schema=arrow_schema(table)), mode="append")
