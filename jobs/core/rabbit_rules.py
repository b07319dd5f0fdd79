"""The rules for a RabbitMQ queue or stream: plain rows in, verdicts out (pure).

A RabbitMQ key (``schemas/systems.py``) has no offsets to judge by: a publisher confirm
names no position. What the reader of a queue or stream records instead
(``ReadRun`` rows of the key, ``offset`` the reader's position):

* ``record``: stamped messages (seqs ``seq ..`` of one producer run) read in that order,
  each for the first time as far as the broker knows;
* ``redelivered``: the same, delivered again (the broker's ``redelivered`` flag: a
  consumer before did not acknowledge it): presence, never a copy;
* ``barrier``: a *barrier* read back, ``seq`` the time its publish began (µs since the
  epoch; null: withheld, it settles nothing). The reader publishes one into each queue
  and stream it reads every few seconds.

**The barrier rule.** A queue delivers in the order it enqueued, and a stream is read in
its own order: a message the broker confirmed before a barrier's publish began is ahead
of it. Once a barrier whose publish began more than ``margin_seconds`` after a write's
last confirm (the publisher's and the reader's clocks may differ by that much) has been
read, and ``settle_seconds`` have passed since that read (a redelivery of what a reader
before took but did not acknowledge, a straggling replica), every message of that
write the queue still holds has been read. Then the write is judged, seq by seq:

* confirmed and read: ``confirmed``; confirmed and never read: ``lost`` (``vanished``),
  its likely cause from the watcher's events (:func:`rabbit_cause`);
* not confirmed (``NACK``, ``RETURNED``, ``UNCONFIRMED``): read, ``indeterminate``
  (``present``); not read, ``rejected`` for ``NACK`` and ``RETURNED`` (the broker
  refused it: never a loss), ``indeterminate`` (``absent``) for ``UNCONFIRMED``
  (``rules.judge_failed``, the Kafka definition);
* a seq read as ``record`` twice: ``duplicate`` (a redelivery is not one);
* a seq read after a higher seq of its producer run (by reader position, first reads
  only): ``reordered``.

Until then a write is pending; past ``unseen_after_seconds`` without a settling barrier
it counts as unseen (the reader is behind, or down).

**Reads no longer kept.** Between passes a key keeps its reads ``read_retention_seconds``,
and longer only those of writes it knows of. A write whose ack row arrives later than that
(a publisher's ledger spooled through an outage) would find its reads gone, and a queue
cannot be read again: its missing seqs are first looked up in ``consumed`` (a
:class:`Reread` naming its run; the answer, what the reader read of them and a ``lookup``
read saying the lookup was made, comes to the same pass, judged again at once). Only
what that lookup cannot find either is lost.
"""

from __future__ import annotations

from collections.abc import Sequence
from dataclasses import dataclass
from datetime import UTC, datetime, timedelta

from kafka_audit.jobs.core.model import AckRun, ClusterEvent, Finding, ReadRun, Reread
from kafka_audit.jobs.core.rules import Judgement, judge_failed
from kafka_audit.schemas.events import (
    FIRST_SEEN,
    LEADER_CHANGE,
    RABBIT_NODE_DOWN,
    RABBIT_NODE_UP,
    RABBIT_PARTITION,
    RABBIT_PARTITION_END,
    RABBIT_QUEUE_GONE,
    UNCLEAN_ELECTION,
)
from kafka_audit.schemas.systems import TRANSIENT
from kafka_audit.schemas.verdicts import CAUSE_SLACK, Cause, Kind, Subkind

__all__ = ["RabbitConfig", "RECORD", "REDELIVERED", "BARRIER", "LOOKUP", "RABBIT_LOOKUP",
           "SETTING_OF_CAUSE", "judge_rabbit",
           "rabbit_cause", "barrier_time", "settling_barrier", "retained_rabbit_reads"]

