"""When writes were at risk: windows over a partition's timeline. Pure: plain rows in,
windows out; the windows job and the tests call these same functions.

A window is an interval of one partition (``end`` None while it lasts) with the
events that opened and closed it, and the acknowledged writes and losses inside it:

* **exposure** (:func:`exposure_windows`): the ISR below ``min.insync.replicas``, or
  the ISR the leader alone (or empty, the partition offline), on a replicated
  partition: an acknowledged write there sits on one replica (``acks=1``, or
  ``acks=all`` with ``min.insync.replicas=1``), and losing that replica loses it;
* **reduced_redundancy** (:func:`reduced_redundancy_windows`): a replica out of the
  ISR; nothing at risk yet unless exposure follows;
* **leader_change** (:func:`leader_change_windows`): the partition's leader changed
  (a fail-over, a hand-over, the same leader elected anew) or it had none, until a leader
  is named again (an instant for a clean hand-over): what the old leader acknowledged
  and the new one never had (``acks=0``/``1`` writes not yet replicated) is cut there.
  The window of an ``acks=1`` write truncated at a clean preferred-replica election,
  which opens no other;
* **rejection** (:func:`rejection_windows`): producers were refused
  (``NOT_ENOUGH_REPLICAS`` and kin): availability lost, data kept;
* **split_brain**: two brokers both acted as leader. Observed (:func:`two_leader_windows`):
  the watcher asked every broker for its own view, and two each named themselves
  leader (``split_brain_enter`` to ``split_brain_exit``). Inferred
  (:func:`split_brain_windows`): a write lost at an offset was acknowledged *after* the
  write that sits there now (the old leader kept acknowledging while the new one did),
  from the first such ack to the last. From the ledger (:func:`deposed_windows`): lost
  writes a deposed leader acknowledged (the ledger names the broker:
  ``rules.deposed_at``; a leader paused past its session timeout, resumed), from the
  change that deposed it to its last such ack, where no other split-brain window holds
  them.

ISR observations made at one instant are unordered: at an instant the state is
the worst any of them shows (as the verdict rules read them).
"""

from __future__ import annotations

from collections.abc import Iterable, Sequence
from datetime import datetime, timedelta

from kafka_audit.jobs.core.model import AckRun, ClusterEvent, Finding
from kafka_audit.jobs.core.rules import DEPOSED_SLACK, _Intervals, split_brain_pairs
from kafka_audit.schemas.events import (
    EXPOSURE,
    LEADER_CHANGE_WINDOW,
    LEADER_CHANGES,
    REDUCED_REDUNDANCY,
    REJECTION,
    SPLIT_BRAIN_WINDOW,
)
from kafka_audit.schemas.verdicts import Cause
from kafka_audit.schemas.windows import Window

__all__ = ["deposed_windows", "exposure_windows", "reduced_redundancy_windows",
           "rejection_windows", "leader_change_windows", "split_brain_windows",
           "two_leader_windows", "partition_windows", "REJECTION_GAP"]

#: refusals closer together than this belong to one rejection window
REJECTION_GAP = timedelta(seconds=5)
#: errors with which the cluster refused a write for want of in-sync replicas
_REFUSED = frozenset({"NOT_ENOUGH_REPLICAS", "NOT_ENOUGH_REPLICAS_AFTER_APPEND"})


def _describe(e: ClusterEvent) -> str:
    isr = ",".join(map(str, e.isr)) if e.isr is not None else "?"
    return f"{e.kind} at {e.event_time.isoformat()} (leader {e.leader}, isr [{isr}])"


def _instants(events: Iterable[ClusterEvent]) -> list[tuple[datetime, list[ClusterEvent]]]:
    by_time: dict[datetime, list[ClusterEvent]] = {}
    for e in events:
        if e.isr is not None:
            by_time.setdefault(e.event_time, []).append(e)
    return sorted(by_time.items(), key=lambda x: x[0])


def _intervals(events: Sequence[ClusterEvent], bad, kind: str, topic: str, partition: int,
               ) -> list[Window]:
    """Windows where ``bad(event)`` holds for the latest ISR observation (worst at ties)."""
    out: list[Window] = []
    opened: tuple[datetime, str] | None = None
    for t, group in _instants(events):
        worst = [e for e in group if bad(e)]
        if worst and opened is None:
            opened = (t, _describe(worst[0]))
        elif not worst and opened is not None:
            out.append(Window(kind, topic, partition, opened[0], t, opened[1],
                              _describe(group[0])))
            opened = None
    if opened is not None:
        out.append(Window(kind, topic, partition, opened[0], None, opened[1]))
    return out


