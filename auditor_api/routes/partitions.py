"""``GET /v1/partitions``: each partition as of the last committed pass; and a partition's
**timeline**: what happened to it over a time range, as a person would draw it.

A timeline holds, over ``[since, until)``:

* ``acks``: the ack ledger's runs (offsets against ack time), successful writes only;
* ``reads``: what the consume job read there (offsets against the records' Kafka
  timestamps), and ``rereads``: the audit's direct re-reads (what sits at an offset now);
* ``leader_changes`` and ``isr`` (its size over time) from ``cluster_events``, and the
  watcher's blind ``gaps``;
* ``windows`` (exposure, rejection, split brain...) from the ``windows`` table when the
  warehouse has one;
* ``findings``: every committed finding but ``confirmed`` (losses, duplicates, ...), each
  with the first leader change after its ack (``leader_change``; from ``CAUSE_SLACK``
  before it, as the rules look for a cause): for a loss, the change that lost it.

A long range is **downsampled**: when a series holds more rows than ``points``, its rows
are merged into ``points`` time buckets (each the min/max times and offsets and the sum
of writes of the rows starting in it, ``runs`` saying how many), ISR sizes keep the
smallest per bucket (the worst moment), findings merge per bucket and kind. Each
partition's rows are indexed once per table version; a request slices and buckets
arrays in memory.
"""

# no ``from __future__ import annotations``: a route signature uses ``points_max``, a local
from dataclasses import dataclass
from datetime import datetime
from typing import Annotated

import numpy as np
import pyarrow as pa
import pyarrow.compute as pc
from fastapi import APIRouter, Path, Query
from pydantic import BaseModel, Field

from kafka_audit.auditor_api.deps import ReaderDep
from kafka_audit.auditor_api.params import INT32_MAX, Instant
from kafka_audit.auditor_api.problems import (
    UNKNOWN_PARTITION,
    UNKNOWN_TOPIC,
    ProblemError,
    bad_parameters,
    problem_responses,
)
from kafka_audit.schemas.events import BLIND, ELR_ELECTION, LEADER_CHANGES, UNCLEAN_ELECTION
from kafka_audit.schemas.tables import row_model
from kafka_audit.schemas.verdicts import CAUSE_SLACK

__all__ = ["router", "latest_partitions", "PartitionOut", "Timeline"]

PartitionOut = row_model("partition_state", "PartitionOut")
_US = 1_000_000


def latest_partitions(reader, committed: int | None = None) -> list:
    """The rows of the last committed pass (it writes one per partition it holds state for;
    a partition with nothing pending and nothing retained is absent)."""
    committed = reader.committed_pass() if committed is None else committed

    def compute(state, _hot):
        t = state.data.filter(pc.field("pass_id") == pa.scalar(committed, pa.int64()))
        rows = sorted(t.to_pylist(), key=lambda r: (r["topic"], r["partition"]))
        return [PartitionOut(**r) for r in rows]

    return reader.memo(("latest_partitions", committed), ("partition_state", "audit_hot"),
                       compute)


class Span(BaseModel):
    """A run of writes (or of records read), or, downsampled, the runs starting in one time
    bucket merged."""

    time: datetime = Field(description="first ack (reads: first record's Kafka timestamp)")
    end_time: datetime = Field(description="last ack (reads: the next run's first record "
                                           "time, an estimate: runs carry their first only)")
    offset: int = Field(description="lowest offset")
    last_offset: int = Field(description="highest offset")
    count: int = Field(description="writes (records)")
    runs: int = Field(description="rows merged into this one (1: a run as stored)")


class Reread(BaseModel):
    """A direct re-read by the audit: what sits at these offsets now."""

    time: datetime = Field(description="when it was re-read")
    offset: int
    last_offset: int
    count: int
    status: str = Field(description="record | absent | truncated | expired")
    stamped_by: str | None = Field(description="producer_id/run_id of the records found "
                                               "(null: none, or not stamped)")


