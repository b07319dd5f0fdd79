"""``GET /v1/suspicions``: writes suspected lost at the fail-over, and what became of them.

The suspicion marker (``jobs/audit/suspicions.py``) writes a ``suspicions`` row for the
writes a leader change truncated, seconds after the change, before any read could judge
them. Each row's state is derived here from the committed findings of its writes
(:func:`~kafka_audit.schemas.suspicions.settle`): *suspected* while some are not judged
yet, then *confirmed* (judged lost), *withdrawn* (judged otherwise, said why) or *partly*
confirmed. A suspicion is never a verdict: ``/v1/summary``'s verdicts are the read's alone;
its ``suspected`` part counts the suspected writes apart. A loss finding a suspicion
foretold names it (``suspected_by`` in ``/v1/findings``): the leader change that
truncated it.
"""

# no ``from __future__ import annotations``: FastAPI resolves the route's annotations
import threading
from bisect import bisect_left
from datetime import UTC, datetime
from typing import Annotated, Literal

import pyarrow as pa
import pyarrow.compute as pc
from fastapi import APIRouter, Query
from pydantic import BaseModel, Field, create_model

from kafka_audit.auditor_api.deps import ReaderDep, progress_of
from kafka_audit.auditor_api.params import (
    Partition,
    other_filters_cursor,
    pack_cursor,
    unpack_cursor,
)
from kafka_audit.schemas.suspicions import BY_TIME, PARTLY, PRIMARY_KINDS, STATES, WITHDRAWN, settle
from kafka_audit.schemas.tables import row_model
from kafka_audit.schemas.verdicts import LOSSES

__all__ = ["router", "SuspicionOut", "SuspectedWrites", "settled_suspicions",
           "suspected_totals", "suspected_by"]

router = APIRouter(prefix="/v1", tags=["suspicions"])

State = Literal[STATES]  # type: ignore[valid-type]

SuspicionOut = create_model(
    "SuspicionOut", __base__=row_model("suspicions", "SuspicionRow"),
    state=(State, Field(description="suspected: some of its writes are not judged yet; "
                                    "confirmed: all judged lost; withdrawn: none judged lost; "
                                    "partly: some lost, some not")),
    lost=(int, Field(description="its writes judged lost or lost_after_seen")),
    found=(int, Field(description="its writes judged confirmed: found in the log")),
    other=(int, Field(description="its writes judged another verdict (indeterminate, "
                                  "unverified, ...)")),
    pending=(int, Field(description="its writes not judged yet")),
    why=(str | None, Field(description="why a withdrawn (or partly confirmed) suspicion was "
                                       "wrong about some writes")))


class SuspectedWrites(BaseModel):
    """Writes suspected lost at a leader change, apart from the verdicts (a state, not a
    verdict): how many, and what the read made of them."""

    suspected: int = Field(description="every write ever suspected")
    open: int = Field(description="suspected writes not judged yet")
    confirmed: int = Field(description="suspected writes judged lost")
    withdrawn: int = Field(description="suspected writes judged otherwise (found in the log, "
                                       "or another verdict than a loss)")


class SuspicionsPage(BaseModel):
    as_of_pass: int = Field(description="the committed audit pass the states are of")
    total: int = Field(description="suspicions matching the filters")
    writes: SuspectedWrites = Field(description="their writes, by what became of them")
    items: list[SuspicionOut] = Field(  # type: ignore[valid-type]
        description="the newest first (by changed_at), at most limit")
    next_cursor: str | None = Field(
        None, description="give it as cursor for the next page (the same filters); null on "
        "the last page")


_FINDING_COLUMNS = ["topic", "partition", "producer_id", "run_id", "kind", "seq", "count",
                    "pass_id"]
#: the tables a suspicion's state is derived from
_SETTLED_BY = ("suspicions", "findings", "audit_hot")


