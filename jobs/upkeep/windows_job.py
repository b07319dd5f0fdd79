"""Windows job: when writes were at risk, into the ``windows`` table.

* sources: ``cluster_events`` (ISR observations, leader changes, topic settings),
  ``acks`` (refused writes; acknowledged writes counted inside each window) and
  ``findings`` of committed passes (losses, for split-brain windows and counts);
* rule: :func:`kafka_audit.jobs.core.windows.partition_windows` per partition, the
  pure function the tests exercise;
* sink: ``windows``, rewritten whole (delta-rs) when it changed: every row is
  derived from the tables above, so a rewrite is exactly once by construction;
* trigger: after each audit pass (the audit loop), or ``kafka-audit windows``.
"""

from __future__ import annotations

import json
import logging
from bisect import bisect_left, bisect_right
from collections import defaultdict
from datetime import UTC, datetime, timedelta

import pyarrow as pa
import pyarrow.compute as pc

from kafka_audit.jobs.core.model import AckRun, ClusterEvent, Finding
from kafka_audit.jobs.core.rules import merge_spans
from kafka_audit.jobs.core.windows import partition_windows
from kafka_audit.schemas.events import TOPIC_CONFIG
from kafka_audit.schemas.tables import arrow_schema
from kafka_audit.schemas.verdicts import LOSSES
from kafka_audit.schemas.windows import Window
from kafka_audit.settings import Settings
from kafka_audit.store import (
    AppendedRows,
    committed_pass,
    live_files,
    partition_slices,
    read_table,
    table_exists,
    write_arrow,
)

__all__ = ["compute_windows", "update_windows", "AckCounts", "WindowInputs"]

log = logging.getLogger(__name__)


def _tuple(v):
    return tuple(v) if v is not None else None


def _events(settings: Settings) -> tuple[dict[tuple[str, int], list[ClusterEvent]],
                                         dict[str, int]]:
    by_partition: dict[tuple[str, int], list[ClusterEvent]] = defaultdict(list)
    min_isr: dict[str, int] = {}
    rows = read_table(settings.table_path("cluster_events"), "cluster_events").to_pylist()
    for r in sorted(rows, key=lambda r: r["event_time"]):
        if r["kind"] == TOPIC_CONFIG:
            try:
                min_isr[r["topic"]] = int(json.loads(r["detail"])["min.insync.replicas"])
            except (KeyError, TypeError, ValueError):
                pass
            continue
        if r["partition"] < 0:
            continue
        by_partition[(r["topic"], r["partition"])].append(ClusterEvent(
            r["event_time"].astimezone(UTC), r["topic"], r["partition"], r["kind"],
            r["leader"], r["previous_leader"], _tuple(r["isr"]), _tuple(r["previous_isr"]),
            _tuple(r["replicas"]), log_end=r["log_end"],
            previous_elr=_tuple(r.get("previous_eligible_leader_replicas"))))
    return by_partition, min_isr


#: the ledger's refusals that mark a window (a write refused for want of in-sync replicas)
_REFUSED = pc.field("error_name").isin(["NOT_ENOUGH_REPLICAS",
                                        "NOT_ENOUGH_REPLICAS_AFTER_APPEND"])


def _refused(t: pa.Table) -> dict[tuple[str, int], list[AckRun]]:
    out: dict[tuple[str, int], list[AckRun]] = defaultdict(list)
    for r in t.to_pylist():
        out[(r["topic"], r["partition"])].append(AckRun(
            r["topic"], r["partition"], r["producer_id"], r["run_id"], r["seq"], r["count"],
            None, r["ack_time"].astimezone(UTC), r["last_ack_time"].astimezone(UTC),
            r["error_name"], r["acks"]))
    return out


def _findings(t: pa.Table, committed: int) -> dict[tuple[str, int], list[Finding]]:
    """``t``'s findings of committed passes, per partition."""
    t = t.filter(pc.field("pass_id") <= pa.scalar(committed, pa.int64()))
    out: dict[tuple[str, int], list[Finding]] = defaultdict(list)
    for r in t.to_pylist():
        out[(r["topic"], r["partition"])].append(Finding(
            r["kind"], r["topic"], r["partition"], r["producer_id"], r["run_id"], r["seq"],
            r["offset"], r["count"], r["subkind"],
            r["ack_time"] and r["ack_time"].astimezone(UTC), r["cause"]))
    return out


