"""The audit's hot state as rows: ``audit_hot`` rows <-> :class:`PartitionHot`, and the
rows one judge step hands back to the pass (state, findings, re-reads, status).

``audit_hot`` holds one row per state item, ``kind`` naming which: an unjudged
``ack`` run, a ``read`` run still needed, a recently ``judged`` run (for
``reordered``), a frontier ``observation``, and the pass's ``progress`` row.
Each kind fills its own named columns (``schemas/tables.py``).

The judge step (``groupBy().applyInPandas``) returns the state rows plus the
columns of :data:`STEP_COLUMNS`, tagged by ``row``: ``hot``, ``finding``,
``reread`` or ``status``.
"""

from __future__ import annotations

import functools
import json
from collections.abc import Callable, Sequence
from datetime import UTC, datetime, timedelta

import numpy as np
import pandas as pd
import pyarrow as pa
import pyarrow.compute as pc

from kafka_audit.jobs.core.engine import AuditConfig, PartitionHot, step_partition
from kafka_audit.jobs.core.model import AckRun, ClusterEvent, ReadRun
from kafka_audit.jobs.core.rules import change_gate
from kafka_audit.schemas.systems import KAFKA, system_of
from kafka_audit.schemas.tables import arrow_schema, spark_schema

__all__ = ["hot_from_rows", "hot_from_arrow", "hot_table", "step_fn", "arrow_step_fn",
           "step_schema", "step_arrow_schema", "consumed_row", "STEP_COLUMNS"]

#: what a judge step returns besides the ``audit_hot`` columns: name -> Spark SQL type
STEP_COLUMNS = {
    "row": "string",             # hot | finding | reread | status
    "finding_id": "string",      # finding
    "subkind": "string",         # finding
    "cause": "string",           # finding
    "evidence": "string",        # finding: JSON
    "ack_time": "timestamp",     # finding: first ack of the range
    "reason": "string",          # reread: why the range is read again
    "frontier": "bigint",        # status: the consumed frontier
    "settled_frontier": "bigint",  # status: the frontier a settle period ago
    "pending": "bigint",         # status: writes not yet judged
    "unseen": "bigint",          # status: pending writes unread too long
    "oldest_unseen": "timestamp",  # status: ack time of the oldest unseen write
    "suspects_settle": "timestamp",  # status: when what looks lost now will have settled
}


def _aware(v) -> datetime | None:
    # Spark hands pandas naive timestamps in the session time zone, which is UTC
    if v is None or v is pd.NaT or (isinstance(v, float) and pd.isna(v)):
        return None
    return pd.Timestamp(v).to_pydatetime().replace(tzinfo=UTC)


def _naive(v: datetime | None) -> datetime | None:
    return None if v is None else v.astimezone(UTC).replace(tzinfo=None)


def _opt(v):
    """None for every null pandas hands out (None, NaN, NA, NaT), else the value."""
    if v is None or v is pd.NA or v is pd.NaT or (isinstance(v, float) and v != v):
        return None
    return v


def _opt_int(v) -> int | None:
    v = _opt(v)
    return None if v is None else int(v)


_EPOCH = datetime(1970, 1, 1, tzinfo=UTC)


def _times(col: pd.Series) -> list:
    """A timestamp column as aware UTC datetimes, None where null (column-wise: a pandas
    scalar per value costs microseconds, and a pass converts a whole state)."""
    if not pd.api.types.is_datetime64_any_dtype(col):
        return [_aware(v) for v in col.tolist()]
    if col.dt.tz is not None:
        col = col.dt.tz_convert(UTC).dt.tz_localize(None)
    micros = col.to_numpy(dtype="datetime64[us]").astype("int64").tolist()
    return [None if null else _EPOCH + timedelta(microseconds=m)
            for m, null in zip(micros, col.isna().tolist(), strict=True)]


def _ints(col: pd.Series) -> list:
    if pd.api.types.is_integer_dtype(col.dtype) and not col.hasnans:
        return [int(v) for v in col.tolist()]
    return [_opt_int(v) for v in col.tolist()]


def _objects(col: pd.Series) -> list:
    return [_opt(v) for v in col.tolist()]


_TIMES_IN = ("first_ack", "last_ack", "read_time", "judged_at", "observed_at")
_INTS_IN = ("partition", "seq", "count", "offset", "horizon", "leader_epoch", "broker")
_OBJECTS_IN = ("kind", "topic", "producer_id", "run_id", "error_name", "acks", "source",
               "status")


#: the columns each kind of state row is built from, in the order its constructor takes them
_ACK_RUN = ("topic", "partition", "producer_id", "run_id", "seq", "count", "offset",
            "first_ack", "last_ack", "error_name", "acks", "horizon", "broker")
_READ_RUN = ("topic", "partition", "offset", "count", "producer_id", "run_id", "seq",
             "read_time", "source", "status", "leader_epoch")
