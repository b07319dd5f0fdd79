"""The verdict rules: plain rows in, findings out. Pure; the Spark audit job,
the demo, the tests and anything else that judges call these same functions.

Definitions (``../shared/DESIGN.md``, "Verdicts"). Let a write ``w`` be acked at
``(topic, partition, offset o)`` with stamp ``(producer, run, seq)``:

* **confirmed**: some read carries ``w``'s stamp at offset ``o``.
* **lost**: not confirmed, and ``o`` lies below the partition's *settled
  frontier* (the consumed frontier as it stood at least ``settle`` seconds
  ago). Sub-kinds: **overwritten** (``o`` was read and holds another record)
  and **vanished** (``o`` was never read although the frontier is past it).
* **pending**: not confirmed and ``o`` is not below the settled frontier: the
  auditor may simply not have read it yet, so no verdict is given.
"""

from __future__ import annotations

from collections import defaultdict
from collections.abc import Iterable
from datetime import datetime, timedelta

from kafka_audit.jobs.model import Ack, ClusterEvent, Finding, Read, StampKey

__all__ = ["settled_frontier", "judge_partition", "lost_write_cases", "likely_cause"]


def settled_frontier(observations: Iterable[tuple[int, datetime]], now: datetime,
                     settle_seconds: float) -> int:
    """The highest frontier observed at least ``settle_seconds`` before ``now`` (0 if none).

    Why this is safe: the ``consumed`` table is append-only, so a frontier once
    observed never moves back. An offset below a frontier observed ``settle``
    seconds ago has had that long to show up in the reads; only then can its
    absence be a verdict rather than a consumer that has not caught up.
    """
    cutoff = now - timedelta(seconds=settle_seconds)
    best = 0
    for frontier, observed_at in observations:
        if observed_at <= cutoff and frontier > best:
            best = frontier
    return best


def likely_cause(ack: Ack, events: list[ClusterEvent]) -> str:
    """Attribute a loss from the evidence only: the write's durability and the events after it."""
    later = [e for e in events if e.topic == ack.topic and e.partition == ack.partition
             and e.kind == "leader_change"
             and (ack.ack_time is None or e.event_time >= ack.ack_time - timedelta(seconds=5))]
    if not later:
        return "unknown"
    if ack.acks in ("1", "0"):
        return "acks=1 fail-over"
    return "unknown"


def judge_partition(acks: Iterable[Ack], reads: Iterable[Read], settled: int,
                    events: list[ClusterEvent] | None = None) -> list[Finding]:
    """Every successful ack of one partition, judged against every read of it.

    Returns one ``lost`` finding per lost write (with its evidence) plus one
    ``confirmed`` and one ``pending`` summary row carrying counts.
    """
    events = events or []
    seen: dict[int, set[StampKey | None]] = defaultdict(set)
    topic = partition = None
    for r in reads:
        seen[r.offset].add(r.stamp)
        topic, partition = r.topic, r.partition
    confirmed = pending = 0
    out: list[Finding] = []
    for a in acks:
        topic, partition = a.topic, a.partition
        at_offset = seen.get(a.offset)
        if at_offset is not None and a.stamp in at_offset:
            confirmed += 1
        elif a.offset >= settled:
            pending += 1
        else:
            others = sorted((s for s in at_offset or () if s != a.stamp), key=repr)
            out.append(Finding(
                kind="lost", subkind="overwritten" if others else "vanished",
                topic=a.topic, partition=a.partition, offset=a.offset,
                producer_id=a.producer_id, run_id=a.run_id, seq=a.seq, ack_time=a.ack_time,
                cause=likely_cause(a, events),
                evidence={"acked_offset": a.offset, "settled_frontier": settled,
                          "read_at_offset": [list(s) if s else None for s in others],
                          "acks": a.acks},
            ))
    if topic is not None:
        out.append(Finding(kind="confirmed", topic=topic, partition=partition, count=confirmed))
        out.append(Finding(kind="pending", topic=topic, partition=partition, count=pending,
                           evidence={"settled_frontier": settled}))
    return out


def lost_write_cases(acks: Iterable[Ack], reads: Iterable[Read],
                     settled: dict[tuple[str, int], int]) -> list[Finding]:
    """All partitions at once: the ``lost`` findings only (for tests and small histories)."""
    acks_by: dict[tuple[str, int], list[Ack]] = defaultdict(list)
    reads_by: dict[tuple[str, int], list[Read]] = defaultdict(list)
    for a in acks:
        acks_by[(a.topic, a.partition)].append(a)
    for r in reads:
        reads_by[(r.topic, r.partition)].append(r)
    out: list[Finding] = []
    for key in sorted(acks_by):
        out.extend(f for f in judge_partition(acks_by[key], reads_by.get(key, []),
                                              settled.get(key, 0)) if f.kind == "lost")
    return out


