"""Suspected at the fail-over: the writes a leader change truncates, before any read (pure).

When another broker leads a partition, the watcher asks it where the old leader's epoch
ends in its log (an ``epoch_end`` row of ``cluster_events``,
``jobs/watcher/epoch_ends.py``). A write the old leader acknowledged in that epoch at or
above that offset is not in the new leader's log: the old leader truncates it when it
rejoins. Such writes are *suspected*: a state, not a verdict. The read after settle still
judges every write exactly (``engine.py``); a suspicion is then confirmed (the write is
judged lost) or withdrawn (it was found), and says why.

Which writes the old leader acknowledged in that epoch:

* **by broker** (the ledger names the acknowledging broker: the kaudit plugin): runs of
  the old leader, from the epoch's start (when the watcher saw it lead at that epoch; the
  beginning when not seen) until it leads again at a newer epoch. A leader that goes on
  acknowledging after the change (paused past its session, a split brain) is included:
  those writes are truncated as well. A leadership read from the metadata log is
  exact (the controller's time: a broker acknowledges at a new epoch only after it);
  a polled one is seen up to :data:`LEAD_SLACK` late: runs that close to its start or
  its return count as the old epoch's unless they lie at or above where its new epoch
  begins (the answer of the change that made it lead again, where known). By offset a
  paused leader's last writes before it leads again look like its new epoch's: only
  the exact time tells them apart;
* **by time** (no broker named: confluent-kafka's Python reports): runs acknowledged from
  the epoch's start until the change. Writes the new leader acknowledged at once can fall
  in; the read withdraws them, and the suspicion says it was by time.

A run is cut at the end offset: only its part at or above it is suspected. A write is
suspected once, by the first change that names it.

Settled as usual (:func:`kafka_audit.schemas.suspicions.settle`): once the read after
settle judged the suspected writes, the suspicion is *confirmed* (judged lost),
*withdrawn* (judged otherwise: found in the log, or not judged lost) or *partly*
confirmed; until then it stays *suspected*. The state is derived where it is read, so no
row is ever rewritten.

The rows in and out (``cluster_events``, ``acks``, ``suspicions``) are plain dicts here:
:func:`epoch_end_of`, :func:`leadership_of`, :func:`ack_run_of`, :func:`suspicion_row`.
"""

from __future__ import annotations

import json
from bisect import bisect_right, insort
from dataclasses import dataclass
from datetime import UTC, datetime, timedelta

from kafka_audit.jobs.core.model import AckRun
from kafka_audit.jobs.core.rules import DEPOSED_SLACK
from kafka_audit.schemas.events import EPOCH_END, EXACT_SOURCES, FIRST_SEEN, LEADER_CHANGES
from kafka_audit.schemas.suspicions import BY_BROKER, BY_TIME

__all__ = ["EpochEnd", "Leadership", "Suspicion", "BY_BROKER", "BY_TIME", "suspect",
           "epoch_end_of", "leadership_of", "ack_run_of", "suspicion_row"]


@dataclass(frozen=True)
class EpochEnd:
    """An ``epoch_end`` row: ``epoch`` (led by ``old_leader``) ends at ``end_offset`` in the
    log of the broker asked; the change to ``new_leader`` (``new_epoch``) at
    ``changed_at``."""

    topic: str
    partition: int
    old_leader: int
    epoch: int
    end_offset: int
    changed_at: datetime
    new_leader: int | None = None
    new_epoch: int | None = None


@dataclass(frozen=True)
class Leadership:
    """From ``at`` on, ``leader`` leads the partition at ``epoch`` (a cluster event);
    ``exact``: read from the metadata log or ZooKeeper (at the controller's time), else
    polled."""

    at: datetime
    leader: int
    epoch: int
    exact: bool = False

    @property
    def slack(self) -> timedelta:
        """How late it may have been seen."""
        return timedelta(0) if self.exact else LEAD_SLACK


@dataclass(frozen=True)
class Suspicion:
    """``run`` (a piece of an acknowledged run) is suspected lost by the change ``change``;
    ``basis``: :data:`BY_BROKER` or :data:`BY_TIME`."""

    run: AckRun
    change: EpochEnd
    basis: str


#: leaderships are seen up to this late when the watcher polls (the lateness the split-brain
#: rule allows a polled change, ``rules.DEPOSED_SLACK``); the old leader's runs this close
#: to when it began or began again to lead are told by offset
LEAD_SLACK = DEPOSED_SLACK


def _back(change: EpochEnd, known: list[EpochEnd]) -> EpochEnd | None:
    """The first later change that made the old leader lead again (its ``end_offset`` is
    where its new epoch begins), if its answer is known."""
    backs = [e for e in known if e.new_leader == change.old_leader
             and e.changed_at > change.changed_at
             and (e.new_epoch is None or e.new_epoch > change.epoch)]
    return min(backs, key=lambda e: e.changed_at) if backs else None


def _window(change: EpochEnd, leaders: list[Leadership]
              ) -> tuple[Leadership | None, Leadership | None]:
    """When the old leader began leading at the change's epoch (None: not seen), and when
    it led again at a newer epoch after the change (None: not since), each as seen first."""
    start = again = None
    for ls in leaders:
        if ls.leader != change.old_leader:
            continue
        if ls.epoch == change.epoch and ls.at <= change.changed_at:
            # one leadership seen more than once (the log's row, a restarted watcher's
            # first sight): the first sight is nearest its start
            start = ls if start is None or ls.at - ls.slack < start.at - start.slack \
                else start
        elif ls.epoch > change.epoch and ls.at > change.changed_at:
            again = ls if again is None or ls.at - ls.slack < again.at - again.slack \
                else again
    return start, again


