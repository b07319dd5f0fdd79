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
  those writes are truncated as well;
* **by time** (no broker named: confluent-kafka's Python reports): runs acknowledged from
  the epoch's start until the change. Writes the new leader acknowledged at once can fall
  in; the read withdraws them, and the suspicion says it was by time.

A run is cut at the end offset: only its part at or above it is suspected. A write is
suspected once, by the first change that names it.
"""

from __future__ import annotations

from dataclasses import dataclass
from datetime import datetime

from kafka_audit.jobs.core.model import AckRun

__all__ = ["EpochEnd", "Leadership", "Suspicion", "BY_BROKER", "BY_TIME", "suspect"]

BY_BROKER, BY_TIME = "broker", "ack_time"


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
    """From ``at`` on, ``leader`` leads the partition at ``epoch`` (a cluster event)."""

    at: datetime
    leader: int
    epoch: int


@dataclass(frozen=True)
class Suspicion:
    """``run`` (a piece of an acknowledged run) is suspected lost by the change ``change``;
    ``basis``: :data:`BY_BROKER` or :data:`BY_TIME`."""

    run: AckRun
    change: EpochEnd
    basis: str


def _window(change: EpochEnd, leaders: list[Leadership]
            ) -> tuple[datetime | None, datetime | None]:
    """When the old leader began leading at the change's epoch (None: not seen), and when
    it led again at a newer epoch after the change (None: not since)."""
    start = again = None
    for ls in leaders:
        if ls.leader != change.old_leader:
            continue
        if ls.epoch == change.epoch and ls.at <= change.changed_at:
            start = ls.at if start is None else max(start, ls.at)
        elif ls.epoch > change.epoch and ls.at > change.changed_at:
            again = ls.at if again is None else min(again, ls.at)
    return start, again


def suspect(acks: list[AckRun], changes: list[EpochEnd], leaders: list[Leadership]
            ) -> list[Suspicion]:
    """The suspected pieces of one partition's acknowledged runs (``acks``), by each
    ``epoch_end`` change (in order of ``changed_at``) and the partition's leaderships."""
    out: list[Suspicion] = []
    taken: dict[tuple[str, str], list[tuple[int, int]]] = {}  # seqs suspected, per run
    for change in sorted(changes, key=lambda c: (c.changed_at, c.epoch)):
        start, again = _window(change, leaders)
        for a in acks:
            if not a.placed or a.end <= change.end_offset:
                continue
            if start is not None and a.last_ack < start:
                continue  # acknowledged before the old leader led at that epoch
            if a.broker is not None:
                if a.broker != change.old_leader or (again is not None
                                                     and a.first_ack >= again):
                    continue
                basis = BY_BROKER
            else:
                if a.first_ack > change.changed_at:
                    continue
                basis = BY_TIME
            cut = max(0, change.end_offset - a.offset)  # type: ignore[operator]
            spans = taken.setdefault((a.producer_id, a.run_id), [])
            for lo, hi in _uncovered(a.seq + cut, a.seq + a.count, spans):
                out.append(Suspicion(a.piece(lo - a.seq, hi - a.seq), change, basis))
                spans.append((lo, hi))
    return out


def _uncovered(lo: int, hi: int, spans: list[tuple[int, int]]) -> list[tuple[int, int]]:
    """The parts of seqs ``lo .. hi-1`` outside every span of ``spans``."""
    parts = [(lo, hi)]
    for s_lo, s_hi in spans:
        parts = [p for a, b in parts
                 for p in ((a, min(b, s_lo)), (max(a, s_hi), b)) if p[0] < p[1]]
    return parts
