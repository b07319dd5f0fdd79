"""Delta writes of Spark DataFrames, small ones committed from the driver with delta-rs.

Spark's Delta writer costs 0.4-0.9 s a write here whatever the size of the data:
a job, then the commit work on the driver (measured with Spark's event log over
``bench/audit_bench.py``'s tables; see the README). The range ledger keeps the
outputs of a consume micro-batch or an audit pass small (thousands of runs for
millions of records), so those are collected as Arrow and committed with
delta-rs, in tens of milliseconds. An output over ``spark.driver_rows`` rows (runs as many as
records: no batching, interleaved producers) goes through Spark's writer, so the
driver never holds more than that.

Both paths write one commit, with the same ``userMetadata``, into tables of the
declared schema; the tables stay readable and writable by both engines.
"""

from __future__ import annotations

import pyarrow as pa

from kafka_audit.jobs.io import table_exists
from kafka_audit.schemas.tables import arrow_schema

__all__ = ["write_delta"]

# what Spark gives tables it creates (see jobs/spark.py); delta-rs must give the same
_NEW_TABLE = {"delta.checkpointInterval": "100"}


def write_delta(df, path: str, table: str, max_driver_rows: int, *, rows: int | None = None,
                mode: str = "append", user_metadata: str | None = None) -> int:
    """Write ``df`` (columns of the declared ``table``) to the Delta table at ``path`` in
    one commit; return the rows written. ``rows``: the row count when the caller knows it
    (``df`` should then be cheap to compute twice, e.g. checkpointed); otherwise ``df`` is
    materialized once and counted. An empty append commits nothing."""
    if rows is None:
        df = df.localCheckpoint(eager=True)
        rows = df.count()
    if rows == 0 and mode == "append":
        return 0
    if rows <= max_driver_rows:
        _write_arrow(pa.table(df.toArrow()), path, table, mode, user_metadata)
    else:
        writer = df.write.format("delta").mode(mode)
        if user_metadata is not None:
            writer = writer.option("userMetadata", user_metadata)
        if mode == "overwrite":  # the declared columns, as the delta-rs path writes them
            writer = writer.option("overwriteSchema", "true")
        writer.save(path)
    return rows


def _write_arrow(data: pa.Table, path: str, table: str, mode: str,
                 user_metadata: str | None) -> None:
    from deltalake import CommitProperties, DeltaTable, write_deltalake

    # the table's own schema (nullability, order) when it has one: Spark creates its
    # columns nullable, the declaration may not. The loaded table is written to as is
    # (its log is read once a write: this runs every consume micro-batch)
    target = DeltaTable(path) if table_exists(path) else None
    schema = arrow_schema(table) if target is None else pa.schema(target.schema().to_arrow())
    data = data.select(schema.names).cast(schema)
    write_deltalake(path if target is None else target, data, mode=mode,
                    configuration=_NEW_TABLE if target is None else None,
                    commit_properties=CommitProperties(
                        custom_metadata={"userMetadata": user_metadata}
                        if user_metadata is not None else None))