def _why(r: dict) -> str | None:
    if r["state"] not in (WITHDRAWN, PARTLY):
        return None
    parts = []
    if r["found"]:
        parts.append(f"{r['found']} found in the log")
    if r["other"]:
        parts.append(f"{r['other']} judged neither confirmed nor lost")
    said = " and ".join(parts)
    if r["basis"] == BY_TIME:
        return (f"{said}: suspected by acknowledgement time (the ledger names no broker), "
                f"so writes the new leader acknowledged at once can fall in")
    return (f"{said}: the old leader acknowledged them, yet the new leader's log holds "
            f"them (it held more of epoch {r['leader_epoch']} than the end offset it "
            f"answered, {r['end_offset']})")


class _Verdicts:
    """The verdict findings of producer runs, each run's sorted by seq, and the ones a span
    of seqs meets found by bisection (a run holds thousands; the suspicions of a day,
    hundreds). A write has one verdict, so they do not overlap; were some to, the running
    highest end still finds every one (no finding is left out, only more looked at)."""

    def __init__(self) -> None:
        self.starts: dict[tuple, list[int]] = {}
        self.items: dict[tuple, list[tuple[str, int, int]]] = {}
        self.reach: dict[tuple, list[int]] = {}  # the highest end up to each item

    def overlapping(self, key: tuple, lo: int, hi: int) -> list[tuple[str, int, int]]:
        starts, items, reach = self.starts.get(key), self.items.get(key), self.reach.get(key)
        if not starts:
            return []
        i = bisect_left(starts, hi)  # those starting at or past hi meet nothing
        out = []
        while i > 0 and reach[i - 1] > lo:
            i -= 1
            if items[i][1] + items[i][2] > lo:
                out.append(items[i])
        return out


def _verdicts_by_run(found: dict[tuple, list[tuple[str, int, int, int]]], committed: int
                     ) -> _Verdicts:
    """The verdicts ``found`` per run (``(kind, seq, count, pass_id)``) that the committed
    pass ``committed`` serves, indexed."""
    out = _Verdicts()
    for key, items in found.items():
        served = sorted((f for f in items if f[3] <= committed), key=lambda f: f[1])
        reach: list[int] = []
        for _kind, seq, count, _pass in served:
            reach.append(max(seq + count, reach[-1] if reach else seq + count))
        out.starts[key] = [f[1] for f in served]
        out.items[key] = [f[:3] for f in served]
        out.reach[key] = reach
    return out


def _key(r: dict) -> tuple:
    return (r["topic"], r["partition"], r["producer_id"], r["run_id"])


def _appended(snap, since: int | None) -> pa.Table | None:
    """The rows ``snap`` holds past the version ``since`` (None: not reached from it by
    appends alone, or no version yet: read everything)."""
    if since is None:
        return None
    if snap.version == since:
        return snap.data.slice(snap.data.num_rows)
    held = dict(snap.marks).get(since)
    return None if held is None else snap.data.slice(held)


def _with_state(raw: dict, judged: _Verdicts) -> dict:
    r = dict(raw)
    s = settle(r["seq"], r["count"], judged.overlapping(_key(r), r["seq"], r["seq"] + r["count"]))
    r.update(state=s.state, lost=s.lost, found=s.found, other=s.other, pending=s.pending)
    r["why"] = _why(r)
    return r