RECORD, REDELIVERED, BARRIER, LOOKUP = "record", "redelivered", "barrier", "lookup"
#: the RabbitMQ setting that lets each cause lose a confirmed message, and what keeps it:
#: a lost finding's ``evidence.setting``
SETTING_OF_CAUSE = {
    str(Cause.transient_restart): "delivery_mode 1 (transient): held in memory only; "
    "publish persistent (delivery_mode 2) into a durable queue",
    str(Cause.partition_loser): "cluster_partition_handling = autoheal (or ignore): both "
    "sides of a partition confirm, the losing side's are dropped; pause_minority, or a "
    "quorum queue, keeps them",
    str(Cause.unsynced_promotion): "ha-promote-on-failure = always (with ha-sync-mode = "
    "manual): a mirror that lacks messages may be promoted; when-synced, ha-sync-mode = "
    "automatic, or a quorum queue, keeps them",
    str(Cause.queue_lost): "a classic queue whose only copy was on the node lost (not "
    "mirrored, or ha-promote-on-failure = when-synced with no synchronised mirror): a "
    "quorum queue keeps them while a majority lives",
}
#: a :class:`Reread`'s reason: a RabbitMQ write's reads looked up in ``consumed``
RABBIT_LOOKUP = "rabbit_lookup"
#: a message may be read this long before its confirm reached the publisher (and the
#: clocks differ): its reads may be gone once its confirm is older than the read
#: retention less this
LOOKUP_SLACK = timedelta(seconds=60)


@dataclass(frozen=True)
class RabbitConfig:
    settle_seconds: float = 30.0
    margin_seconds: float = 1.0
    unseen_after_seconds: float = 120.0
    read_retention_seconds: float = 600.0


def barrier_time(r: ReadRun) -> datetime:
    """When a barrier's publish began (its ``seq``: µs since the epoch); a time no
    ``datetime`` holds (no reader's: it writes none) as the earliest, which settles
    nothing."""
    try:
        return datetime.fromtimestamp(r.seq / 1e6, UTC)  # type: ignore[operator]
    except (OverflowError, OSError, ValueError):
        return datetime.min.replace(tzinfo=UTC)


def settling_barrier(a: AckRun, barriers: Sequence[ReadRun], now: datetime,
                     cfg: RabbitConfig) -> ReadRun | None:
    """The first barrier read that settles ``a`` (published after its last confirm and the
    margin, read ``settle_seconds`` before ``now``), None if none yet."""
    after = a.last_ack + timedelta(seconds=cfg.margin_seconds)
    settled = now - timedelta(seconds=cfg.settle_seconds)
    return min((b for b in barriers if barrier_time(b) > after and b.read_time <= settled),
               key=lambda b: b.read_time, default=None)


def _by_run(reads: Sequence[ReadRun]) -> dict[tuple, list[ReadRun]]:
    """The stamped reads of each producer run, ``(producer_id, run_id)``, in reader
    position order (grouped once per pass, not scanned again for every write); a read
    a lookup found again beside the one kept counted once."""
    out: dict[tuple, list[ReadRun]] = {}
    seen: set[tuple] = set()
    for r in sorted(reads, key=lambda r: r.offset):
        if (r.producer_id is not None and r.seq is not None
                and r.status not in (BARRIER, LOOKUP)
                and (at := (r.offset, r.count, r.status, r.seq)) not in seen):
            seen.add(at)
            out.setdefault((r.producer_id, r.run_id), []).append(r)
    return out


def _looked_up(reads: Sequence[ReadRun]) -> dict[tuple, list[tuple[int, int]]]:
    """The seq ranges of each producer run a lookup in ``consumed`` answered for."""
    out: dict[tuple, list[tuple[int, int]]] = {}
    for r in reads:
        if r.status == LOOKUP and r.seq is not None:
            out.setdefault((r.producer_id, r.run_id), []).append((r.seq, r.seq + r.count))
    return out


def _seqs(mine: Sequence[ReadRun], a: AckRun) -> dict[int, list[tuple[int, str]]]:
    """Per seq of ``a``, where it was read (reader position, status), in position order;
    ``mine``: the reads of ``a``'s producer run."""
    at: dict[int, list[tuple[int, str]]] = {}
    lo, hi = a.seq, a.seq + a.count
    for r in mine:
        for i in range(max(lo, r.seq), min(hi, r.seq + r.count)):
            at.setdefault(i, []).append((r.offset + i - r.seq, r.status))
    for v in at.values():
        v.sort()
    return at


def _reordered(mine: Sequence[ReadRun], a: AckRun) -> set[int]:
    """The seqs of ``a`` whose first read came after a read of a higher seq of its
    producer run (reads as ``record`` only, in reader position order; ``mine``: the
    run's reads in that order)."""
    out: set[int] = set()
    seen: set[int] = set()
    highest = -1  # one past the highest seq read so far
    for r in (r for r in mine if r.status == RECORD):
        for s in range(max(r.seq, a.seq), min(r.seq + r.count, highest, a.seq + a.count)):
            if s not in seen:
                out.add(s)
        seen.update(range(max(r.seq, a.seq), min(r.seq + r.count, a.seq + a.count)))
        highest = max(highest, r.seq + r.count)
    return out