class LeaderChange(BaseModel):
    time: datetime
    kind: str = Field(description=" | ".join(LEADER_CHANGES))
    leader: int | None
    previous_leader: int | None
    leader_epoch: int | None
    isr: list[int] | None
    previous_isr: list[int] | None
    election: str | None = Field(
        description=f"{UNCLEAN_ELECTION} | {ELR_ELECTION} (from the eligible leader replicas, "
                    "KIP-966: clean) where the new leader was not from the ISR; null: from "
                    "the ISR, or no leader")


class IsrPoint(BaseModel):
    time: datetime
    size: int = Field(description="in-sync replicas (downsampled: the fewest in the bucket)")
    isr: list[int]
    leader: int | None
    kind: str = Field(description="the event that reported it")


class Gap(BaseModel):
    """A time the watcher observed nothing (an outage, a paused watcher)."""

    start: datetime
    end: datetime | None = Field(description="null: still blind when written")


class WindowOut(BaseModel):
    """A window from the ``windows`` table (when the warehouse has one)."""

    kind: str
    start: datetime
    end: datetime | None
    opened_by: str | None = None
    closed_by: str | None = None
    acks: int | None = None
    losses: int | None = None


class TimelineFinding(BaseModel):
    kind: str
    subkind: str | None
    cause: str | None
    time: datetime = Field(description="ack time of the first write (downsampled: earliest)")
    end_time: datetime = Field(description="downsampled: latest ack time in the bucket")
    offset: int | None
    last_offset: int | None
    count: int
    runs: int
    finding_id: str | None = Field(description="null when downsampled")
    leader_change: datetime | None = Field(
        description="the first leader change recorded after the ack (or up to 5 s before "
                    "it: the watcher and the delivery report both lag), as the cause was "
                    "found: for a loss, the change that lost it (null: none recorded)")


class Timeline(BaseModel):
    topic: str
    partition: int
    since: datetime
    until: datetime
    points: int = Field(description="most rows per series; more are merged into time buckets")
    downsampled: list[str] = Field(description="the series merged into buckets")
    acks: list[Span]
    reads: list[Span]
    rereads: list[Reread]
    leader_changes: list[LeaderChange]
    isr: list[IsrPoint]
    gaps: list[Gap]
    windows: list[WindowOut] | None = Field(
        description="null: the warehouse has no windows table")
    findings: list[TimelineFinding]


def _us(col) -> np.ndarray:
    return np.asarray(pc.cast(col, pa.int64()).to_numpy(zero_copy_only=False), dtype=np.int64)


def _int(col) -> np.ndarray:
    return np.asarray(pc.fill_null(col, 0).to_numpy(zero_copy_only=False), dtype=np.int64)


@dataclass
class _Series:
    """Rows sorted by ``t0``; ``t1``, offsets and counts aligned."""

    t0: np.ndarray
    t1: np.ndarray
    off0: np.ndarray
    off1: np.ndarray
    count: np.ndarray
    extra: list | None = None  # per-row Python values kept as they are (findings, ...)

    @classmethod
    def empty(cls) -> "_Series":
        z = np.zeros(0, np.int64)
        return cls(z, z, z, z, z, [])

    def take(self, order) -> "_Series":
        return _Series(self.t0[order], self.t1[order], self.off0[order], self.off1[order],
                       self.count[order],
                       None if self.extra is None else [self.extra[i] for i in order])

    def window(self, since: int, until: int) -> "_Series":
        """Rows overlapping [since, until)."""
        hi = int(np.searchsorted(self.t0, until, side="left"))
        idx = np.nonzero(self.t1[:hi] >= since)[0]
        return self.take(idx)


@dataclass
class _Index:
    acks: _Series
    reads: _Series
    rereads: list
    leaders: list
    isr: _Series  # t0 = t1 = time, off0 = size; extra = (isr, leader, kind)
    gaps: list
    windows: list | None
    findings: _Series  # extra = finding rows
    start: int | None
    end: int | None


