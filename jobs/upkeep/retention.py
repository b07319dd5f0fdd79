"""Retention: rows older than ``retention.days`` are dropped, their sums kept exact.

A round (the upkeep's worker, every ``retention.every_seconds``, beside the passes) drops
from each table the rows whose time (``rollups.TIME_COLUMN``) is older than its cutoff:

* ``acks`` and ``consumed``: older than ``retention.days`` *and* than the oldest write
  still pending (less ``audit.settle_seconds + audit.lookback_seconds``): a write is
  dropped only once judged, a read only once the audit holds what it needs of it (its
  state keeps the reads of pending writes); while a row appended after the version the
  committed pass took in has aged (a ledger spooled through a long outage), the table
  waits for the audit to take it in;
* ``findings``: confirmations older than ``retention.days``, every other verdict older
  than ``retention.findings_days``, of committed passes only;
* ``partition_state``: older than ``retention.days``, never the committed pass's rows
  (the latest state of each partition);
* ``cluster_events``: older than ``retention.days``, than the oldest pending write less
  the margin and less ``audit.lookback_seconds`` again (the causes of a pending write are
  read from the events before it), and than the oldest open window;
* ``dq_results``, ``fault_events``: older than ``retention.days``;
* ``suspicions``: writes acknowledged before ``retention.days``, with the confirmations
  their states are read from (a loss finding kept longer no longer names its change);
* ``windows`` is recomputed from the events (``windows_job.py``): windows that ended
  before the cutoff are left out there.

**Exact totals.** The rows a round drops from ``acks``, ``consumed`` and ``findings`` are
summed into ``rollups`` (``kafka_audit/rollups.py``: per UTC day and every column a total
groups by), appended as round *n* of that table once the rows of any attempt at round *n*
that died before its drop are removed; then one commit removes the files holding them, adds the rows
those files keep written again, and records round *n* (the transaction
``kafka_audit_retention``, version *n*: ``store.commit_drop``). Files are named, not a
predicate: rows appended meanwhile are never touched, so the rows dropped are exactly the
rows summed. The API takes in the rollup rows of the rounds a table's version has
committed (``store.applied_round``) and no others: a total is exact at every moment,
before the drop, after it, and after a round that died between its two commits.

Why files and not delta-rs's ``DELETE``: the files a delete rewrites carry their strings
as Arrow ``string_view`` (delta-rs 1.4 on, delta-io/delta-rs#4579), and pyarrow (26) has
no kernel comparing them with a string: every filtered read of the table (the API's, the
windows job's) failed afterwards. The rows kept here are written by delta-rs's writer, in
the table's own types.
"""

from __future__ import annotations

import functools
import json
import logging
import operator
from collections.abc import Callable
from dataclasses import dataclass
from datetime import UTC, datetime, timedelta
from typing import Any, ClassVar

import pyarrow as pa
import pyarrow.compute as pc

from kafka_audit.rollups import ROLLED_UP, TIME_COLUMN, merge, rollup
from kafka_audit.settings import Settings
from kafka_audit.store import (
    applied_round,
    commit_drop,
    committed_progress,
    files_added_since,
    plan_drop,
    read_files,
    read_table,
    table_exists,
    write_arrow,
)

__all__ = ["Cutoffs", "cutoffs", "Cond", "All", "Any_", "predicates", "run_retention",
           "Dropped"]

log = logging.getLogger(__name__)

#: rows summed at once while a round reads what it drops
_BATCH_ROWS = 262_144


# ---- predicates: one description, as SQL for delta-rs's delete and as an Arrow filter ----

@dataclass(frozen=True)
class Cond:
    """``column op value`` (op: ``<``, ``<=``, ``=``, ``>``)."""

    column: str
    op: str
    value: Any

    def sql(self) -> str:
        v = self.value
        if isinstance(v, datetime):
            lit = f"'{v.astimezone(UTC).strftime('%Y-%m-%dT%H:%M:%S.%fZ')}'"
        elif isinstance(v, str):
            lit = "'" + v.replace("'", "''") + "'"
        else:
            lit = str(int(v))
        return f'"{self.column}" {self.op} {lit}'

    def arrow(self) -> pc.Expression:
        f, v = pc.field(self.column), self.value
        if isinstance(v, datetime):
            v = pa.scalar(v.astimezone(UTC), pa.timestamp("us", tz="UTC"))
        elif isinstance(v, int):
            v = pa.scalar(v, pa.int64())
        return {"<": f < v, "<=": f <= v, "=": f == v, ">": f > v}[self.op]