_JUDGED = ("topic", "partition", "producer_id", "run_id", "seq", "count", "offset", "judged_at")
_OBSERVATION = ("offset", "observed_at")


def _hot_of(columns: Callable[[str, tuple[str, ...]], list[list]]) -> PartitionHot:
    """A partition's state from ``columns(kind, names)``: the values of the rows of that
    kind, column by column, in the rows' order."""
    hot = PartitionHot()
    hot.acks = list(map(AckRun, *columns("ack", _ACK_RUN)))
    hot.reads = list(map(ReadRun, *columns("read", _READ_RUN)))
    hot.judged = [(AckRun(*run, at, at), at)
                  for *run, at in zip(*columns("judged", _JUDGED), strict=True)]
    hot.observations = list(zip(*columns("observation", _OBSERVATION), strict=True))
    return hot


def hot_from_rows(pdf: pd.DataFrame) -> PartitionHot:
    """One partition's ``audit_hot`` rows (and new ack and read rows, in the same columns)."""
    if not len(pdf):
        return PartitionHot()
    c = ({n: _times(pdf[n]) for n in _TIMES_IN} | {n: _ints(pdf[n]) for n in _INTS_IN}
         | {n: _objects(pdf[n]) for n in _OBJECTS_IN})
    rows: dict[str, list[int]] = {}
    for i, kind in enumerate(c["kind"]):
        rows.setdefault(kind, []).append(i)

    def columns(kind: str, names: tuple[str, ...]) -> list[list]:
        mine = rows.get(kind, [])
        return [[c[n][i] for i in mine] for n in names]

    return _hot_of(columns)


def hot_from_arrow(t: pa.Table) -> PartitionHot:
    """:func:`hot_from_rows` of rows held as Arrow (the driver's judgement): the rows of each
    kind taken apart first, so that only the columns a kind uses become Python values (a
    pass converts its whole state: 70,000 rows and more)."""
    kinds = t.column("kind")

    def columns(kind: str, names: tuple[str, ...]) -> list[list]:
        rows = t.filter(pc.equal(kinds, kind))
        return [_arrow_times(rows.column(n)) if n in _TIMES_IN else rows.column(n).to_pylist()
                for n in names]

    return _hot_of(columns)


def _arrow_times(col) -> list:
    """An Arrow timestamp column as aware UTC datetimes, None where null."""
    return [None if m is None else _EPOCH + timedelta(microseconds=m)
            for m in col.cast(pa.int64()).to_pylist()]


def _row(kind: str, topic: str, partition: int, **kw) -> dict:
    return {"kind": kind, "topic": topic, "partition": partition, **kw}


#: rows of one kind as columns: (how many, column -> values; a column left out is null)
_Block = tuple[int, dict[str, list]]


def _block(kind: str, topic: str, partition: int, row: str, n: int, **columns: list) -> _Block:
    return n, {"kind": [kind] * n, "topic": [topic] * n, "partition": [partition] * n,
               "row": [row] * n, **columns}


def _hot_blocks(topic: str, partition: int, hot: PartitionHot, utc: bool = False
                ) -> list[_Block]:
    """One partition's state as ``audit_hot`` columns, a block per kind (``row = hot``);
    its times as they are for columns typed in UTC (``utc``), else naive UTC."""
    def as_time(values) -> list:
        return list(values) if utc else [_naive(v) for v in values]

    acks, reads, judged = hot.acks, hot.reads, hot.judged
    return [
        _block("ack", topic, partition, "hot", len(acks),
               producer_id=[a.producer_id for a in acks], run_id=[a.run_id for a in acks],
               seq=[a.seq for a in acks], count=[a.count for a in acks],
               offset=[a.offset for a in acks],
               first_ack=as_time(a.first_ack for a in acks),
               last_ack=as_time(a.last_ack for a in acks),
               error_name=[a.error for a in acks], acks=[a.acks for a in acks],
               horizon=[a.horizon for a in acks], broker=[a.broker for a in acks]),
        _block("read", topic, partition, "hot", len(reads),
               producer_id=[r.producer_id for r in reads], run_id=[r.run_id for r in reads],
               seq=[r.seq for r in reads], count=[r.count for r in reads],
               offset=[r.offset for r in reads],
               read_time=as_time(r.read_time for r in reads),
               source=[r.source for r in reads], status=[r.status for r in reads],
               leader_epoch=[r.leader_epoch for r in reads]),
        _block("judged", topic, partition, "hot", len(judged),
               producer_id=[a.producer_id for a, _ in judged],
               run_id=[a.run_id for a, _ in judged], seq=[a.seq for a, _ in judged],
               count=[a.count for a, _ in judged], offset=[a.offset for a, _ in judged],
               judged_at=as_time(t for _, t in judged)),
        _block("observation", topic, partition, "hot", len(hot.observations),
               offset=[f for f, _ in hot.observations],
               observed_at=as_time(t for _, t in hot.observations)),
    ]