class WindowInputs:
    """What one computation of the windows keeps for the next (the service holds one):
    the rows they come from, read incrementally (:class:`~kafka_audit.store.AppendedRows`:
    the ledger's refusals, the findings of losses, the confirmed findings at lost offsets),
    and the acked writes counted per window (:class:`AckCounts`). Without it, every
    computation read these from the whole of ``acks`` and ``findings`` (and the confirmed
    findings once per partition with losses): a cost that grew with the run."""

    def __init__(self, settings: Settings) -> None:
        self.settings = settings
        self.counts = AckCounts()
        self.refused = AppendedRows(settings.table_path("acks"), "acks", where=_REFUSED)
        self.losses = AppendedRows(settings.table_path("findings"), "findings",
                                   where=pc.field("kind").isin(sorted(LOSSES)))
        self._over: tuple[tuple, AppendedRows] | None = None

    def confirmed_over(self, spans: dict[tuple[str, int], list[tuple[int, int]]]
                       ) -> pa.Table:
        """The confirmed findings overlapping a span ``[lo, hi)`` that ``spans`` names for
        their partition (the lost offsets: what sits there now, for split-brain windows);
        read again whole only when the spans change (a new loss), else from the findings
        appended since. The spans are the lost offsets themselves, merged: one span from a
        partition's first lost offset to its last took in every write confirmed between two
        kills, and with them a read and a conversion that grew with the run."""
        key = tuple(sorted((k, tuple(v)) for k, v in spans.items()))
        if self._over is None or self._over[0] != key:
            where = pc.scalar(False)
            for (topic, partition), cover in key:
                at = ((pc.field("topic") == topic)
                      & (pc.field("partition") == pa.scalar(partition, pa.int32())))
                inside = pc.scalar(False)
                for lo, hi in cover:
                    inside = inside | ((pc.field("offset") < pa.scalar(hi, pa.int64()))
                                       & (pc.add(pc.field("offset"), pc.field("count"))
                                          > pa.scalar(lo, pa.int64())))
                where = where | (at & inside)
            self._over = (key, AppendedRows(
                self.settings.table_path("findings"), "findings",
                where=(pc.field("kind") == "confirmed") & where))
        return self._over[1].read()


_Key = tuple[str, str, int, datetime, datetime | None]  # kind, topic, partition, start, end


class AckCounts:
    """The acknowledged writes inside each window, kept from one computation to the next.

    A window's count is the ledger's successful, placed writes acked in ``[start, end]``
    (``end``: now, while open). Counted again only when it could have changed: the window
    is new, still open or its end moved, or the ledger gained a file holding acks from
    before its end (a ledger shipped late, a compaction's rewrite; the files' own
    statistics say so). Everything to count is read in one scan of ``acks``: a scan per
    window cost a table open each, every computation, and the windows only accumulate.
    """

    def __init__(self) -> None:
        self._counts: dict[_Key, int] = {}
        self._files: set[str] = set()

    def count(self, settings: Settings, windows: list[Window], now: datetime) -> list[int]:
        path = settings.table_path("acks")
        if not table_exists(path):
            return [0] * len(windows)
        adds = live_files(path)
        paths = adds.column("path").to_pylist()
        fresh = [t for p, t in zip(paths, adds.column("min.ack_time").to_pylist(), strict=True)
                 if p not in self._files]
        self._files = set(paths)
        if fresh:  # a new file holding acks from before a window's end may change its count
            oldest = None if None in fresh else min(fresh)
            self._counts = {k: n for k, n in self._counts.items()
                            if oldest is not None and k[4] is not None and k[4] < oldest}
        keys = [(w.kind, w.topic, w.partition, w.start, w.end) for w in windows]
        todo = [i for i, k in enumerate(keys) if k[4] is None or k not in self._counts]
        counted = dict(zip(todo, _acked_inside(settings, [windows[i] for i in todo], now),
                           strict=True))
        out = [counted[i] if i in counted else self._counts[k] for i, k in enumerate(keys)]
        self._counts = {k: n for k, n in zip(keys, out, strict=True) if k[4] is not None}
        return out