class _Settling:
    """What one derivation of the suspicions' states leaves the next, so that each pays for
    what changed rather than for every suspicion again (a fail-over's thousands are asked
    for every second while the audit commits a pass every few, 0.5 s of CPU a derivation
    over 6,945 of them: ``bench/suspicion_states.py``):

    * the suspicions read through ``version``: a later version's appended rows are the only
      ones read then (``Snapshot.marks``);
    * ``done``: those every write of which is judged, with their state: a write's verdict
      is given once (``Kind``), so theirs does not change again;
    * ``open``: the others, each as read and as last settled, settled again only when
      their run gained a verdict (the findings appended since ``findings``) or the
      committed pass moved;
    * ``judged``: the verdicts (kind, seq, count, pass) of the open suspicions' runs, kept
      from the findings read through ``findings``.

    A suspicions version not reached by appends alone (retention dropped rows), or a
    committed pass gone back, begins afresh; findings read whole are read again for the
    open runs."""

    def __init__(self) -> None:
        self.lock = threading.Lock()  # one derivation at a time: each builds on the last
        self._begin()

    def _begin(self) -> None:
        self.version: int | None = None
        self.findings: int | None = None
        self.committed: int | None = None
        self.done: list[dict] = []
        self.open: list[tuple[dict, dict]] = []
        self.judged: dict[tuple, list[tuple[str, int, int, int]]] = {}

    def derive(self, snap, findings, committed: int) -> list[dict]:
        """Every suspicion of ``snap`` settled by the verdicts of ``findings`` the pass
        ``committed`` serves; the newest change first. One that fails leaves nothing half
        done: the next begins afresh."""
        with self.lock:
            try:
                return self._derive(snap, findings, committed)
            except BaseException:
                self._begin()
                raise

    def _derive(self, snap, findings, committed: int) -> list[dict]:
        new = _appended(snap, self.version)
        if new is None or (self.committed is not None and committed < self.committed):
            self._begin()
            new = snap.data
        self.version = snap.version
        rows = [_utc_times(r) for r in new.to_pylist()]
        opened = {_key(raw) for raw, _ in self.open}
        fresh = {_key(r) for r in rows} - opened  # runs with no verdicts kept yet
        gained = _appended(findings, self.findings)
        if gained is None:  # read whole (or the first time): the open runs' verdicts again
            self.judged, touched = {}, set(opened)
            self._take(findings.data, opened | fresh)
        else:
            touched = self._take(gained, opened)
            self._take(findings.data, fresh)
        self.findings = findings.version
        if committed != self.committed:
            touched = opened
        self.committed = committed
        again = [raw for raw, _ in self.open if _key(raw) in touched] + rows
        judged = _verdicts_by_run({k: self.judged.get(k, []) for k in map(_key, again)},
                                  committed)
        settled = [_with_state(raw, judged) for raw in again]
        self.done.extend(r for r in settled if not r["pending"])
        self.open = [(raw, r) for raw, r in self.open if _key(raw) not in touched] + [
            (raw, r) for raw, r in zip(again, settled, strict=True) if r["pending"]]
        still = {_key(raw) for raw, _ in self.open}
        self.judged = {k: v for k, v in self.judged.items() if k in still}
        return sorted(self.done + [r for _, r in self.open], key=_order, reverse=True)

    def _take(self, findings: pa.Table, keys: set[tuple]) -> set[tuple]:
        """Add the verdicts of ``findings`` on the runs ``keys`` to ``judged``: the runs
        that gained one."""
        if not keys or findings.num_rows == 0:
            return set()
        t = findings.filter(pc.field("seq").is_valid() & pc.field("count").is_valid()
                            & pc.field("kind").isin(sorted(PRIMARY_KINDS))
                            & pc.field("run_id").isin(sorted({k[3] for k in keys})))
        gained = set()
        cols = [t.column(c).to_pylist() for c in _FINDING_COLUMNS]
        for topic, partition, producer, run, kind, seq, count, pass_id in zip(*cols,
                                                                             strict=True):
            key = (topic, partition, producer, run)
            if key in keys:
                self.judged.setdefault(key, []).append((kind, seq, count, pass_id))
                gained.add(key)
        return gained


def _utc_times(r: dict) -> dict:
    for k in ("ack_time", "last_ack_time", "changed_at", "suspected_at"):
        r[k] = r[k].astimezone(UTC)
    return r


def settled_suspicions(reader) -> list[dict]:
    """Every ``suspicions`` row with its state by the committed findings, derived once per
    version of suspicions, findings and the committed pass from what the last derivation
    left (:class:`_Settling`); the newest change first."""
    state = reader.snapshots.kept("suspicions_settling", _Settling)
    return reader.memo("settled_suspicions", _SETTLED_BY, lambda snap, findings, hot:
                       state.derive(snap, findings, progress_of(hot).pass_id))


def suspected_totals(rows: list[dict]) -> SuspectedWrites:
    return SuspectedWrites(suspected=sum(r["count"] for r in rows),
                           open=sum(r["pending"] for r in rows),
                           confirmed=sum(r["lost"] for r in rows),
                           withdrawn=sum(r["found"] + r["other"] for r in rows))