def suspect(acks: list[AckRun], changes: list[EpochEnd], leaders: list[Leadership],
            taken: dict[tuple[str, str], list[tuple[int, int]]] | None = None,
            known: list[EpochEnd] | None = None) -> list[Suspicion]:
    """The suspected pieces of one partition's acknowledged runs (``acks``), by each
    ``epoch_end`` change (in order of ``changed_at``) and the partition's leaderships.

    ``taken``: the seqs already suspected, per ``(producer_id, run_id)``, as half-open
    spans (those are not suspected again); the new pieces' spans are added to it.
    ``known``: every change whose answer is known (default ``changes``), for where the old
    leader's next epoch begins when it leads again."""
    out: list[Suspicion] = []
    ordered: set[tuple[str, str]] = set()
    taken = {} if taken is None else taken
    known = changes if known is None else known
    for change in sorted(changes, key=lambda c: (c.changed_at, c.epoch)):
        start, again = _window(change, leaders)
        back = _back(change, known)
        for a in acks:
            if not a.placed or a.end <= change.end_offset:
                continue
            if start is not None and a.last_ack < start.at - start.slack:
                continue  # acknowledged before the old leader led at that epoch
            if a.broker is not None:
                if a.broker != change.old_leader:
                    continue
                if (again is not None and a.first_ack >= again.at - again.slack
                        and (back is None or a.end > back.end_offset)):
                    continue  # at or after it led again: its new epoch's writes
                basis = BY_BROKER
            else:
                if a.first_ack > change.changed_at:
                    continue
                basis = BY_TIME
            cut = max(0, change.end_offset - a.offset)  # type: ignore[operator]
            run = (a.producer_id, a.run_id)
            spans = taken.setdefault(run, [])
            if run not in ordered:  # sorted and merged once a call: then found by bisection
                spans[:] = _merged(spans)
                ordered.add(run)
            for lo, hi in _uncovered(a.seq + cut, a.seq + a.count, spans):
                out.append(Suspicion(a.piece(lo - a.seq, hi - a.seq), change, basis))
                insort(spans, (lo, hi))  # outside every span: they stay disjoint
    return out


def _merged(spans: list[tuple[int, int]]) -> list[tuple[int, int]]:
    """``spans`` sorted, overlapping ones joined."""
    out: list[tuple[int, int]] = []
    for lo, hi in sorted(spans):
        if out and lo <= out[-1][1]:
            out[-1] = (out[-1][0], max(out[-1][1], hi))
        else:
            out.append((lo, hi))
    return out


def _uncovered(lo: int, hi: int, spans: list[tuple[int, int]]) -> list[tuple[int, int]]:
    """The parts of seqs ``lo .. hi-1`` outside every span of ``spans`` (sorted, disjoint:
    the spans that can meet it are found by bisection, not walked one by one; a run's
    spans number thousands after a fail-over that cut its writes into many runs)."""
    parts, cur = [], lo
    i = max(0, bisect_right(spans, (lo, lo)) - 1)
    while i < len(spans) and spans[i][0] < hi and cur < hi:
        s_lo, s_hi = spans[i]
        if s_hi > cur:
            if s_lo > cur:
                parts.append((cur, s_lo))
            cur = s_hi
        i += 1
    if cur < hi:
        parts.append((cur, hi))
    return parts


def _utc(t: datetime) -> datetime:
    return t.astimezone(UTC) if t.tzinfo is not None else t.replace(tzinfo=UTC)


def epoch_end_of(row: dict) -> EpochEnd | None:
    """The change an ``epoch_end`` row of ``cluster_events`` tells (None: another kind, or
    a row lacking what the rule needs)."""
    if row.get("kind") != EPOCH_END or None in (row.get("previous_leader"),
                                                  row.get("leader_epoch"), row.get("log_end")):
        return None
    try:
        detail = json.loads(row.get("detail") or "{}")
        changed_at = _utc(datetime.fromisoformat(detail["changed_at"]))
    except (ValueError, TypeError, KeyError):
        return None
    return EpochEnd(row["topic"], row["partition"], row["previous_leader"], row["leader_epoch"],
                    row["log_end"], changed_at, detail.get("new_leader"),
                    detail.get("new_epoch"))


def leadership_of(row: dict) -> Leadership | None:
    """The leadership a leader change (or first sight) of ``cluster_events`` tells (None:
    another kind, no leader, or no epoch)."""
    if (row.get("kind") not in (*LEADER_CHANGES, FIRST_SEEN) or row.get("leader") is None
            or row["leader"] < 0 or row.get("leader_epoch") is None):
        return None
    return Leadership(_utc(row["event_time"]), row["leader"], row["leader_epoch"],
                      row.get("source") in EXACT_SOURCES)


def ack_run_of(row: dict) -> AckRun:
    """An ``acks`` row as the rule's run."""
    return AckRun(row["topic"], row["partition"], row["producer_id"], row["run_id"],
                  row["seq"], row["count"], row["offset"], _utc(row["ack_time"]),
                  _utc(row["last_ack_time"]), row["error_name"], row["acks"],
                  broker=row.get("broker"))


def suspicion_row(s: Suspicion, now: datetime) -> dict:
    """A ``suspicions`` row of ``s``, marked at ``now``."""
    r, c = s.run, s.change
    return {"topic": r.topic, "partition": r.partition, "producer_id": r.producer_id,
            "run_id": r.run_id, "seq": r.seq, "count": r.count, "offset": r.offset,
            "ack_time": r.first_ack, "last_ack_time": r.last_ack, "broker": r.broker,
            "basis": s.basis, "old_leader": c.old_leader, "leader_epoch": c.epoch,
            "end_offset": c.end_offset, "new_leader": c.new_leader,
            "new_epoch": c.new_epoch, "changed_at": c.changed_at, "suspected_at": now}