def _index(reader, topic: str, partition: int) -> _Index:
    def compute(_acks, _consumed, findings, events, _hot, _win):
        from kafka_audit.auditor_api.routes.findings import committed_findings

        here = (pc.field("topic") == topic) & (pc.field("partition") == pa.scalar(
            partition, pa.int32()))
        # the ledger and the stream are not held (deps.UNHELD): this partition's rows are
        # kept apart and read on from each commit's new files (the latest version)
        a = reader.snapshots.rows_of("acks", here & pc.is_valid(pc.field("offset")),
                                     ["ack_time", "last_ack_time", "offset", "count"])
        ack = _Series(_us(a.column("ack_time")), _us(a.column("last_ack_time")),
                      _int(a.column("offset")),
                      _int(a.column("offset")) + _int(a.column("count")) - 1,
                      _int(a.column("count")))
        ack = ack.take(np.argsort(ack.t0, kind="stable"))

        c = reader.snapshots.rows_of("consumed", here, [
            "source", "kafka_timestamp", "read_time", "offset", "count", "status",
            "producer_id", "run_id", "stamped"])
        stream = c.filter(pc.field("source") == "stream")
        t = _us(pc.coalesce(stream.column("kafka_timestamp"), stream.column("read_time")))
        off0 = _int(stream.column("offset"))
        reads = _Series(t, t.copy(), off0, off0 + _int(stream.column("count")) - 1,
                        _int(stream.column("count")))
        by_offset = np.argsort(reads.off0, kind="stable")
        if len(by_offset) > 1:  # a run's end: the next run's first record time (an estimate)
            nxt = np.empty_like(by_offset)
            nxt[:-1] = by_offset[1:]
            nxt[-1] = by_offset[-1]
            reads.t1[by_offset] = np.maximum(reads.t0[by_offset], reads.t0[nxt])
        reads = reads.take(np.argsort(reads.t0, kind="stable"))
        rr = c.filter(pc.field("source") == "reread").sort_by([("read_time", "ascending")])
        rereads = [{"time": r["read_time"], "offset": r["offset"],
                    "last_offset": r["offset"] + r["count"] - 1, "count": r["count"],
                    "status": r["status"],
                    "stamped_by": f"{r['producer_id']}/{r['run_id']}" if r["stamped"] else None}
                   for r in rr.to_pylist()]

        e = events.data.filter(here).sort_by([("event_time", "ascending")])
        rows = e.to_pylist()
        # an election's kind is a row of its own beside the change's, at its time
        elections = {(r["event_time"], r["source"]): r["kind"] for r in rows
                     if r["kind"] in (UNCLEAN_ELECTION, ELR_ELECTION)}
        leaders = [{"time": r["event_time"], "kind": r["kind"], "leader": r["leader"],
                    "previous_leader": r["previous_leader"], "leader_epoch": r["leader_epoch"],
                    "isr": r["isr"], "previous_isr": r["previous_isr"],
                    "election": elections.get((r["event_time"], r["source"]))}
                   for r in rows if r["kind"] in LEADER_CHANGES]
        with_isr = [r for r in rows if r["isr"] is not None]
        ti = np.array([int(r["event_time"].timestamp() * _US) for r in with_isr], np.int64)
        size = np.array([len(r["isr"]) for r in with_isr], np.int64)
        isr = _Series(ti, ti.copy(), size, size.copy(), np.ones(len(ti), np.int64),
                      [(r["isr"], r["leader"], r["kind"]) for r in with_isr])
        blind = events.data.filter(pc.field("kind") == BLIND).sort_by(
            [("event_time", "ascending")])
        gaps = [{"start": r["event_time"], "end": r["until"]} for r in blind.to_pylist()]

        f = committed_findings(reader).filter(
            here & (pc.field("kind") != "confirmed") & pc.is_valid(pc.field("ack_time")))
        f = f.sort_by([("ack_time", "ascending"), ("offset", "ascending")])
        change_times = np.array([int(r["time"].timestamp() * _US) for r in leaders], np.int64)
        extra = []
        for r in f.select(["kind", "subkind", "cause", "finding_id", "offset", "count",
                           "ack_time"]).to_pylist():
            # the rules' own reach (a change seen up to CAUSE_SLACK before the ack)
            t0 = int((r["ack_time"] - CAUSE_SLACK).timestamp() * _US)
            i = int(np.searchsorted(change_times, t0, side="left"))
            extra.append({**r, "leader_change": leaders[i]["time"] if i < len(leaders)
                          else None})
        ft = _us(f.column("ack_time"))
        fo = _int(f.column("offset"))
        found = _Series(ft, ft.copy(), fo, fo + _int(f.column("count")) - 1,
                        _int(f.column("count")), extra)
        windows = _windows(reader, topic, partition)

        times = [int(x) for s in (ack, reads, found) if len(s.t0)
                 for x in (s.t0.min(), s.t1.max())]
        times += [int(r["time"].timestamp() * _US) for r in rereads]
        times += ti.tolist()
        return _Index(ack, reads, rereads, leaders, isr, gaps, windows, found,
                      min(times) if times else None, max(times) if times else None)

    return reader.memo(("timeline_index", topic, partition),
                       ("acks", "consumed", "findings", "cluster_events", "audit_hot",
                        "windows"), compute)