@dataclass(frozen=True)
class _Joined:
    """Conditions joined by one word (:class:`All`: AND, :class:`Any_`: OR)."""

    parts: tuple
    word: ClassVar[str] = ""
    join: ClassVar[Callable] = operator.and_

    def sql(self) -> str:
        return f" {self.word} ".join(f"({p.sql()})" for p in self.parts)

    def arrow(self) -> pc.Expression:
        return functools.reduce(type(self).join, (p.arrow() for p in self.parts))


class All(_Joined):
    word, join = "AND", operator.and_


class Any_(_Joined):
    word, join = "OR", operator.or_


# ---- cutoffs (pure) ----

@dataclass(frozen=True)
class Cutoffs:
    """Rows older than these go: ``standard`` (retention.days), ``anomalies``
    (retention.findings_days), ``ledger`` (acks and consumed: also before the oldest
    pending write, less the margin), ``events`` (also before the causes of a pending write
    and before the oldest open window)."""

    standard: datetime
    anomalies: datetime
    ledger: datetime
    events: datetime


def cutoffs(settings: Settings, now: datetime, oldest_pending: datetime | None,
            oldest_open_window: datetime | None) -> Cutoffs:
    r, a = settings.retention, settings.audit
    standard = now - timedelta(days=r.days)
    margin = timedelta(seconds=a.settle_seconds + a.lookback_seconds)
    ledger = standard if oldest_pending is None else min(standard, oldest_pending - margin)
    events = standard if oldest_pending is None else min(
        standard, oldest_pending - margin - timedelta(seconds=a.lookback_seconds))
    if oldest_open_window is not None:
        events = min(events, oldest_open_window)
    return Cutoffs(standard, now - timedelta(days=r.findings_days), ledger, events)


def predicates(c: Cutoffs, committed_pass: int) -> dict[str, tuple[Cond | All, datetime]]:
    """What each table drops, given the cutoffs and the committed pass: the condition, and
    the time its rows are all older than (files whose oldest row is not are left unread)."""
    t = TIME_COLUMN
    return {
        "acks": (Cond(t["acks"], "<", c.ledger), c.ledger),
        "consumed": (Cond(t["consumed"], "<", c.ledger), c.ledger),
        "findings": (All((Cond("pass_id", "<=", committed_pass), Any_((
            Cond(t["findings"], "<", c.anomalies),
            All((Cond("kind", "=", "confirmed"), Cond(t["findings"], "<", c.standard))))))),
            c.standard),
        "partition_state": (All((Cond(t["partition_state"], "<", c.standard),
                                 Cond("pass_id", "<", committed_pass))), c.standard),
        "cluster_events": (Cond(t["cluster_events"], "<", c.events), c.events),
        "dq_results": (Cond(t["dq_results"], "<", c.standard), c.standard),
        "fault_events": (Cond(t["fault_events"], "<", c.standard), c.standard),
        "suspicions": (Cond(t["suspicions"], "<", c.standard), c.standard),
    }


# ---- a round ----

@dataclass(frozen=True)
class Dropped:
    """What a round did to one table: rows dropped (None: not this round, ``why``)."""

    table: str
    rows: int | None
    round: int | None = None
    why: str = ""


def _oldest_pending(settings: Settings, generation: int | None) -> datetime | None:
    """The first ack of the oldest write the committed audit state holds unjudged."""
    path = settings.table_path("audit_hot")
    if generation is None or not table_exists(path):
        return None
    t = read_table(path, "audit_hot", ["first_ack"],
                   where=(pc.field("pass_id") == pa.scalar(generation, pa.int64()))
                   & (pc.field("kind") == "ack"))
    return pc.min(t.column("first_ack")).as_py() if t.num_rows else None


def _oldest_open_window(settings: Settings) -> datetime | None:
    path = settings.table_path("windows")
    if not table_exists(path):
        return None
    t = read_table(path, "windows", ["start"], where=pc.field("end").is_null())
    return pc.min(t.column("start")).as_py() if t.num_rows else None