def _table_of(blocks: list[_Block], schema: pa.Schema) -> pa.Table:
    """Blocks as one table, column by column, each typed at once (a table built row by row
    costs seconds for a large state)."""
    arrays = []
    for f in schema:
        values: list = []
        for n, cols in blocks:
            values.extend(cols.get(f.name) or [None] * n)
        arrays.append(pa.array(values, f.type))
    return pa.Table.from_arrays(arrays, schema=schema)


def hot_table(topic: str, partition: int, hot: PartitionHot, schema: pa.Schema) -> pa.Table:
    """The ``audit_hot`` rows that hold one partition's state (tagged ``row = hot``), as a
    table of ``schema`` (:func:`step_arrow_schema`)."""
    return _table_of(_hot_blocks(topic, partition, hot,
                                 utc=schema.field("read_time").type.tz is not None), schema)


def _judge(key, hot: PartitionHot, events, now: datetime, cfg: AuditConfig, log_ends,
           tz: str | None, idle_acks: pa.Table | None = None) -> pa.Table:
    """One :func:`~kafka_audit.jobs.core.engine.step_partition` and its result as rows of
    :func:`step_arrow_schema` (``tz``: its timestamps' zone, None for naive UTC).
    ``idle_acks``: ack rows :func:`split_idle` passed through (still pending after the
    step): counted in the status row as the engine counts its own pending runs."""
    topic, partition = key[0], int(key[1])
    res = step_partition(topic, hot, events.get((topic, partition), []), now, cfg,
                         log_ends.get((topic, partition)))
    if idle_acks is not None and idle_acks.num_rows:
        _count_idle(res, idle_acks, cfg)
    blocks = _hot_blocks(topic, partition, res.hot, utc=tz is not None)
    found = [_row(f.kind, topic, partition, row="finding", finding_id=f.finding_id,
                  producer_id=f.producer_id, run_id=f.run_id, seq=f.seq, count=f.count,
                  offset=f.offset, ack_time=_naive(f.ack_time), subkind=f.subkind,
                  cause=f.cause, evidence=json.dumps(f.evidence, default=str))
             for f in res.findings]
    found += [_row("reread", topic, partition, row="reread", offset=q.offset,
                   count=q.end - q.offset, reason=q.reason, producer_id=q.producer_id,
                   run_id=q.run_id) for q in res.rereads]
    found.append(_row("status", topic, partition, row="status",
                      frontier=res.clock.stream_frontier,
                      settled_frontier=res.clock.settled_frontier, pending=res.pending,
                      unseen=res.unseen, oldest_unseen=_naive(res.oldest_unseen),
                      suspects_settle=_naive(res.suspects_settle)))
    schema = step_arrow_schema(tz)
    blocks.append((len(found), {f.name: [r.get(f.name) for r in found] for f in schema}))
    return _table_of(blocks, schema)


def _age_us(times: pa.ChunkedArray, now: datetime) -> np.ndarray:
    """``now - t`` in whole microseconds for each timestamp ``t`` of ``times`` (null: below
    any limit)."""
    return _micros(now) - _micros_of(times)


def _micros(t: datetime) -> int:
    """``t`` (UTC when naive) in microseconds since the epoch."""
    aware = t if t.tzinfo else t.replace(tzinfo=UTC)
    return (aware - _EPOCH) // timedelta(microseconds=1)


def _count_idle(res, acks: pa.Table, cfg: AuditConfig) -> None:
    """Add pending runs the engine did not see to ``res``'s counts, as
    :func:`~kafka_audit.jobs.core.rules.judge_partition` counts its own: every write
    pending; those past the stream frontier unseen once their last ack is
    ``cfg.unseen_after_seconds`` old, and the oldest such first ack."""
    off, n = _int_array(acks, "offset"), _int_array(acks, "count")
    res.pending += int(n.sum())
    unread = off + n - np.maximum(off, res.clock.stream_frontier)
    # the engine's test, ``(now - last_ack).total_seconds() > unseen_after_seconds``, on
    # whole microseconds: a ``timedelta`` of the setting would overflow (inf, huge) or round
    late = (_age_us(acks.column("last_ack"), res.clock.now) / 1e6
            > cfg.unseen_after_seconds)
    unseen = (unread > 0) & late
    if unseen.any():
        res.unseen += int(unread[unseen].sum())
        first = pc.min(acks.filter(pa.array(unseen)).column("first_ack")).as_py()
        if res.oldest_unseen is None or first < res.oldest_unseen:
            res.oldest_unseen = first


def step_fn(events: dict[tuple[str, int], list[ClusterEvent]], now: datetime,
            cfg: AuditConfig, log_ends: dict[tuple[str, int], int]):
    """The pandas function a pass runs per ``(topic, partition)`` on Spark: one
    :func:`~kafka_audit.jobs.core.engine.step_partition`, its result as rows."""

    def step(key, pdf):  # no hints: pyspark would try to infer an eval type from them
        return _judge(key, hot_from_rows(pdf), events, now, cfg, log_ends, None).to_pandas(
            coerce_temporal_nanoseconds=True)

    return step