def _windows(reader, topic: str, partition: int) -> list | None:
    """The partition's windows from a ``windows`` table, if the warehouse has one; its
    columns are read by name (kind, start, end; opened_by, closed_by, acks, losses if
    present)."""
    if not reader.exists("windows"):
        return None
    t = reader.snapshot("windows").data
    names = set(t.column_names)
    start = next((n for n in ("start", "start_time", "opened_at") if n in names), None)
    end = next((n for n in ("end", "end_time", "closed_at") if n in names), None)
    if not {"topic", "partition", "kind"} <= names or start is None:
        return []
    t = t.filter((pc.field("topic") == topic)
                 & (pc.field("partition") == pa.scalar(partition, t.schema.field("partition")
                                                       .type)))
    out = []
    for r in t.to_pylist():
        out.append({"kind": r["kind"], "start": r[start], "end": r.get(end) if end else None,
                    **{k: r.get(k) for k in ("opened_by", "closed_by", "acks", "losses")
                       if k in names}})
    return sorted(out, key=lambda w: w["start"])


def _iso(us: np.ndarray) -> list[str]:
    return [s + "Z" for s in np.datetime_as_string(us.astype("datetime64[us]"), unit="us")]


def _buckets(s: _Series, since: int, until: int, points: int) -> np.ndarray:
    width = max((until - since) / points, 1)
    return np.clip(((s.t0 - since) / width).astype(np.int64), 0, points - 1)


def _spans(s: _Series, since: int, until: int, points: int) -> tuple[list[dict], bool]:
    """Rows as spans; merged per time bucket if there are more than ``points``."""
    if len(s.t0) <= points:
        t0, t1, o0, o1, n = s.t0, s.t1, s.off0, s.off1, s.count
        runs = np.ones(len(t0), np.int64)
        merged = False
    else:
        b = _buckets(s, since, until, points)
        starts = np.flatnonzero(np.r_[True, b[1:] != b[:-1]])
        t0 = np.minimum.reduceat(s.t0, starts)
        t1 = np.maximum.reduceat(s.t1, starts)
        o0 = np.minimum.reduceat(s.off0, starts)
        o1 = np.maximum.reduceat(s.off1, starts)
        n = np.add.reduceat(s.count, starts)
        runs = np.diff(np.r_[starts, len(b)])
        merged = True
    return [{"time": a, "end_time": b, "offset": int(c), "last_offset": int(d),
             "count": int(e), "runs": int(f)}
            for a, b, c, d, e, f in zip(_iso(t0), _iso(t1), o0, o1, n, runs, strict=True)
            ], merged


def _isr(s: _Series, since: int, until: int, points: int) -> tuple[list[dict], bool]:
    """ISR sizes in the range (with the one in force at ``since``), the fewest per bucket
    when there are more than ``points``."""
    before = int(np.searchsorted(s.t0, since, side="left"))
    hi = int(np.searchsorted(s.t0, until, side="left"))
    idx = np.arange(max(before - 1, 0), hi)
    merged = len(idx) > points
    if merged:
        b = _buckets(s.take(idx), since, until, points)
        keep = []
        for bucket in np.unique(b):
            members = idx[b == bucket]
            keep.append(int(members[np.argmin(s.off0[members])]))
        idx = np.array(keep, np.int64)
    times = _iso(s.t0[idx])
    return [{"time": times[k], "size": int(s.off0[i]), "isr": s.extra[i][0],
             "leader": s.extra[i][1], "kind": s.extra[i][2]}
            for k, i in enumerate(idx)], merged


