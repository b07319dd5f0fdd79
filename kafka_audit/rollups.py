"""What retention drops, summed: the ``rollups`` table's rows, and those rows as the rows of
the table they came from, for the running totals to take in.

Retention (``jobs/upkeep/retention.py``) drops old rows of ``acks``, ``consumed`` and
``findings``; every total the API serves (``/v1/summary``, ``/v1/topics``, ``/metrics``,
the dashboard) is a sum over those tables' rows. Before a round drops rows it sums them
here, per UTC day and per every column a total groups or filters by (topic, partition,
producer run, durability settings, error, verdict kind, the stream's reasons), into
``rollups``; the API's running sums (``auditor_api/folds.py``) then take each rollup row
in as one row of its table whose ``count`` is the group's (:func:`as_table_rows`): the same
fold code, the same totals, whatever was dropped.

Pure Arrow in, Arrow out (unit-tested against the folds of the rows themselves).
"""

from __future__ import annotations

from dataclasses import dataclass
from datetime import datetime

import pyarrow as pa
import pyarrow.compute as pc

from kafka_audit.schemas.stamp import FORGED, NO_STAMP
from kafka_audit.schemas.tables import arrow_schema

__all__ = ["Spec", "ROLLED_UP", "TIME_COLUMN", "MALFORMED", "rollup", "merge",
           "as_table_rows"]

#: a malformed stamp's error, as a rollup keeps it (the parser's detail varies per record)
MALFORMED = "malformed"


@dataclass(frozen=True)
class Spec:
    """How one table's rows are summed: the time column that ages them out, the columns
    grouped by besides the day and the ``kind`` (as the rollup names them), and the
    columns of its time range."""

    time: str
    groups: tuple[str, ...]
    first: str  # the table's column whose minimum is first_time
    last: str  # ... whose maximum is last_time


ROLLED_UP: dict[str, Spec] = {
    "acks": Spec("last_ack_time", ("topic", "partition", "producer_id", "run_id",
                                   "error_name", "acks", "idempotence", "retries",
                                   "max_in_flight"), "ack_time", "last_ack_time"),
    "consumed": Spec("read_time", ("topic", "partition", "source", "stamped",
                                   "stamp_error", "checksum_ok", "producer_id", "run_id"),
                     "read_time", "read_time"),
    "findings": Spec("detected_at", ("topic", "partition", "subkind", "cause",
                                     "producer_id", "run_id"), "ack_time", "ack_time"),
}

#: the column each retained table's rows age by
TIME_COLUMN = {
    **{t: s.time for t, s in ROLLED_UP.items()},
    "partition_state": "observed_at", "cluster_events": "event_time",
    "dq_results": "validated_at", "fault_events": "at", "suspicions": "ack_time",
}

_TS = pa.timestamp("us", tz="UTC")


def _kind(table: str, t: pa.Table) -> pa.Array:
    if table == "acks":
        return pc.if_else(pc.is_null(t.column("error_name")), "acked", "failed")
    if table == "consumed":
        return t.column("status")
    return t.column("kind")


def _stamp_error(t: pa.Table) -> pa.Array:
    """The stamp error as the totals tell it apart: none, no stamp, forged, malformed."""
    err = t.column("stamp_error")
    plain = pc.or_(pc.equal(err, NO_STAMP), pc.equal(err, FORGED))
    return pc.if_else(pc.or_(pc.is_null(err), pc.fill_null(plain, False)), err,
                      pa.scalar(MALFORMED))