def arrow_step_fn(events: dict[tuple[str, int], list[ClusterEvent]], now: datetime,
                  cfg: AuditConfig, log_ends: dict[tuple[str, int], int], idle: bool = True):
    """:func:`step_fn` over Arrow rows of :func:`step_arrow_schema` (UTC), for the driver;
    the state rows no judgement can touch stay Arrow (:func:`split_idle`; ``idle`` False:
    every row goes through the engine, as on Spark)."""

    def step(key, table: pa.Table) -> pa.Table:
        busy, kept, done = table, None, None
        if idle:
            k = (key[0], int(key[1]))
            busy, done = split_confirmed(key, table, now, cfg, events.get(k, []))
            busy, kept = split_idle(key, busy, now, cfg, log_ends.get(k))
        idle_acks = kept.filter(pc.equal(kept.column("kind"), "ack")) if kept else None
        out = _judge(key, hot_from_arrow(busy), events, now, cfg, log_ends, "UTC", idle_acks)
        return pa.concat_tables([out, *(x.cast(out.schema) for x in (kept, done) if x)])

    return step


#: the columns a passed-through state row of each kind keeps (what :func:`_hot_blocks`
#: writes for it); the others are null, as in a row the engine wrote
_KEPT_COLUMNS = {"ack": frozenset(("kind", "row") + _ACK_RUN),
                 "read": frozenset(("kind", "row") + _READ_RUN),
                 "judged": frozenset(("kind", "row") + _JUDGED)}


def split_idle(key, t: pa.Table, now: datetime, cfg: AuditConfig, log_end: int | None = None
               ) -> tuple[pa.Table, pa.Table]:
    """One partition's rows (:func:`step_arrow_schema`, UTC) as ``(busy, kept)``: what the
    engine must see, and the ``read`` and ``judged`` rows it cannot use in this step and
    the ``ack`` rows it would only keep pending (:func:`_idle_acks`), already as the engine
    would keep them (reads and judged runs within ``cfg.read_retention_seconds``, tagged
    ``row = hot``); the step counts those acks in its status row (:func:`_count_idle`).

    At a steady rate the state is mostly runs read or judged minutes ago and kept for the
    read retention (tens of thousands at 5,000 msg/s), and every step turned all of them
    into Python objects and back; a loss found in a pass took seconds longer for it. The
    engine reads a read run only where it overlaps an unjudged run's offsets, a copy of its
    seqs or that copy's offsets (:func:`~kafka_audit.jobs.core.rules.retained_reads` keeps
    exactly those), and a judged run only as a reorder witness: a lower seq of the same
    producer run above a confirmed write (``_Written.candidates``). So a read is idle when
    it touches none of the ack rows' offsets, copies or copies' offsets (inclusive ends, a
    superset of what is needed), and was read at least ``cfg.settle_seconds`` ago; a judged
    run when no placed ack of its producer run has a last seq at or above its seq and a
    first offset at or below its last. The stream's idle reads still count as frontier
    observations (``rules.settled_frontier``): they are handed in as one observation, their
    highest end when it was last read, which changes neither the settled frontier nor
    what is kept (all of them lie a settle period back). The engine's verdicts do not
    depend on the order of its rows (Spark hands them in any order); the step equals
    the one without this split (``tests/unit/test_hot_state.py``). Where the pass asked
    the partition's log end (``log_end``), acks older than ``cfg.beyond_end_seconds`` are
    never idle: they may lie past the log's end (``rules.beyond_end``). A RabbitMQ key
    (``schemas/systems.py``) is never split: its rules need every row it keeps."""
    if system_of(str(key[0])) != KAFKA:
        return t, t.schema.empty_table()
    kind = t.column("kind")
    reads_at, judged_at = pc.equal(kind, "read"), pc.equal(kind, "judged")
    acks_at = pc.equal(kind, "ack")
    acks = t.filter(acks_at)
    placed = acks.filter(pc.is_valid(acks.column("offset")))
    reads, judged = t.filter(reads_at), t.filter(judged_at)
    frontier = _frontier(t, reads)
    waiting = _idle_acks(acks, reads, frontier)
    if log_end is not None and waiting.any() and log_end <= frontier:
        # the log read whole: old ones may lie past its end. (Not in a catch-up, whose
        # backlog lies below the log end: its millions of acks stay idle)
        old = _age_us(acks.column("last_ack"), now) / 1e6 > cfg.beyond_end_seconds
        waiting &= ~old
    idle_a = acks.filter(pa.array(waiting))
    if not (reads.num_rows or judged.num_rows or idle_a.num_rows):
        return t, t.schema.empty_table()
    idle_reads = _idle_reads(reads, acks, placed, now - timedelta(seconds=cfg.settle_seconds))
    idle_judged = _idle_judged(judged, placed)

    idle_r, idle_j = reads.filter(pa.array(idle_reads)), judged.filter(pa.array(idle_judged))
    busy = [t.filter(pc.invert(pc.or_(pc.or_(reads_at, judged_at), acks_at))),
            acks.filter(pa.array(~waiting)),
            reads.filter(pa.array(~idle_reads)), judged.filter(pa.array(~idle_judged))]
    stream = idle_r.filter(pc.equal(idle_r.column("source"), "stream"))
    if stream.num_rows:
        ends = pc.add(stream.column("offset"), stream.column("count"))
        top = pc.max(ends)
        at = pc.max(stream.filter(pc.equal(ends, top)).column("read_time"))
        busy.append(_table_of([_block("observation", key[0], int(key[1]), "hot", 1,
                                      offset=[top.as_py()], observed_at=[at.as_py()])],
                              t.schema))
    keep = now - timedelta(seconds=cfg.read_retention_seconds)
    kept = [_as_kept(rows.filter(pc.fill_null(pc.greater_equal(rows.column(col), keep), False)),
                     k)
            for rows, k, col in ((idle_r, "read", "read_time"), (idle_j, "judged", "judged_at"))]
    return pa.concat_tables(busy), pa.concat_tables([*kept, _as_kept(idle_a, "ack")])