def _findings(s: _Series, since: int, until: int, points: int) -> tuple[list[dict], bool]:
    w = s.window(since, until)
    if len(w.t0) <= points:
        return [{"kind": r["kind"], "subkind": r["subkind"], "cause": r["cause"],
                 "time": r["ack_time"], "end_time": r["ack_time"], "offset": r["offset"],
                 "last_offset": None if r["offset"] is None else r["offset"] + r["count"] - 1,
                 "count": r["count"], "runs": 1, "finding_id": r["finding_id"],
                 "leader_change": r["leader_change"]} for r in w.extra], False
    b = _buckets(w, since, until, points)
    groups: dict[tuple, list[int]] = {}
    for i, (bucket, r) in enumerate(zip(b.tolist(), w.extra, strict=True)):
        groups.setdefault((bucket, r["kind"], r["cause"]), []).append(i)
    out = []
    for (_b, kind, cause), rows in sorted(groups.items(), key=lambda g: g[0][0]):
        first = w.extra[rows[0]]
        out.append({"kind": kind, "subkind": first["subkind"], "cause": cause,
                    "time": _iso(w.t0[rows].min(keepdims=True))[0],
                    "end_time": _iso(w.t1[rows].max(keepdims=True))[0],
                    "offset": int(w.off0[rows].min()), "last_offset": int(w.off1[rows].max()),
                    "count": int(w.count[rows].sum()), "runs": len(rows), "finding_id": None,
                    "leader_change": first["leader_change"]})
    return out, True


def _in(t: datetime | None, since: int, until: int) -> bool:
    return t is not None and since <= int(t.timestamp() * _US) < until


def router(points_max: int) -> APIRouter:
    """The partition routes, ``points`` bounded by ``points_max`` in the schema."""
    r = APIRouter(prefix="/v1", tags=["partitions"])
    points_default = min(500, points_max)

    @r.get("/partitions", response_model=list[PartitionOut], responses={200: {"content": {
        "application/json": {"example": [{
            "topic": "orders", "partition": 0, "frontier": 181260, "settled_frontier": 181260,
            "observed_at": "2026-11-22T07:51:40Z", "pending": 0, "unseen": 0,
            "oldest_unseen": None, "pass_id": 7}]}}}})
    def partitions(reader: ReaderDep, topic: Annotated[str | None, Query(
            description="one topic (default: every topic)", examples=["orders"])] = None
                   ) -> list:
        """Per partition, as of the last committed pass: frontier, settled frontier, pending
        writes, and ``unseen`` ones (unread longer than ``audit.unseen_after_seconds``)."""
        return [p for p in latest_partitions(reader) if topic is None or p.topic == topic]

    @r.get("/partitions/{topic}/{partition}/timeline", response_model=Timeline,
           responses={**problem_responses(404), 200: {"content": {"application/json": {
               "example": TIMELINE_EXAMPLE}}}})
    def timeline(
        reader: ReaderDep,
        topic: Annotated[str, Path(max_length=255, examples=["orders"])],
        partition: Annotated[int, Path(ge=0, le=INT32_MAX, examples=[0])],
        since: Annotated[Instant | None, Query(
            description="from (default: the partition's first recorded moment)")] = None,
        until: Annotated[Instant | None, Query(
            description="to, excluded (default: just after its last recorded moment)")]
        = None,
        points: Annotated[int, Query(ge=10, le=points_max, description=(
            "most rows per series; more are merged into this many time buckets"))]
        = points_default,
    ) -> dict:
        """A partition over a time range: acks and reads as runs, re-reads, leader changes,
        ISR size, the watcher's blind gaps, windows (when the warehouse has them) and
        findings (each loss with the leader change that lost it); downsampled into
        ``points`` time buckets when a series holds more rows. A topic or partition nothing
        was recorded for is a 404."""
        if since is not None and until is not None and since >= until:
            raise bad_parameters(("since", "must be before until"),
                                 ("until", "must be after since"))
        known = reader.known_partitions().get(topic)
        if known is None:  # no table names it: nothing is scanned for it
            raise ProblemError(404, f"unknown topic {topic!r}: no acked write, consumed "
                                    f"record, finding or cluster event names it",
                               type_=UNKNOWN_TOPIC, title="Unknown topic")
        if partition not in known:
            raise ProblemError(404, f"nothing recorded for {topic}-{partition}: no acked write, "
                                    f"read, event or finding", type_=UNKNOWN_PARTITION,
                               title="Unknown partition")
        ix = _index(reader, topic, partition)
        if ix.start is None:
            raise ProblemError(404, f"nothing recorded for {topic}-{partition}: no acked write, "
                                    f"read, event or finding", type_=UNKNOWN_PARTITION,
                               title="Unknown partition")
        lo = since if since is not None else ix.start
        hi = until if until is not None else ix.end + 1
        if lo >= hi:  # one bound given, outside what was recorded
            lo, hi = (lo, lo + 1) if since is not None else (hi - 1, hi)
        merged = []
        acks, m = _spans(ix.acks.window(lo, hi), lo, hi, points)
        merged += ["acks"] * m
        reads, m = _spans(ix.reads.window(lo, hi), lo, hi, points)
        merged += ["reads"] * m
        isr, m = _isr(ix.isr, lo, hi, points)
        merged += ["isr"] * m
        found, m = _findings(ix.findings, lo, hi, points)
        merged += ["findings"] * m
        rereads = [x for x in ix.rereads if _in(x["time"], lo, hi)][:points]
        leaders = [x for x in ix.leaders if _in(x["time"], lo, hi)][:points]
        gaps = [g for g in ix.gaps if int(g["start"].timestamp() * _US) < hi
                and (g["end"] is None or int(g["end"].timestamp() * _US) >= lo)][:points]
        windows = None if ix.windows is None else [
            w for w in ix.windows if int(w["start"].timestamp() * _US) < hi
            and (w["end"] is None or int(w["end"].timestamp() * _US) >= lo)][:points]
        bounds = _iso(np.array([lo, hi], np.int64))
        # a dict: FastAPI validates it once against the response model
        return {"topic": topic, "partition": partition, "since": bounds[0], "until": bounds[1],
                "points": points, "downsampled": merged, "acks": acks, "reads": reads,
                "rereads": rereads, "leader_changes": leaders, "isr": isr, "gaps": gaps,
                "windows": windows, "findings": found}

    return r