def rollup(table: str, rows: pa.Table, round_: int, at: datetime) -> pa.Table:
    """``rows`` of ``table`` (its declared columns; a batch of what a round drops) summed
    into ``rollups`` rows of ``round_``."""
    spec = ROLLED_UP[table]
    schema = arrow_schema("rollups")
    if rows.num_rows == 0:
        return schema.empty_table()
    cols = {g: rows.column(g) for g in spec.groups}
    if "stamp_error" in cols:
        cols["stamp_error"] = _stamp_error(rows)
    keyed = pa.table({
        **cols,
        "kind": _kind(table, rows),
        "day": pc.cast(pc.cast(rows.column(spec.time), _TS), pa.date32()),
        "rows": pa.repeat(pa.scalar(1, pa.int64()), rows.num_rows),
        "count": pc.cast(rows.column("count"), pa.int64()),
        "first_time": pc.cast(rows.column(spec.first), _TS),
        "last_time": pc.cast(rows.column(spec.last), _TS),
    })
    keys = ["day", "kind", *spec.groups]
    g = keyed.group_by(keys, use_threads=False).aggregate(
        [("rows", "sum"), ("count", "sum"), ("first_time", "min"), ("last_time", "max")])
    n = g.num_rows
    out = {
        "table": pa.repeat(pa.scalar(table), n),
        "round": pa.repeat(pa.scalar(round_, pa.int64()), n),
        "rows": g.column("rows_sum"), "count": g.column("count_sum"),
        "first_time": g.column("first_time_min"), "last_time": g.column("last_time_max"),
        "rolled_at": pa.repeat(pa.scalar(at, _TS), n),
        **{k: g.column(k) for k in keys},
    }
    return pa.Table.from_arrays(
        [out[f.name].cast(f.type) if f.name in out else pa.nulls(n, f.type) for f in schema],
        schema=pa.schema([pa.field(f.name, f.type) for f in schema]))


def merge(parts: list[pa.Table]) -> pa.Table:
    """Rollup rows of one table and round (summed batch by batch) summed once more: one row
    per group."""
    schema = pa.schema([pa.field(f.name, f.type) for f in arrow_schema("rollups")])
    parts = [p for p in parts if p.num_rows]
    if not parts:
        return schema.empty_table()
    t = pa.concat_tables([p.cast(schema) for p in parts])
    if len(parts) == 1:
        return t
    keys = [f.name for f in schema
            if f.name not in ("rows", "count", "first_time", "last_time", "rolled_at")]
    g = t.group_by(keys, use_threads=False).aggregate(
        [("rows", "sum"), ("count", "sum"), ("first_time", "min"), ("last_time", "max"),
         ("rolled_at", "max")])
    names = {"rows": "rows_sum", "count": "count_sum", "first_time": "first_time_min",
             "last_time": "last_time_max", "rolled_at": "rolled_at_max"}
    return pa.Table.from_arrays([g.column(names.get(f.name, f.name)).cast(f.type)
                                 for f in schema], schema=schema)


def as_table_rows(table: str, rollups: pa.Table) -> pa.Table:
    """``rollups`` rows of ``table`` as rows of ``table`` (its declared columns, the others
    null), one per group with the group's ``count``: what the running totals take in for
    the rows a round dropped."""
    target = pa.schema([pa.field(f.name, f.type) for f in arrow_schema(table)])
    t = rollups.filter(pc.equal(rollups.column("table"), table)) if rollups.num_rows \
        else rollups
    n = t.num_rows
    spec = ROLLED_UP[table]
    cols = {g: t.column(g) for g in spec.groups}
    cols["count"] = t.column("count")
    if table == "acks":
        cols |= {"ack_time": t.column("first_time"), "last_ack_time": t.column("last_time")}
    elif table == "consumed":
        cols |= {"status": t.column("kind"), "read_time": t.column("last_time")}
    else:
        cols |= {"kind": t.column("kind"), "ack_time": t.column("last_time"),
                 "detected_at": t.column("rolled_at"),
                 # pass 0 is before every pass: the sums count it under any committed one
                 "pass_id": pa.repeat(pa.scalar(0, pa.int64()), n)}
    return pa.Table.from_arrays(
        [cols[f.name].cast(f.type) if f.name in cols else pa.nulls(n, f.type)
         for f in target], schema=target)