def split_confirmed(key, t: pa.Table, now: datetime, cfg: AuditConfig,
                    events: Sequence[ClusterEvent]) -> tuple[pa.Table, pa.Table | None]:
    """One partition's rows (:func:`step_arrow_schema`, UTC) as ``(rest, done)``: ``done``
    the rows the engine writes for the ack runs it can only confirm now, whole, with no
    further finding (a ``confirmed`` finding and a ``judged`` state row each, at ``now``;
    None: no such run), ``rest`` the rows without those ack runs, for the engine.

    In a pass without a fault nearly every write is one: the engine spent about 100 us of
    Python on each run (``bench/judge.py``), a second a pass for a backlog of short runs.
    A successful run is one when (:func:`~kafka_audit.jobs.core.rules.judge_partition`,
    each a condition of its plain confirmation): it ends at or below the settled frontier
    (the observations :func:`~kafka_audit.jobs.core.engine.step_partition` makes); no
    leader change or lone ISR gates it (``rules.change_gate``); exactly one read run
    overlaps its offsets, covering all of them with its own stamps (so each offset has one
    view, showing the write: ``rules.judge_write`` confirms, and its offsets are not cut);
    exactly one stamped read of its producer run touches its seqs, that one (no copy:
    ``rules.duplicate_cases``); and its producer run's placed acks and recently judged runs
    in this partition, in offset order, ascend in seqs without overlap (no lower seq above
    any write of the run: ``rules._decide_confirmed`` neither holds nor finds a reorder).
    Taking such runs out changes no other verdict: they are not pending (holds, suspects,
    counts, the reads kept for pending writes), they witness no reorder, and every read
    stays. Equal to the engine alone (``tests/unit/test_hot_state.py``). A RabbitMQ key is
    never split."""
    if system_of(str(key[0])) != KAFKA:
        return t, None
    kind = t.column("kind")
    acks_at = pc.equal(kind, "ack")
    acks, reads = t.filter(acks_at), t.filter(pc.equal(kind, "read"))
    if not (acks.num_rows and reads.num_rows):
        return t, None
    a_off, a_n, a_seq = (_int_array(acks, c) for c in ("offset", "count", "seq"))
    r_off, r_n, r_seq = (_int_array(reads, c) for c in ("offset", "count", "seq"))
    if (a_n <= 0).any() or (r_n <= 0).any():  # empty runs: left to the engine's rules
        return t, None
    a_end, r_end = a_off + a_n, r_off + r_n
    placed = pc.and_(pc.is_valid(acks.column("offset")), pc.is_null(acks.column("error_name"))
                     ).to_numpy(zero_copy_only=False)
    ok = placed & pc.is_valid(acks.column("seq")).to_numpy(zero_copy_only=False) & (
        a_end <= _settled(t, reads, now, cfg.settle_seconds))
    if events and ok.any():
        at = np.flatnonzero(ok)
        firsts = _arrow_times(acks.column("first_ack").take(pa.array(at)))
        lasts = _arrow_times(acks.column("last_ack").take(pa.array(at)))
        for i, first, last in zip(at, firsts, lasts, strict=True):
            changes, exposed = change_gate(events, first, last, cfg.lookback_seconds)
            ok[i] = not (changes or exposed)
    if not ok.any():
        return t, None
    # the one read over its offsets: overlapping reads = starting below its end - ending at
    # or below its start; the candidate, the last to start below its end
    order = np.argsort(r_off, kind="stable")
    starts = r_off[order]
    below = np.searchsorted(starts, a_end, "left")
    hits = below - np.searchsorted(np.sort(r_end), a_off, "right")
    j = order[np.maximum(below - 1, 0)]
    stamped = _stamped(reads)
    ok &= ((hits == 1) & (r_off[j] <= a_off) & (r_end[j] >= a_end) & stamped[j]
           & (r_seq[j] - r_off[j] == a_seq - a_off))
    taken = pa.array(j)
    for name in ("producer_id", "run_id"):
        ok &= pc.fill_null(pc.equal(acks.column(name), reads.column(name).take(taken)),
                           False).to_numpy(zero_copy_only=False)
    if not ok.any():
        return t, None
    judged = t.filter(pc.equal(kind, "judged"))
    for run in _runs(acks.filter(pa.array(ok))):
        mine = _of_run(acks, run).to_numpy(zero_copy_only=False)
        if not _ascending(placed & mine, a_off, a_n, a_seq, judged.filter(_of_run(judged, run))):
            ok &= ~mine
            continue
        theirs = _of_run(reads, run).to_numpy(zero_copy_only=False) & stamped
        at = np.flatnonzero(ok & mine)
        touching = (np.searchsorted(np.sort(r_seq[theirs]), a_seq[at] + a_n[at], "left")
                    - np.searchsorted(np.sort(r_seq[theirs] + r_n[theirs]), a_seq[at], "right"))
        ok[at] = touching == 1
    if not ok.any():
        return t, None
    done = acks.filter(pa.array(ok))
    rest = pa.concat_tables([t.filter(pc.invert(acks_at)), acks.filter(pa.array(~ok))])
    return rest, _confirmed_rows(key, done, now, t.schema)