TIMELINE_EXAMPLE = {
    "topic": "orders", "partition": 0, "since": "2026-11-22T07:50:55Z",
    "until": "2026-11-22T07:51:10Z", "points": 500, "downsampled": [],
    "acks": [{"time": "2026-11-22T07:51:01.9Z", "end_time": "2026-11-22T07:51:02.6Z",
              "offset": 26600, "last_offset": 26833, "count": 234, "runs": 1}],
    "reads": [{"time": "2026-11-22T07:51:01.9Z", "end_time": "2026-11-22T07:51:02.0Z",
               "offset": 26600, "last_offset": 26734, "count": 135, "runs": 1}],
    "rereads": [{"time": "2026-11-22T07:51:35Z", "offset": 26735, "last_offset": 26833,
                 "count": 99, "status": "record", "stamped_by": "demo/9f2c1a"}],
    "leader_changes": [{"time": "2026-11-22T07:51:03.1Z", "kind": "leader_change",
                        "leader": 1, "previous_leader": 2, "leader_epoch": 5,
                        "isr": [1, 3], "previous_isr": [2, 1, 3], "election": None}],
    "isr": [{"time": "2026-11-22T07:51:03.1Z", "size": 2, "isr": [1, 3], "leader": 1,
             "kind": "leader_change"}],
    "gaps": [], "windows": None,
    "findings": [{"kind": "lost", "subkind": "overwritten", "cause": "acks=1 fail-over",
                  "time": "2026-11-22T07:51:02.2Z", "end_time": "2026-11-22T07:51:02.2Z",
                  "offset": 26735, "last_offset": 26833, "count": 99, "runs": 1,
                  "finding_id": "lost:orders:0:demo:9f2c1a:79704",
                  "leader_change": "2026-11-22T07:51:03.1Z"}]}