def judge_rabbit(acks: Sequence[AckRun], reads: Sequence[ReadRun], now: datetime,
                 cfg: RabbitConfig, events: Sequence[ClusterEvent] = ()) -> Judgement:
    """Judge the settled writes of one RabbitMQ key (module docstring); the rest stay
    pending in ``Judgement.acks``."""
    out = Judgement()
    barriers = [r for r in reads if r.status == BARRIER and r.seq is not None]
    runs = _by_run(reads)
    looked = _looked_up(reads)
    unseen_before = now - timedelta(seconds=cfg.unseen_after_seconds)
    forgotten = now - timedelta(seconds=cfg.read_retention_seconds) + LOOKUP_SLACK
    for a in acks:
        barrier = settling_barrier(a, barriers, now, cfg)
        if barrier is None:
            out.acks.append(a)
            out.pending += a.count
            if a.last_ack < unseen_before:
                out.unseen += a.count
                out.oldest_unseen = min(filter(None, (out.oldest_unseen, a.first_ack)))
            continue
        mine = runs.get((a.producer_id, a.run_id), [])
        at = _seqs(mine, a)
        if a.first_ack < forgotten and any(
                s not in at and not any(lo <= s < hi for lo, hi in
                                        looked.get((a.producer_id, a.run_id), ()))
                for s in range(a.seq, a.seq + a.count)):
            # reads of it may have been let go before its ack came: look them up first
            out.acks.append(a)
            out.pending += a.count
            out.rereads.append(Reread(a.topic, a.partition, a.seq, a.seq + a.count,
                                      RABBIT_LOOKUP, a.producer_id, a.run_id))
            continue
        reordered = _reordered(mine, a)
        if a.error is None:
            out.judged.append(a)
        for lo, hi, kind, subkind, evidence in _pieces(a, at, barrier):
            cause = rabbit_cause(a, events) if kind == Kind.lost else None
            if cause in SETTING_OF_CAUSE:
                evidence["setting"] = SETTING_OF_CAUSE[cause]
            out.findings.append(_finding(a, kind, lo, hi, subkind, cause, evidence))
        for lo, hi in _spans(s for s in range(a.seq, a.seq + a.count)
                             if sum(st == RECORD for _, st in at.get(s, ())) > 1):
            out.findings.append(_finding(a, Kind.duplicate, lo, hi, None, None, {
                "read_at": [p for p, st in at[lo] if st == RECORD]}))
        for lo, hi in _spans(sorted(reordered)):
            out.findings.append(_finding(a, Kind.reordered, lo, hi, None, None, {
                "read_at": at[lo][0][0]}))
    return out


def rabbit_cause(a: AckRun, events: Sequence[ClusterEvent]) -> str:
    """The likely cause of a RabbitMQ write's loss, from the watcher's events of its queue
    (``jobs/watcher/rabbit_watcher.py``) from :data:`CAUSE_SLACK` before its confirm on,
    the first that holds:

    1. published ``transient`` and the node that led the queue at its confirm restarted
       (or went down) since: **non-persistent message across a restart**;
    2. a mirror that did not hold every message was promoted (``unclean_election``) as
       a partition healed (within :data:`CAUSE_SLACK` of a ``rabbit_partition_end``):
       autoheal kept the other side's copy, **partition loser restarted**;
    3. such a promotion at another time: **unsynchronised mirror promoted** (a node paused
       by ``pause_minority`` comes back as a restarted one, too: the promotion is what
       lost the write then);
    4. that node, or the node the write was published through, was cut off from others
       (a cut under way at the confirm, or begun after it) and restarted after the cut
       began (what autoheal does to the losing side): **partition loser restarted**;
    5. the queue ceased to exist: **queue lost with its node**;
    6. else ``unknown``."""
    since = a.first_ack - CAUSE_SLACK
    ordered = sorted(events, key=lambda e: e.event_time)
    leaders = [e.leader for e in ordered if e.kind in (FIRST_SEEN, LEADER_CHANGE)
               and e.event_time <= a.last_ack]
    led = leaders[-1] if leaders else None
    after = [e for e in ordered if e.event_time >= since]

    def of_leader(e: ClusterEvent) -> bool:
        return led is None or e.leader == led

    restarts = [e for e in after if e.kind in (RABBIT_NODE_UP, RABBIT_NODE_DOWN)]
    if a.acks == TRANSIENT and any(of_leader(e) for e in restarts):
        return str(Cause.transient_restart)
    # a cut-off side confirms on its own: the node published through, or the leader as
    # the watcher last saw it (a view from the other side, maybe)
    sides = {n for n in (led, a.broker) if n is not None}

    def on_side(e: ClusterEvent) -> bool:
        return not sides or e.leader in sides

    promoted = [e.event_time for e in after if e.kind == UNCLEAN_ELECTION]
    heals = [e.event_time for e in ordered if e.kind == RABBIT_PARTITION_END]
    if any(abs(p - h) <= CAUSE_SLACK for p in promoted for h in heals):
        # the copy of the side autoheal kept, promoted as the cut healed: the other
        # side's confirms are gone (whichever side the write went through)
        return str(Cause.partition_loser)
    if promoted:  # before the restart rule: a paused node also comes back as restarted
        return str(Cause.unsynced_promotion)
    for c in ordered:  # a cut under way at the confirm, or begun after it
        if c.kind != RABBIT_PARTITION or not on_side(c):
            continue
        end = next((e.event_time for e in ordered if e.kind == RABBIT_PARTITION_END
                    and e.leader == c.leader and e.event_time >= c.event_time), None)
        if end is not None and end < since:
            continue  # healed before the write
        if any(e.kind == RABBIT_NODE_UP and e.leader == c.leader
               and e.event_time >= c.event_time for e in restarts):
            return str(Cause.partition_loser)
    if any(e.kind == RABBIT_QUEUE_GONE for e in after):
        return str(Cause.queue_lost)
    return str(Cause.unknown)