def _settled(t: pa.Table, reads: pa.Table, now: datetime, settle_seconds: float) -> int:
    """The settled frontier :func:`~kafka_audit.jobs.core.engine.step_partition` finds in
    one partition's rows: the highest frontier observed (an ``observation`` row, a stream
    read's end at its read time, the frontier now) at least ``settle_seconds`` ago."""
    obs = t.filter(pc.equal(t.column("kind"), "observation"))
    stream = reads.filter(pc.equal(reads.column("source"), "stream"))
    offsets = np.concatenate([_int_array(obs, "offset"),
                              _int_array(stream, "offset") + _int_array(stream, "count")])
    times = np.concatenate([_micros_of(obs.column("observed_at")),
                            _micros_of(stream.column("read_time"))])
    cutoff = _micros(now - timedelta(seconds=settle_seconds))
    best = int(offsets[times <= cutoff].max(initial=0))
    return max(best, int(offsets.max(initial=0))) if _micros(now) <= cutoff else best


def _micros_of(times) -> np.ndarray:
    """A timestamp column in microseconds since the epoch (null: never, the largest)."""
    us = pc.cast(times, pa.timestamp("us", times.type.tz)).cast(pa.int64())
    return pc.fill_null(us, np.iinfo(np.int64).max).to_numpy(zero_copy_only=False)


def _ascending(acked: np.ndarray, off: np.ndarray, n: np.ndarray, seq: np.ndarray,
               judged: pa.Table) -> bool:
    """Whether the ack runs ``acked`` and the ``judged`` runs (one producer run's), in offset
    order, ascend in seqs without overlapping in offsets or seqs."""
    if judged.num_rows and (judged.column("offset").null_count
                            or judged.column("seq").null_count
                            or not pc.all(pc.greater(judged.column("count"), 0)).as_py()):
        return False  # a judged row the engine never writes: left to it
    offs = np.concatenate([off[acked], _int_array(judged, "offset")])
    seqs = np.concatenate([seq[acked], _int_array(judged, "seq")])
    ns = np.concatenate([n[acked], _int_array(judged, "count")])
    o = np.lexsort((seqs, offs))
    offs, seqs, ns = offs[o], seqs[o], ns[o]
    return bool((offs[1:] >= offs[:-1] + ns[:-1]).all()
                and (seqs[1:] >= seqs[:-1] + ns[:-1]).all())