def _replicated(e: ClusterEvent) -> bool:
    return e.replicas is None or len(e.replicas) > 1


def exposure_windows(events: Sequence[ClusterEvent], min_isr: int | None, topic: str,
                     partition: int) -> list[Window]:
    """ISR below ``min.insync.replicas`` (unknown: 1), or below two: the leader alone."""
    floor = max(min_isr or 1, 2)
    return _intervals(events, lambda e: _replicated(e) and len(e.isr or ()) < floor,
                      EXPOSURE, topic, partition)


def reduced_redundancy_windows(events: Sequence[ClusterEvent], topic: str,
                               partition: int) -> list[Window]:
    """A replica out of the ISR (the replicas known)."""
    return _intervals(events, lambda e: e.replicas is not None
                      and len(e.isr or ()) < len(e.replicas), REDUCED_REDUNDANCY, topic,
                      partition)


def leader_change_windows(events: Sequence[ClusterEvent], topic: str, partition: int
                          ) -> list[Window]:
    """From an instant at which the leader changed (a view names a leader the instant
    before did not name, or none, or the event is itself a change: the same leader at a
    newer epoch) to the first instant at which every view names a leader; the same
    instant when it names one at once."""
    out: list[Window] = []
    opened: tuple[datetime, str] | None = None
    before: set[int] | None = None
    for t, group in _instants(events):
        named = [(e, -1 if e.leader is None else e.leader) for e in group]
        leaders = {b for _, b in named}
        changed = [e for e, b in named if e.kind in LEADER_CHANGES or b < 0
                   or (before is not None and b not in before)]
        if changed and opened is None and before is not None:
            opened = (t, _describe(changed[0]))
        if opened is not None and all(b >= 0 for b in leaders):
            out.append(Window(LEADER_CHANGE_WINDOW, topic, partition, opened[0], t, opened[1],
                              _describe(group[0])))
            opened = None
        before = leaders
    if opened is not None:
        out.append(Window(LEADER_CHANGE_WINDOW, topic, partition, opened[0], None, opened[1]))
    return out


def rejection_windows(acks: Sequence[AckRun], topic: str, partition: int) -> list[Window]:
    """Refused writes (``NOT_ENOUGH_REPLICAS`` and kin), refusals closer than
    :data:`REJECTION_GAP` in one window."""
    refused = sorted((a for a in acks if a.error in _REFUSED), key=lambda a: a.first_ack)
    out: list[Window] = []
    for a in refused:
        if out and a.first_ack - out[-1].end <= REJECTION_GAP:  # type: ignore[operator]
            w = out[-1]
            out[-1] = Window(w.kind, topic, partition, w.start, max(w.end, a.last_ack),
                             w.opened_by, f"{a.error} at {a.last_ack.isoformat()}",
                             detail={"refused": w.detail["refused"] + a.count})
        else:
            out.append(Window(REJECTION, topic, partition, a.first_ack, a.last_ack,
                              f"{a.error} at {a.first_ack.isoformat()}",
                              f"{a.error} at {a.last_ack.isoformat()}",
                              detail={"refused": a.count}))
    return out


def split_brain_windows(losses: Sequence[Finding], confirmed: Sequence[Finding],
                        topic: str, partition: int) -> list[Window]:
    """Two leaders acknowledging at once: a write lost at offset ``x`` was acknowledged
    *after* the write that sits at ``x`` now was (the old leader, cut off, kept accepting
    writes while the new one did). From the first such surviving ack to the last lost one.

    A plain fail-over acknowledges every lost write before the new leader's writes at
    those offsets, so it opens no window; nor does a hand-over's truncated tail."""
    at = _Intervals([c for c in confirmed if c.offset is not None and c.ack_time is not None],
                    lambda c: c.offset, lambda c: c.count)  # a scan of every pair grew square
    pairs = [(c, f) for f in losses if f.offset is not None and f.ack_time is not None
             for c in at.overlapping(f.offset, f.offset + f.count)
             if f.ack_time > c.ack_time]
    if not pairs:
        return []
    first = min(c.ack_time for c, _ in pairs)  # type: ignore[type-var]
    last = max(f.ack_time for _, f in pairs)  # type: ignore[type-var]
    c, f = min(pairs, key=lambda p: p[0].ack_time)  # type: ignore[arg-type,return-value]
    return [Window(SPLIT_BRAIN_WINDOW, topic, partition, first, last,  # type: ignore[arg-type]
                   f"offset {c.offset}: the write there now was acknowledged at "
                   f"{c.ack_time.isoformat()}, another one there at {f.ack_time.isoformat()}",
                   f"the last lost write acknowledged at {last.isoformat()}",  # type: ignore
                   detail={"writes_lost_in_it": sum(f.count for _, f in
                                                    {id(f): (c, f) for c, f in pairs}.values())})]