def _pieces(a: AckRun, at: dict[int, list[tuple[int, str]]], barrier: ReadRun):
    """``a``'s seqs in spans of one verdict: (first seq, one past the last, kind, sub-kind,
    evidence)."""
    settled_by = {"barrier_published": barrier_time(barrier).isoformat(),
                  "barrier_read": barrier.read_time.isoformat(), "barrier_at": barrier.offset}

    def verdict(s: int):
        found = [p for p, _ in at.get(s, ())]
        if a.error is not None:
            v = judge_failed(a.error, found)
            return v.kind, v.subkind, bool(found)
        return (Kind.confirmed, None, True) if found else (Kind.lost, Subkind.vanished, False)

    start, current = a.seq, verdict(a.seq)
    for s in range(a.seq + 1, a.seq + a.count + 1):
        v = verdict(s) if s < a.seq + a.count else None
        if v != current:
            kind, subkind, found = current
            evidence = {"acks": a.acks, **({"error": a.error} if a.error else {})}
            if found:
                evidence["read_at"] = at[start][0][0]
            else:
                evidence.update(settled_by)
            yield start, s, kind, subkind, evidence
            start, current = s, v


def _spans(seqs) -> list[tuple[int, int]]:
    """Ascending seqs as spans of consecutive ones: (first, one past the last)."""
    out: list[list[int]] = []
    for s in seqs:
        if out and out[-1][1] == s:
            out[-1][1] = s + 1
        else:
            out.append([s, s + 1])
    return [(lo, hi) for lo, hi in out]


def _finding(a: AckRun, kind: str, lo: int, hi: int, subkind: str | None, cause: str | None,
             evidence: dict) -> Finding:
    return Finding(kind=str(kind), topic=a.topic, partition=a.partition,
                   producer_id=a.producer_id, run_id=a.run_id, seq=lo, offset=None,
                   count=hi - lo, subkind=None if subkind is None else str(subkind),
                   ack_time=a.first_ack, cause=cause, evidence=evidence)


def retained_rabbit_reads(reads: Sequence[ReadRun], pending: Sequence[AckRun], now: datetime,
                          cfg: RabbitConfig) -> list[ReadRun]:
    """The reads a RabbitMQ key keeps between passes: those of the last
    ``read_retention_seconds`` (a write whose ack is still on its way, duplicates and
    reorders to come), those of a pending write's seqs, and every barrier a pending write
    may still be settled by (read after the oldest pending write's confirm)."""
    cutoff = now - timedelta(seconds=cfg.read_retention_seconds)
    oldest = min((a.last_ack for a in pending), default=None)
    runs: dict[tuple, list[tuple[int, int]]] = {}
    for a in pending:
        runs.setdefault((a.producer_id, a.run_id), []).append((a.seq, a.seq + a.count))

    def needed(r: ReadRun) -> bool:
        if r.read_time >= cutoff:
            return True
        if r.status == BARRIER:
            return oldest is not None and barrier_time(r) > oldest
        return any(lo < r.seq + r.count and r.seq < hi  # type: ignore[operator]
                   for lo, hi in runs.get((r.producer_id, r.run_id), ()))
    return [r for r in reads if needed(r)]