def _confirmed_rows(key, done: pa.Table, now: datetime, schema: pa.Schema) -> pa.Table:
    """The rows the engine writes for whole runs ``done`` confirmed at ``now``: a
    ``confirmed`` finding each (the id :class:`~kafka_audit.jobs.core.model.Finding`
    gives it, no evidence) and a ``judged`` state row each."""
    topic, partition, n = str(key[0]), int(key[1]), done.num_rows
    ids = [f"confirmed:{topic}:{partition}:{p}:{r}:{s}" for p, r, s in zip(
        done.column("producer_id").to_pylist(), done.column("run_id").to_pylist(),
        done.column("seq").to_pylist(), strict=True)]

    def rows(kind: str, row: str, **columns) -> pa.Table:
        fixed = {"kind": kind, "row": row, "topic": topic, "partition": partition}
        return pa.Table.from_arrays(
            [pa.repeat(pa.scalar(fixed[f.name], f.type), n) if f.name in fixed
             else columns[f.name].cast(f.type) if f.name in columns
             else pa.nulls(n, f.type) for f in schema], schema=schema)

    run = {c: done.column(c) for c in ("producer_id", "run_id", "seq", "count", "offset")}
    return pa.concat_tables([
        rows("confirmed", "finding", finding_id=pa.array(ids, pa.string()),
             ack_time=done.column("first_ack"), evidence=pa.repeat(pa.scalar("{}"), n), **run),
        rows("judged", "hot", judged_at=pa.repeat(pa.scalar(now, schema.field("judged_at").type),
                                                  n), **run)])


def _idle_acks(acks: pa.Table, reads: pa.Table, frontier: int) -> np.ndarray:
    """Which ``acks`` no judgement of this step can touch, so they stay pending as they
    are: placed at or past every offset the partition's state has read or observed (the
    settled frontier cannot reach them: no verdict, no suspect, no read kept for them);
    no stamped read of their producer run touching their seqs (a copy, which the engine
    would keep for them); and no placed run of their producer run below that frontier
    ending on a higher seq (one they could hold back from ``confirmed`` while a reorder
    is possible, ``rules._decide_confirmed``). A catch-up's backlog is mostly such acks:
    millions acked before the consume job read them."""
    n = acks.num_rows
    if not n:
        return np.zeros(0, dtype=bool)
    off, seq = _int_array(acks, "offset"), _int_array(acks, "seq")
    placed = pc.and_(pc.is_valid(acks.column("offset")),
                     pc.is_null(acks.column("error_name"))).to_numpy(zero_copy_only=False)
    idle = placed & (off >= frontier)
    if not idle.any():
        return idle
    last = seq + _int_array(acks, "count") - 1
    r_seq, r_n = _int_array(reads, "seq"), _int_array(reads, "count")
    r_stamped = _stamped(reads)
    for run in _runs(acks.filter(pa.array(idle))):
        mine = _of_run(acks, run).to_numpy(zero_copy_only=False)
        below = mine & placed & ~idle
        if below.any():  # a lower seq than one confirmable below: may hold it
            idle &= ~(mine & (seq < last[below].max()))
        theirs = _of_run(reads, run).to_numpy(zero_copy_only=False) & r_stamped
        if theirs.any():  # a copy of its seqs was read somewhere: judged with the rest
            idle &= ~(mine & _touching(seq, last, r_seq[theirs], r_seq[theirs] + r_n[theirs]))
    return idle


def _frontier(t: pa.Table, reads: pa.Table) -> int:
    """The highest offset the partition's state has read or observed."""
    obs = t.filter(pc.equal(t.column("kind"), "observation"))
    r_end = _int_array(reads, "offset") + _int_array(reads, "count")
    return max(int(r_end.max(initial=0)), pc.max(obs.column("offset")).as_py() or 0)


def _stamped(reads: pa.Table) -> np.ndarray:
    """Which ``reads`` are records with a stamp (``ReadRun.stamped``)."""
    return pc.and_(pc.and_(pc.equal(reads.column("status"), "record"),
                           pc.is_valid(reads.column("producer_id"))),
                   pc.is_valid(reads.column("seq"))).to_numpy(zero_copy_only=False)


def _int_array(rows: pa.Table, name: str) -> np.ndarray:
    """A column as int64 (nulls: 0)."""
    return pc.fill_null(rows.column(name), 0).to_numpy(zero_copy_only=False).astype(np.int64)


def _idle_reads(reads: pa.Table, acks: pa.Table, placed: pa.Table, settled: datetime
                ) -> np.ndarray:
    """Which ``reads`` touch none of the unjudged runs' offsets, their copies' seqs or those
    copies' offsets (ends included) and were read at or before ``settled``."""
    r_off, r_n, r_seq = (_int_array(reads, c) for c in ("offset", "count", "seq"))
    r_stamped = _stamped(reads)
    p_off = _int_array(placed, "offset")
    spans = [(p_off, p_off + _int_array(placed, "count"))]
    for run in _runs(acks):
        mine = acks.filter(_of_run(acks, run))
        s_lo, s_n = _int_array(mine, "seq"), _int_array(mine, "count")
        theirs = _of_run(reads, run).to_numpy(zero_copy_only=False) & r_stamped
        copies = theirs & _touching(r_seq, r_seq + r_n, s_lo, s_lo + s_n)
        spans.append((r_off[copies], r_off[copies] + r_n[copies]))
    lo = np.concatenate([s[0] for s in spans])
    hi = np.concatenate([s[1] for s in spans])
    old = pc.fill_null(pc.less_equal(reads.column("read_time"), settled), False)
    return ~_touching(r_off, r_off + r_n, lo, hi) & (r_n > 0) & old.to_numpy(
        zero_copy_only=False)