def deposed_windows(losses: Sequence[Finding], events: Sequence[ClusterEvent],
                    held: Sequence[Window], topic: str, partition: int) -> list[Window]:
    """Lost writes a deposed leader acknowledged (their cause, ``isolated leader (split
    brain)``, came from the ledger's broker: ``rules.deposed_at``) that no split-brain
    window in ``held`` holds: one window from the leader change before the first (the one
    that deposed it) to the last such ack."""
    mine = sorted((f for f in losses if f.ack_time is not None and f.cause is not None
                   and f.cause.startswith(str(Cause.isolated_leader))
                   and not any(w.kind == SPLIT_BRAIN_WINDOW and w.holds(f.ack_time)
                               for w in held)), key=lambda f: f.ack_time)  # type: ignore
    if not mine:
        return []
    first, last = mine[0].ack_time, max(f.ack_time for f in mine)  # type: ignore[type-var]
    changes = [e for e in events if e.kind in LEADER_CHANGES and e.leader is not None
               and e.leader >= 0 and e.event_time <= first - DEPOSED_SLACK]  # type: ignore
    change = max(changes, key=lambda e: e.event_time) if changes else None
    start = change.event_time if change is not None else first
    opened = (f"broker {change.leader} named leader at {change.event_time.isoformat()}, "
              f"broker {change.previous_leader} still acknowledging at "
              f"{first.isoformat()}" if change is not None  # type: ignore[union-attr]
              else f"a deposed leader acknowledging at {first.isoformat()}")  # type: ignore
    return [Window(SPLIT_BRAIN_WINDOW, topic, partition, start, last,  # type: ignore[arg-type]
                   opened, f"its last acknowledged write at {last.isoformat()}",  # type: ignore
                   detail={"writes_lost_in_it": sum(f.count for f in mine),
                           "from": "ledger"})]


def two_leader_windows(events: Sequence[ClusterEvent], topic: str, partition: int,
                       ) -> list[Window]:
    """Where two brokers each named themselves leader, as the watcher's per-broker views
    saw it (an open one lasts)."""
    return [Window(SPLIT_BRAIN_WINDOW, topic, partition, a.event_time,
                   b.event_time if b is not None else None, _two(a),
                   f"{b.kind} at {b.event_time.isoformat()}" if b is not None else None)
            for a, b in split_brain_pairs(events)]


def _two(e: ClusterEvent) -> str:
    return (f"brokers {e.previous_leader} and {e.leader} each named themselves leader at "
            f"{e.event_time.isoformat()}")


def partition_windows(topic: str, partition: int, events: Sequence[ClusterEvent],
                      min_isr: int | None, acks: Sequence[AckRun],
                      losses: Sequence[Finding], confirmed: Sequence[Finding] = ()
                      ) -> list[Window]:
    """Every window of one partition, with the acknowledged writes (``acks``' successes and
    the ``confirmed`` findings) and the losses inside each."""
    ws = [*exposure_windows(events, min_isr, topic, partition),
          *reduced_redundancy_windows(events, topic, partition),
          *leader_change_windows(events, topic, partition),
          *rejection_windows(acks, topic, partition),
          *split_brain_windows(losses, confirmed, topic, partition),
          *two_leader_windows(events, topic, partition)]
    ws += deposed_windows(losses, events, ws, topic, partition)
    placed = [(a.first_ack, a.count) for a in acks if a.placed] + [
        (c.ack_time, c.count) for c in confirmed if c.ack_time is not None]
    counted = []
    for w in ws:
        n_acks = sum(n for t, n in placed if w.holds(t))
        n_lost = sum(f.count for f in losses if f.ack_time is not None and w.holds(f.ack_time))
        counted.append(Window(w.kind, w.topic, w.partition, w.start, w.end, w.opened_by,
                              w.closed_by, n_acks, n_lost, w.detail))
    return sorted(counted, key=lambda w: (w.start, w.kind))