def _by_run(reader) -> dict[tuple, list[dict]]:
    """The settled suspicions per (topic, partition, producer, run), built once a version."""
    def compute(*_snaps):
        out: dict[tuple, list[dict]] = {}
        for s in settled_suspicions(reader):
            out.setdefault((s["topic"], s["partition"], s["producer_id"], s["run_id"]),
                           []).append(s)
        return out

    return reader.memo("suspicions_by_run", _SETTLED_BY, compute)


def suspected_by(reader, rows: list[dict]) -> None:
    """Set ``suspected_by`` on finding rows: for a loss, the leader change whose suspicion
    held its first write (old and new leader, the epoch, where it ends, when it changed and
    when it was suspected); null otherwise."""
    losses = {k.value for k in LOSSES}
    if not any(r.get("kind") in losses for r in rows):
        for r in rows:
            r["suspected_by"] = None
        return
    by_run = _by_run(reader)
    for r in rows:
        r["suspected_by"] = None
        if r.get("kind") not in losses or r.get("seq") is None:
            continue
        for s in by_run.get((r["topic"], r["partition"], r["producer_id"], r["run_id"]), ()):
            if s["seq"] <= r["seq"] < s["seq"] + s["count"]:
                r["suspected_by"] = {k: s[k] for k in (
                    "old_leader", "new_leader", "leader_epoch", "new_epoch", "end_offset",
                    "changed_at", "suspected_at", "basis")}
                break


@router.get("/suspicions", response_model=SuspicionsPage)
def list_suspicions(
    reader: ReaderDep,
    topic: str | None = None,
    partition: Partition = None,
    state: Annotated[list[State] | None, Query(description="one or more states")] = None,
    limit: Annotated[int, Query(ge=1, le=1000)] = 100,
    cursor: Annotated[str | None, Query(
        description="next_cursor of the previous page (the same filters): the suspicions "
                    "after the last one it served, in the same order")] = None,
) -> SuspicionsPage:
    """Writes suspected lost at a leader change (where the old leader's epoch ends in the
    new leader's log, asked at the change), each with the change, the basis (the
    acknowledging broker, or the acknowledgement time where the ledger names none) and
    what the read after settle made of them. The newest change first; ``total`` and
    ``writes`` count every page's. A traversal by ``next_cursor`` serves each suspicion
    once; one written meanwhile that sorts before the page reached (a newer change, or a
    later piece of a change being followed) is not among its later pages: a first page
    asked again shows it."""
    query = [topic, partition, sorted(state or [])]
    rows = [r for r in settled_suspicions(reader)
            if (topic is None or r["topic"] == topic)
            and (partition is None or r["partition"] == partition)
            and (not state or r["state"] in state)]
    page = rows
    if cursor is not None:
        after = _decode_cursor(cursor, query)
        page = [r for r in rows if _order(r) < after]
    nxt = _encode_cursor(page[limit - 1], query) if len(page) > limit else None
    return SuspicionsPage(as_of_pass=reader.committed_pass(), total=len(rows),
                          writes=suspected_totals(rows), next_cursor=nxt,
                          items=[SuspicionOut(**r) for r in page[:limit]])


def _order(r: dict) -> tuple:
    """A suspicion's place in the order served (newest change first: descending)."""
    return (r["changed_at"], r["topic"], r["partition"], r["producer_id"], r["run_id"],
            r["seq"])


def _encode_cursor(last: dict, query: list) -> str:
    key = _order(last)
    return pack_cursor({"v": 1, "k": [key[0].isoformat(), *key[1:]], "q": query})


def _decode_cursor(cursor: str, query: list) -> tuple:
    """The place of the last suspicion a cursor's page served; a 422 naming ``cursor``
    otherwise."""
    def check(d: dict) -> bool:
        at, topic, partition, producer, run, seq = d["k"]
        return (d.get("v") == 1 and datetime.fromisoformat(at).tzinfo is not None
                and isinstance(topic, str) and type(partition) is int
                and isinstance(producer, str) and isinstance(run, str) and type(seq) is int)

    data = unpack_cursor(cursor, check)
    if data.get("q") != query:
        raise other_filters_cursor()
    at, *rest = data["k"]
    return (datetime.fromisoformat(at), *rest)