def _idle_judged(judged: pa.Table, placed: pa.Table) -> np.ndarray:
    """Which ``judged`` runs no placed ack of their producer run can have as a reorder
    witness: none with a last seq at or above theirs and a first offset at or below their
    last."""
    j_seq = _int_array(judged, "seq")
    j_last = _int_array(judged, "offset") + _int_array(judged, "count") - 1
    idle = pc.and_(pc.is_valid(judged.column("seq")),
                   pc.is_valid(judged.column("offset"))).to_numpy(zero_copy_only=False)
    for run in _runs(placed):
        mine = placed.filter(_of_run(placed, run))
        last_seq = int((_int_array(mine, "seq") + _int_array(mine, "count") - 1).max())
        first_offset = int(_int_array(mine, "offset").min())
        theirs = _of_run(judged, run).to_numpy(zero_copy_only=False)
        idle &= ~(theirs & (j_seq <= last_seq) & (j_last >= first_offset))
    return idle


def _runs(rows: pa.Table) -> set[tuple]:
    """The producer runs (``producer_id``, ``run_id``) of ``rows``."""
    return set(zip(rows.column("producer_id").to_pylist(), rows.column("run_id").to_pylist(),
                   strict=True))


def _of_run(rows: pa.Table, run: tuple):
    """Where ``rows`` belong to producer run ``run`` (a null in it matches a null)."""
    def same(name: str, v):
        col = rows.column(name)
        return pc.is_null(col) if v is None else pc.fill_null(pc.equal(col, v), False)

    return pc.and_(same("producer_id", run[0]), same("run_id", run[1]))


def _touching(lo, hi, span_lo, span_hi):
    """Which intervals ``[lo, hi]`` touch one of ``[span_lo, span_hi]`` (ends included)."""
    if not len(span_lo):
        return np.zeros(len(lo), dtype=bool)
    order = np.argsort(span_lo, kind="stable")
    s_lo, s_hi = span_lo[order], np.maximum.accumulate(span_hi[order])
    # the first span (sorted by start) whose running highest end reaches lo
    i = np.searchsorted(s_hi, lo, side="left")
    ok = i < len(s_lo)
    return ok & (s_lo[np.minimum(i, len(s_lo) - 1)] <= hi)


def _as_kept(rows: pa.Table, kind: str) -> pa.Table:
    """State rows passed through as the engine writes a kept row of ``kind``."""
    cols = _KEPT_COLUMNS[kind]
    n = rows.num_rows
    return pa.Table.from_arrays(
        [pa.repeat(pa.scalar("hot", f.type), n) if f.name == "row" else rows.column(f.name)
         if f.name in cols else pa.nulls(n, f.type) for f in rows.schema], schema=rows.schema)


@functools.cache
def step_arrow_schema(tz: str | None = "UTC") -> pa.Schema:
    """:func:`step_schema` as Arrow: ``audit_hot``'s columns (nullable), then
    :data:`STEP_COLUMNS`; timestamps in zone ``tz`` (None: naive, as Spark hands pandas)."""
    def typed(t: pa.DataType) -> pa.DataType:
        return pa.timestamp("us", tz=tz) if pa.types.is_timestamp(t) else t

    types = {"string": pa.string(), "bigint": pa.int64(),
             "timestamp": pa.timestamp("us", tz=tz)}
    return pa.schema([pa.field(f.name, typed(f.type)) for f in arrow_schema("audit_hot")]
                     + [pa.field(n, types[t]) for n, t in STEP_COLUMNS.items()])


@functools.cache
def step_schema():
    """``audit_hot``'s columns plus :data:`STEP_COLUMNS`: what a judge step returns."""
    from pyspark.sql import types as T

    extra = {"string": T.StringType(), "bigint": T.LongType(), "timestamp": T.TimestampType()}
    return T.StructType([T.StructField(f.name, f.dataType, True)
                         for f in spark_schema("audit_hot").fields]
                        + [T.StructField(n, extra[t], True) for n, t in STEP_COLUMNS.items()])


def consumed_row(r: ReadRun, batch_id: int) -> dict:
    """A read run as a row of the ``consumed`` table (re-reads; recorded test histories)."""
    stamped = r.producer_id is not None
    return {"topic": r.topic, "partition": r.partition, "offset": r.offset, "count": r.count,
            "kafka_timestamp": None, "stamped": stamped,
            "stamp_error": None if stamped or r.status != "record" else "foreign or malformed",
            "producer_id": r.producer_id, "run_id": r.run_id, "seq": r.seq,
            "checksum_ok": True if stamped else None, "read_time": r.read_time,
            "batch_id": batch_id, "source": r.source, "status": r.status,
            "leader_epoch": r.leader_epoch, "system": system_of(r.topic)}