def _not_taken_in(settings: Settings, table: str, where: Cond | All, since: int) -> int:
    """Rows of ``table`` appended after ``since`` (the version the committed pass took in)
    that ``where`` matches: a write or a read the audit has not seen yet."""
    path = settings.table_path(table)
    _v, files, _n = files_added_since(path, since)
    if not files:
        return 0
    return read_files(files, table).filter(where.arrow()).num_rows


def _forget_unapplied(settings: Settings, table: str, applied: int, now: datetime) -> None:
    """Remove the rollup rows of ``table``'s rounds after ``applied`` (a round that died
    between its sums and its drop: never taken in, and the next round's number again)."""
    path = settings.table_path("rollups")
    if not table_exists(path):
        return
    stale = All((Cond("table", "=", table), Cond("round", ">", applied)))
    plan = plan_drop(path, "rollups", stale.arrow(), "rolled_at",
                     now + timedelta(days=1), lambda _rows: None)
    if plan.removed:
        log.info("retention: %d rows of %s's rounds after %d (never committed) removed",
                 plan.dropped_rows, table, applied)
        commit_drop(plan, None, {"stale": table, "after_round": applied})


def _drop(settings: Settings, table: str, where: Cond | All, cutoff: datetime,
          now: datetime, taken_in: int | None = None) -> Dropped:
    """One table's part of a round: its aged rows summed (``rollups``) and dropped.
    ``taken_in``: the version the committed pass took in (acks, consumed): rows appended
    after it are the audit's still, and while one of them has aged the table waits."""
    path = settings.table_path(table)
    if taken_in is not None:
        if taken_in < 0:
            return Dropped(table, None, why="not taken in by a committed pass yet")
        late = _not_taken_in(settings, table, where, taken_in)
        if late:
            return Dropped(table, None, why=f"{late} aged rows not taken in by the audit "
                                            f"yet")
    parts: list[pa.Table] = []
    pending: list[pa.Table] = []
    round_ = applied_round(path) + 1

    def summed(rows: pa.Table) -> None:  # a file's dropped rows, summed a batch at a time
        if table not in ROLLED_UP:
            return
        pending.append(rows)
        if sum(p.num_rows for p in pending) >= _BATCH_ROWS:
            parts.append(rollup(table, pa.concat_tables(pending), round_, now))
            pending.clear()

    plan = plan_drop(path, table, where.arrow(), TIME_COLUMN[table], cutoff, summed)
    if not plan.removed:
        return Dropped(table, 0, why="nothing aged out")
    note: dict = {"round": round_, "where": where.sql(), "version": plan.version,
                  "rows": plan.dropped_rows}
    if table in ROLLED_UP:
        if pending:
            parts.append(rollup(table, pa.concat_tables(pending), round_, now))
        sums = merge(parts)
        note["count"] = int(pc.sum(sums.column("count")).as_py() or 0)
        # round n's sums before its drop, none a failed attempt left beside them
        _forget_unapplied(settings, table, round_ - 1, now)
        write_arrow(settings.table_path("rollups"), "rollups", sums)
    n = commit_drop(plan, round_, note)
    if n is None:
        return Dropped(table, None, round_, "lost to a concurrent commit")
    return Dropped(table, n, round_)


def run_retention(settings: Settings, now: datetime | None = None) -> list[Dropped]:
    """One retention round over every retained table; what it did per table."""
    now = now or datetime.now(UTC)
    progress = committed_progress(settings)
    c = cutoffs(settings, now, _oldest_pending(settings, progress.generation),
                _oldest_open_window(settings))
    where = predicates(c, progress.pass_id)
    taken_in = {"acks": progress.acks_version, "consumed": progress.consumed_version}
    out = []
    # suspicions first: their states are read from the confirmations this round may drop
    # (a suspicion's ack precedes its confirmation's detection: it goes in this round too)
    for table in sorted(TIME_COLUMN, key=lambda t: t != "suspicions"):
        if not table_exists(settings.table_path(table)):
            continue
        try:
            out.append(_drop(settings, table, *where[table], now, taken_in.get(table)))
        except Exception as exc:  # noqa: BLE001 - upkeep never stops the audit; next round
            log.warning("retention of %s failed, tried again later: %s", table, exc)
            out.append(Dropped(table, None, why=f"failed: {exc}"))
    done = [d for d in out if d.rows]
    if done:
        log.info("retention: %s", json.dumps({d.table: d.rows for d in done}))
    return out