def _acked_inside(settings: Settings, windows: list[Window], now: datetime) -> list[int]:
    """Writes acknowledged inside each window (successes: the ledger's placed runs), from
    one scan of ``acks`` over the windows' topics and span."""
    if not windows:
        return []
    ts = pa.timestamp("us", tz="UTC")
    t = read_table(settings.table_path("acks"), "acks",
                   columns=["topic", "partition", "ack_time", "count"],
                   where=pc.field("topic").isin(sorted({w.topic for w in windows}))
                   & pc.field("error_name").is_null()
                   & (pc.field("ack_time") >= pa.scalar(min(w.start for w in windows), ts))
                   & (pc.field("ack_time") <= pa.scalar(max(w.end or now for w in windows),
                                                        ts)))
    t = t.sort_by([("topic", "ascending"), ("partition", "ascending"),
                   ("ack_time", "ascending")])
    by_partition: dict[tuple[str, int], tuple[list[datetime], list[int]]] = {}
    for key, part in partition_slices(t):
        running = [0]
        for n in part.column("count").to_pylist():
            running.append(running[-1] + (n or 0))
        by_partition[key] = ([x.astimezone(UTC) for x in part.column("ack_time").to_pylist()],
                             running)
    out = []
    for w in windows:
        times, running = by_partition.get((w.topic, w.partition), ([], [0]))
        out.append(running[bisect_right(times, w.end or now)]
                   - running[bisect_left(times, w.start)])
    return out


def compute_windows(settings: Settings, now: datetime | None = None,
                    kept: WindowInputs | None = None) -> list[Window]:
    """Every window, from the tables as they are now (``kept``: what an earlier computation
    read and counted, so that only what changed since is read)."""
    now = now or datetime.now(UTC)
    kept = kept or WindowInputs(settings)
    events, min_isr = _events(settings)
    committed = committed_pass(settings)
    refused = _refused(kept.refused.read())
    losses = _findings(kept.losses.read(), committed)
    spans = {}
    for key, lost in losses.items():
        offsets = [(f.offset, f.offset + f.count) for f in lost if f.offset is not None]
        if offsets:
            spans[key] = merge_spans(offsets)
    over = _findings(kept.confirmed_over(spans), committed) if spans else {}
    found: list[Window] = []
    for key in sorted(set(events) | set(refused) | set(losses)):
        found += partition_windows(key[0], key[1], events.get(key, []), min_isr.get(key[0]),
                                   refused.get(key, []), losses.get(key, []),
                                   over.get(key, []))
    acked = kept.counts.count(settings, found, now)
    return [Window(w.kind, w.topic, w.partition, w.start, w.end, w.opened_by, w.closed_by,
                   n, w.losses, w.detail) for w, n in zip(found, acked, strict=True)]


def update_windows(settings: Settings, now: datetime | None = None,
                   kept: WindowInputs | None = None) -> list[Window]:
    """Rewrite the ``windows`` table when the windows changed; return them (those that
    ended more than ``retention.days`` ago left out)."""
    now = now or datetime.now(UTC)
    windows = compute_windows(settings, now, kept)
    if settings.retention.enabled:  # a window that ended before the retention is left out
        aged = now - timedelta(days=settings.retention.days)
        windows = [w for w in windows if w.end is None or w.end >= aged]
    path = settings.table_path("windows")
    rows = [{"window_id": w.window_id, "kind": w.kind, "topic": w.topic,
             "partition": w.partition, "start": w.start, "end": w.end,
             "opened_by": w.opened_by, "closed_by": w.closed_by, "acks": w.acks,
             "losses": w.losses, "detail": json.dumps(w.detail) if w.detail else None}
            for w in windows]
    keep = [c for c in arrow_schema("windows").names if c != "computed_at"]
    if table_exists(path):
        have = read_table(path, "windows", columns=keep).to_pylist()
        key = lambda r: r["window_id"]  # noqa: E731
        if sorted(have, key=key) == sorted(_normal(rows), key=key):
            return windows
    # else created, empty when there is no window: a run with no fault has computed none,
    # which readers (the API's ``computed``) tell apart from windows not computed yet
    data = pa.Table.from_pylist([{**r, "computed_at": now} for r in rows],
                                schema=arrow_schema("windows"))
    write_arrow(path, "windows", data, mode="overwrite")
    return windows


def _normal(rows: list[dict]) -> list[dict]:
    """Rows as they read back from the table (times in UTC)."""
    return [{k: (v.astimezone(UTC) if isinstance(v, datetime) else v) for k, v in r.items()}
            for r in rows]
