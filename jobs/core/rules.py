"""The verdict rules: plain rows in, findings out. Pure; the Spark audit job,
the in-memory auditor, the demo and the tests all call these same functions.

Definitions (``../shared/DESIGN.md``, "Verdicts"). A successful ack says write
``w`` (stamp ``(producer, run, seq)``) sits at offset ``x`` of a partition. The
*views* of ``x`` are every read that covered ``x``, in read-time order: a
record (with its stamp, or foreign), ``absent`` (a re-read found no record)
or ``expired`` (below the log start). Then, once ``x`` is *settled* (below the
consumed frontier as it stood at least the settle period ago, or past the end of a log
the consume job read whole: :func:`beyond_end`):

* **confirmed**: the last record seen at ``x`` is ``w``;
* **lost_after_seen**: ``w`` was seen at ``x``, but the last read there shows
  another record, a log that now ends below ``x``, or (on a topic that is not
  compacted) no record at ``x`` below the log end, as when a transaction
  marker of the new leader's log sits there (committed data destroyed, e.g. by
  an unclean election); a record removed later by retention or compaction was
  not lost;
* **lost / overwritten**: ``w`` was never seen at ``x``; another record was;
* **lost / vanished**: nothing was ever seen at ``x`` and a re-read found no
  record there (or found the log now ends below ``x``);
* **unverified / retention**: nothing was ever seen at ``x`` and it is now
  below the log start (retention deleted it first: not a loss);
* **unverified / compacted**: as vanished, on a compacted topic (not a loss).

Two gates hold a write back (``pending``) and ask for a direct re-read of its
offsets instead of judging it: a *loss* needs a re-read view of ``x`` (so a
consumer miss is never reported as broker loss), and a write acked within
``lookback`` of a leader change needs a view of ``x`` read after that change
(so truncation after a fail-over is caught even when the consume job had
already read ``w`` from the old leader).

Secondary anomalies (annotations beside a write's own verdict), read from what
sits in the log, never from acks alone: an ack says where a write was put, and
after a fail-over the old leader's acks for truncated offsets say where lost
writes *were*, not where anything *is*.

* **duplicate** (:func:`duplicate_cases`): ``w``'s stamp sits at two or more
  offsets: its acked one if confirmed there, and every other offset where it was
  read and the latest read there still shows it (a copy read before a leader
  change is read again first);
* **reordered** (:func:`reorder_witness`): ``w`` is confirmed at ``x`` and a
  write of the same producer run with a lower seq is confirmed at its own acked
  offset, above ``x``. A confirmed write waits while such a lower-seq write
  acked above it is still pending: found there it is a witness, lost there it is
  none. So the confirmed writes of a pass are decided from the highest offset down.

Failed delivery reports (and successful ones that name no offset, as with
``acks=0``) are judged once the settled frontier has passed their *horizon*,
the log end seen by the first pass after the report: **indeterminate /
present** (failed, yet in the log: never counted as loss), **rejected** (the
cluster refused it, e.g.
``NOT_ENOUGH_REPLICAS``) or **indeterminate / absent** (a failed write).

:func:`judge_write` is the per-message definition; :func:`judge_partition`
applies it to runs, one segment of uniformly-viewed messages at a time, so the
cost follows the number of runs, not messages. ``tests/`` checks the second
against the first applied message by message (:mod:`kafka_audit.jobs.core.reference`).
"""

from __future__ import annotations

from bisect import bisect_left, bisect_right
from collections.abc import Iterable, Sequence
from dataclasses import dataclass, field, replace
from datetime import datetime, timedelta

from kafka_audit.jobs.core.model import (
    AckRun,
    Clock,
    ClusterEvent,
    Finding,
    ReadRun,
    Reread,
    StampKey,
)
from kafka_audit.schemas.events import (
    BLIND,
    BROKER_FENCED,
    CLUSTER_WIDE,
    FIRST_SEEN,
    LEADER_CHANGES,
    LOG_END_DROP,
    OFFLINE,
    SPLIT_BRAIN,
    SPLIT_BRAIN_END,
    UNDER_MIN_ISR_ENTER,
    UNDER_MIN_ISR_EXIT,
)
from kafka_audit.schemas.verdicts import (
    CAUSE_SLACK,
    LOSSES,
    REJECTING_ERRORS,
    Cause,
    Kind,
    Subkind,
)

__all__ = ["settled_frontier", "beyond_end", "change_gate", "judge_write", "judge_failed",
           "judge_partition", "likely_cause", "duplicate_cases", "reorder_witness", "Verdict",
           "Judgement",
           "retained_reads", "coalesce_rereads", "split_brain_pairs", "split_brain_spans",
           "acked_in_split_brain", "deposed_at", "merge_spans"]

#: of two reads made at one instant, the direct re-read is the later word: it was asked
#: for because the stream's view was in doubt
_SOURCE_RANK = {"stream": 0, "reread": 1}
#: a write acknowledged this long before two leaders were first seen may already have
#: been acknowledged by the one cut off (the watcher sees it a poll and a lookup later)
SPLIT_BRAIN_SLACK = timedelta(seconds=1)
#: a run its broker acknowledged this long after another broker had been named leader was
#: acknowledged by a deposed leader: two leaders at once (a clean hand-over's old leader
#: stops within milliseconds: its truncated tail is a hand-over's, not a split brain's).
#: As long as two watcher polls may lie apart before it calls itself blind
#: (``watch.blind_after_seconds``' default): a polled change is seen up to that late
DEPOSED_SLACK = timedelta(seconds=3)
#: a failed report (or a success without an offset) is judged with this error name
NO_OFFSET = "NO_OFFSET"
#: why a copy of a write is read again: it was read before a leader change that may have
#: truncated it, so it may sit nowhere now
COPY_CHANGED = "copy read before a leader change"
#: why a write not yet settled is read again: the consume job read another record at its
#: offset, so it looks lost. Its re-read view is then in place when it settles, and the
#: pass that judges it decides at once (no second read, no second judgement)
SUSPECT = "another record read at its offset before it settled"


def partition_events(events: Iterable[ClusterEvent], key: tuple[str, int]
                     ) -> list[ClusterEvent]:
    """One partition's evidence: its own events and the cluster-wide ones
    (:data:`CLUSTER_WIDE`: the watcher's gaps, brokers going down and up)."""
    return [e for e in events if (e.topic, e.partition) == key
            or (e.partition == -1 and e.topic == "" and e.kind in CLUSTER_WIDE)]


def read_observations(stream: Iterable[ReadRun]) -> list[tuple[int, datetime]]:
    """Frontier observations from the stream's reads themselves: when the consume job read
    a run (``read_time``), the partition's frontier stood at least at its end."""
    return [(r.end, r.read_time) for r in stream]


def settled_frontier(observations: Iterable[tuple[int, datetime]], now: datetime,
                     settle_seconds: float) -> tuple[int, datetime | None]:
    """The highest frontier observed at least ``settle_seconds`` before ``now``, and when.

    The ``consumed`` frontier never moves back, so an offset below a frontier
    observed ``settle`` seconds ago has had that long to show up in the reads;
    only then can its absence be a verdict rather than a consumer that has not
    caught up. Of several observations of that frontier, the latest counts (a
    failed write is judged once the frontier was observed after its report).
    """
    cutoff = now - timedelta(seconds=settle_seconds)
    best, at = 0, None
    for frontier, observed_at in observations:
        if observed_at <= cutoff and (frontier > best or (frontier == best and at is not None
                                                          and observed_at > at)):
            best, at = frontier, observed_at
    return best, at


def likely_cause(ack: AckRun, events: Sequence[ClusterEvent], now: datetime) -> str:
    """Attribute a loss from the evidence only: two leaders at once when it was
    acknowledged (an isolated leader), else the write's durability and the first
    leader change after it (the most specific explanation wins).

    Where the watcher was blind (a ``watcher_blind`` gap) between the ack and that change
    (or ``now``, with none), the cause says so: what happened there was not observed
    (``unknown: watcher blind 12:01:05-12:01:40``, or the cause with the gap beside it).
    """
    after = ack.first_ack - CAUSE_SLACK
    changes = sorted((e for e in events if e.kind in LEADER_CHANGES
                      and e.event_time >= after), key=lambda e: e.event_time)
    cause = (Cause.isolated_leader if acked_in_split_brain(ack, events, now)
             or deposed_at(ack, events) is not None else _cause_of(ack, changes, events))
    end = changes[0].event_time if changes else now
    gaps = sorted((e.event_time, e.until) for e in events if e.kind == BLIND
                  and e.event_time <= end and (e.until is None or e.until >= after))
    if not gaps:
        return cause
    blind = "watcher blind " + ", ".join(
        f"{a:%H:%M:%S}-{b:%H:%M:%S}" if b is not None else f"since {a:%H:%M:%S}"
        for a, b in gaps)
    return f"{Cause.unknown}: {blind}" if cause == Cause.unknown else f"{cause} ({blind})"


def split_brain_pairs(events: Sequence[ClusterEvent]
                      ) -> list[tuple[ClusterEvent, ClusterEvent | None]]:
    """The watcher's ``split_brain_enter`` events, each with the ``split_brain_exit`` that
    closed it (None: still open), in time order (pure)."""
    pairs: list[tuple[ClusterEvent, ClusterEvent | None]] = []
    opened: ClusterEvent | None = None
    for e in sorted((e for e in events if e.kind in (SPLIT_BRAIN, SPLIT_BRAIN_END)),
                    key=lambda e: (e.event_time, e.kind != SPLIT_BRAIN)):
        if e.kind == SPLIT_BRAIN and opened is None:
            opened = e
        elif e.kind == SPLIT_BRAIN_END and opened is not None:
            pairs.append((opened, e))
            opened = None
    return pairs + ([(opened, None)] if opened is not None else [])


def split_brain_spans(events: Sequence[ClusterEvent], now: datetime
                      ) -> list[tuple[datetime, datetime]]:
    """The spans in which two brokers each named themselves leader (an open one ends
    ``now``), from the watcher's ``split_brain_enter``/``_exit`` events (pure)."""
    return [(a.event_time, b.event_time if b is not None else max(now, a.event_time))
            for a, b in split_brain_pairs(events)]


def deposed_at(ack: AckRun, events: Sequence[ClusterEvent]) -> ClusterEvent | None:
    """The leader change that had deposed the broker which acknowledged the run (where the
    ledger names it: the kaudit plugin) at least :data:`DEPOSED_SLACK` before its last
    report: an event before then named this broker leader, the last one before then names
    another, and none names this broker again up to the report. None: the broker led
    then (or none is named, or the watcher was blind since that event: a change back may
    have gone unseen). A leader paused past its session timeout acknowledges so when it
    resumes, before it learns it was replaced."""
    if ack.broker is None:
        return None
    named = sorted((e for e in events if e.kind in (*LEADER_CHANGES, FIRST_SEEN)
                    and e.leader is not None and e.leader >= 0
                    and e.event_time <= ack.last_ack), key=lambda e: e.event_time)
    cutoff = ack.last_ack - DEPOSED_SLACK
    before = [e for e in named if e.event_time <= cutoff]
    if not before or before[-1].leader == ack.broker or all(
            e.leader != ack.broker for e in before):
        return None  # it leads, or was never seen leading: nothing deposed it
    last = before[-1]
    if any(e.leader == ack.broker for e in named if e.event_time > last.event_time):
        return None  # named again (a change the watcher saw late)
    if any(e.kind == BLIND and e.event_time <= ack.last_ack
           and (e.until is None or e.until >= last.event_time) for e in events):
        return None
    return last


def acked_in_split_brain(ack: AckRun, events: Sequence[ClusterEvent], now: datetime) -> bool:
    """Whether the run was acknowledged while two brokers acted as leader (from
    :data:`SPLIT_BRAIN_SLACK` before it was seen): a lost write acknowledged then was
    acknowledged by the leader the quorum had replaced."""
    return any(ack.last_ack >= start - SPLIT_BRAIN_SLACK and ack.first_ack <= end
               for start, end in split_brain_spans(events, now))


def _cause_of(ack: AckRun, changes: Sequence[ClusterEvent],
              events: Sequence[ClusterEvent]) -> str:
    """The most specific explanation the events give (the definition, in this order).

    The first change after the ack is where the write's leader went; the first one after
    it that names a leader is who took over (``successor``; the same event when it names
    one). A write acknowledged with ``acks=all`` sat on every member of the ISR the
    leader left (``previous_isr``), so a successor from that ISR had it, unless its copy
    went: the ISR was the leader alone and that leader came back without it (``disk
    loss``), or the ISR was larger and the one elected from it came back without it
    (every in-sync copy went at once: ``simultaneous crash``). A successor from the
    eligible leader replicas (KIP-966: replicas that left the ISR as it fell below
    ``min.insync.replicas``, holding every write committed until then) had it too: an
    ``acks=all`` write is acknowledged only at ``min.insync.replicas``, so it is no ISR
    shrunk to the leader nor an unclean election that lost it, but the eligible copy (a
    ``disk loss``, or a ``simultaneous crash`` where every replica went down)."""
    if not changes:
        return Cause.unknown
    if ack.acks in ("0", "1"):
        return Cause.acks1_failover
    first = [e for e in changes if e.event_time == changes[0].event_time]  # unordered ties
    if any(e.kind == LOG_END_DROP and e.log_end == 0 and e.event_time >= ack.first_ack
           for e in events):
        return Cause.disk_loss  # a replica came back empty and leads
    left = {e.previous_leader for e in first if e.previous_leader is not None}
    before = [set(e.previous_isr) for e in first if e.previous_isr is not None]
    elected = next((e for e in changes if e.leader is not None and e.leader >= 0), None)
    successor = elected.leader if elected is not None else None
    if elected is not None and elected.previous_elr and successor in elected.previous_elr:
        return _copy_lost(ack, elected, events)  # an eligible replica back without it
    if any(len(isr) <= 1 for isr in before):
        if elected is not None and successor in left and all(
                isr <= {successor} for isr in before):
            return _copy_lost(ack, elected, events)  # the sole in-sync replica, without it
        return Cause.isr_shrunk
    if any(e.previous_isr is not None and e.leader is not None and e.leader >= 0
           and e.leader not in e.previous_isr and e.leader not in (e.previous_elr or ())
           for e in first):
        return Cause.unclean_election
    if any(e.kind == OFFLINE for e in first) or (
            successor is not None and before and all(successor in isr for isr in before)):
        return Cause.simultaneous_crash  # elected from the ISR that had it, back without it
    return Cause.unknown


def _copy_lost(ack: AckRun, elected: ClusterEvent, events: Sequence[ClusterEvent]) -> str:
    """The successor held the write and leads without it: its copy went. Every replica
    fenced between the ack and that election (the ISR shrinking as the others went down
    too): a ``simultaneous crash``; else a ``disk loss``."""
    if _every_replica_down(ack.first_ack - CAUSE_SLACK, elected.event_time, events):
        return Cause.simultaneous_crash
    return Cause.disk_loss


def _every_replica_down(since: datetime, until: datetime,
                        events: Sequence[ClusterEvent]) -> bool:
    """Whether every replica of the partition was fenced (went down, or registered anew: a
    restart) between ``since`` and ``until``, from the cluster-wide ``broker_fenced`` rows
    (:data:`BROKER_FENCED`). A power cut takes them all; a lost disk under a sole in-sync
    replica takes that one broker while the others, cut off or lagging, stay up."""
    replicas = next((set(e.replicas) for e in sorted(
        events, key=lambda e: e.event_time, reverse=True)
        if e.replicas and e.event_time <= until), None)
    if replicas is None:  # unknown: every broker the partition's ISRs named until then
        replicas = {b for e in events if e.event_time <= until
                    for b in (*(e.previous_isr or ()), *(e.isr or ()))}
    down = {e.broker for e in events if e.kind == BROKER_FENCED and e.broker is not None
            and since <= e.event_time <= until}
    return len(replicas) > 1 and replicas <= down


@dataclass(frozen=True)
class View:
    read_time: datetime
    source: str
    status: str
    stamp: StampKey | None
    leader_epoch: int | None = None


def _views(reads: Iterable[ReadRun], x: int) -> list[View]:
    vs = [View(r.read_time, r.source, r.status, r.stamp_at(x), r.leader_epoch)
          for r in reads if r.offset <= x < r.end]
    vs.sort(key=lambda v: (v.read_time, _SOURCE_RANK.get(v.source, 9)))
    return vs


def _read_at(reads: Iterable[ReadRun], stamp: StampKey) -> list[int]:
    """Every offset a record with ``stamp`` was read at."""
    p, r, s = stamp
    return sorted({rr.offset + s - rr.seq for rr in reads
                   if rr.stamped and rr.producer_id == p and rr.run_id == r
                   and rr.seq <= s < rr.seq + rr.count})


@dataclass(frozen=True)
class Verdict:
    """The verdict on one write, or why it is held back (``hold`` set, ``kind`` None)."""

    kind: str | None
    subkind: str | None = None
    hold: str | None = None
    evidence: dict = field(default_factory=dict)


def _relevant_changes(events: Sequence[ClusterEvent], first_ack: datetime, last_ack: datetime,
                      lookback: float) -> list[ClusterEvent]:
    w = timedelta(seconds=lookback)
    return [e for e in events if e.kind in LEADER_CHANGES
            and first_ack - w <= e.event_time <= last_ack + w]


def _alone(e: ClusterEvent) -> bool:
    """The ISR is the leader alone (or empty) on a replicated partition."""
    return e.isr is not None and len(e.isr) <= 1 and (e.replicas is None or len(e.replicas) > 1)


def beyond_end(a: AckRun, events: Sequence[ClusterEvent], clock: Clock) -> bool:
    """Whether a successful write acknowledged at or past the settled frontier is settled
    all the same: the partition's log ends below it (the definition).

    The settled frontier passes an offset once the log has grown past it and the consume
    job read there. After a truncation a partition that is no longer written (a burst
    ended, a producer stopped) never grows past the truncated writes' offsets, and they
    would wait forever, holding every write of their producer run below them (a reorder
    witness). Kafka's high watermark passes every offset its leader holds once each
    follower in the ISR has fetched it, and a follower that has not within
    ``replica.lag.time.max.ms`` leaves the ISR. So where the log end asked this pass
    (``clock.log_end``, the high watermark) is at or below the settled frontier (the
    consume job read the whole log), the write was acknowledged more than
    ``clock.beyond_end_seconds`` ago (set above ``replica.lag.time.max.ms``) and no leader
    changed since then, nor was the watcher blind (a new leader's high watermark catches
    up on its followers first), its offsets at or past the frontier lie past the log's end:
    a direct re-read says so (``truncated``) and the write is judged on it.

    Only where leadership moved away from the write: a change naming another leader than
    the broker that acknowledged it (any change, where the ledger names none) from
    ``clock.lookback_seconds`` before its ack on (a deposed leader acknowledges after the
    change that replaced it). Every truncation comes with one. A high watermark that stalls
    without one (the followers down and the controller quorum with them, so the ISR cannot
    shrink) leaves writes on the leader above it: they are not past the log's end, and
    wait. So does an ISR below ``min.insync.replicas`` (the watcher's last
    ``under_min_isr_enter`` not yet exited): since Kafka 3.7 (KIP-966) the leader holds its
    high watermark there, however long, while it acknowledges ``acks=1`` writes above it
    (``bench/held_watermark.py`` on 4.1.1: ISR [3] at min.insync.replicas 2, the high
    watermark stayed at 100 while the leader acknowledged up to 649, and was 650 once the
    ISR was whole)."""
    if clock.log_end is None or clock.settled_frontier < clock.log_end:
        return False
    since = clock.now - timedelta(seconds=clock.beyond_end_seconds)
    if a.last_ack >= since or any(
            (e.kind in LEADER_CHANGES and e.event_time > since)
            or (e.kind == BLIND and (e.until is None or e.until > since)) for e in events):
        return False
    moved = a.first_ack - timedelta(seconds=clock.lookback_seconds)
    return any(e.kind in LEADER_CHANGES and e.event_time >= moved
               and (a.broker is None or e.leader != a.broker) for e in events) \
        and not _under_min_isr(events)


def _under_min_isr(events: Sequence[ClusterEvent]) -> bool:
    """Whether the partition's ISR is below ``min.insync.replicas`` now, as the watcher last
    said (never said, or ``min.insync.replicas`` unknown: False)."""
    said = [e for e in events if e.kind in (UNDER_MIN_ISR_ENTER, UNDER_MIN_ISR_EXIT)]
    return bool(said) and max(said, key=lambda e: e.event_time).kind == UNDER_MIN_ISR_ENTER


def change_gate(events: Sequence[ClusterEvent], first_ack: datetime, last_ack: datetime,
                lookback: float) -> tuple[list[ClusterEvent], str | None]:
    """The leader changes a write must be read after, or why it must wait (the definition).

    A leader change within ``lookback`` of the ack may have truncated the write
    after it was read. A write acked while the ISR was the leader alone (that
    ISR in force at its first ack, or observed up to ``lookback`` after its last
    one: metadata lags) sits on one replica: an unclean election may destroy it
    at any time, however long after it was read. Such a write waits until an
    ISR of two or more is in force after both its ack and that observation (a
    follower then holds it) or the leader changes, and must be read after every
    leader change from ``lookback`` before its ack on. The watcher records
    changes only, so the ISR in force at an instant is the latest observation
    up to it: observed after both (a later change), or observed before the ack
    and after every "alone" observation (the ISR grew between a run's first and
    last acks, and nothing changed since).
    """
    changes = _relevant_changes(events, first_ack, last_ack, lookback)
    w = timedelta(seconds=lookback)
    timeline = [e for e in events if e.isr is not None]
    # the ISR in force at the ack: the latest observation up to it. Observations made at
    # one instant are unordered (arrival order differs between passes): any alone counts
    in_force = max((e.event_time for e in timeline if e.event_time <= first_ack), default=None)
    marks = [e for e in timeline if _alone(e) and (
        e.event_time == in_force or first_ack < e.event_time <= last_ack + w)]
    if not marks:
        return changes, None
    since = max(last_ack, *(e.event_time for e in marks))
    grown = not any(_alone(e) for e in timeline if e.event_time == max(
        (e.event_time for e in timeline if e.event_time <= since), default=None))
    if not grown and not any(e.event_time > since and (len(e.isr or ()) >= 2
                                                       or e.kind in LEADER_CHANGES)
                             for e in events):
        return changes, "acked while the ISR was the leader alone: at risk until it grows"
    later = [e for e in events if e.kind in LEADER_CHANGES
             and e.event_time >= first_ack - w and e not in changes]
    return [*changes, *later], None


def judge_write(stamp: StampKey, x: int, views: Sequence[View], changes: Sequence[ClusterEvent],
                compacted: bool | None = False) -> Verdict:
    """The verdict on one successful write at settled offset ``x`` (the definition)."""
    if compacted is None and any(v.status == "absent" for v in views):
        return Verdict(None, hold="cleanup.policy unknown")
    # an offset that now has no record below the log end was destroyed, unless the log
    # cleaner may have removed it (compacted topics)
    gone = ("truncated",) if compacted else ("truncated", "absent")
    records = [v for v in views if v.status == "record" or v.status in gone]
    if records:
        last = records[-1]
        if last.status == "record" and last.stamp == stamp:
            kind, sub = Kind.confirmed, None
        elif any(v.status == "record" and v.stamp == stamp for v in records):
            kind, sub = Kind.lost_after_seen, None
        elif any(v.status == "record" for v in records):
            kind, sub = Kind.lost, Subkind.overwritten
        else:
            kind, sub = Kind.lost, Subkind.vanished
    elif any(v.status == "expired" for v in views):
        kind, sub = Kind.unverified, Subkind.retention
    elif any(v.status == "absent" for v in views):
        kind, sub = Kind.unverified, Subkind.compacted
    else:
        return Verdict(None, hold="no read of the offset")
    if kind in LOSSES and not any(v.source == "reread" for v in views):
        return Verdict(None, hold="loss needs a direct re-read")
    for e in changes:
        if not any(v.read_time > e.event_time for v in views):
            return Verdict(None, hold="leader changed: needs a read after the change")
    # each view: [read time, stream|reread, status, stamp read, leader epoch of the read]
    evidence = {"seen": [[v.read_time.isoformat(), v.source, v.status,
                          list(v.stamp) if v.stamp else None, v.leader_epoch] for v in views]}
    return Verdict(kind, sub, evidence=evidence)


def judge_failed(error: str, present_at: Sequence[int]) -> Verdict:
    """The verdict on one write whose delivery report failed (the definition)."""
    if present_at:
        return Verdict(Kind.indeterminate, Subkind.present,
                       evidence={"error": error, "found_at": list(present_at)})
    if error in REJECTING_ERRORS:
        return Verdict(Kind.rejected, None, evidence={"error": error})
    return Verdict(Kind.indeterminate, Subkind.absent, evidence={"error": error})


@dataclass
class Judgement:
    """What a pass decided for one partition."""

    findings: list[Finding] = field(default_factory=list)
    acks: list[AckRun] = field(default_factory=list)  # still pending
    judged: list[AckRun] = field(default_factory=list)  # successful runs judged now
    rereads: list[Reread] = field(default_factory=list)
    pending: int = 0
    unseen: int = 0
    oldest_unseen: datetime | None = None
    #: one past the highest unsettled offset where another record was read (None: none)
    suspect_end: int | None = None


def _cuts(start: int, stop: int, points: Iterable[int]) -> list[int]:
    return sorted({start, stop, *(p for p in points if start < p < stop)})


def reorder_witness(x: int, s: int, runs: Sequence[AckRun]) -> tuple[int, int] | None:
    """A write in ``runs`` with seq below ``s`` at an offset above ``x`` (seq, offset): the
    lowest such seq, at the lowest such offset (a seq acked at two offsets: whatever the
    order of ``runs``). Its presence makes the write ``s`` at ``x`` reordered."""
    best = None
    for b in runs:
        lo, hi = max(0, x - b.offset + 1), min(b.count, s - b.seq)  # type: ignore[operator]
        if lo < hi and (best is None or (b.seq + lo, b.offset + lo) < best):  # type: ignore
            best = (b.seq + lo, b.offset + lo)  # type: ignore[operator]
    return best


def _reorder_cuts(a: AckRun, runs: Sequence[AckRun]) -> list[int]:
    """Offsets of ``a`` where the answer of :func:`_later_lower` may change."""
    o, s = a.offset, a.seq
    return [p for b in runs for p in (b.offset, b.offset + b.count - 1,  # type: ignore
                                      o + b.seq + 1 - s, o + b.seq + b.count - s)]


class _Intervals:
    """Runs as intervals ``[start, start + length)``, for overlap queries in input order.

    Only narrows which runs are looked at (a query's answer is exactly the runs a
    full scan would keep), so a pass costs about the number of runs, not its square.
    The runs are kept in classes of similar length (up to 8 times apart), each sorted
    by start: a query looks, in each class, only at the runs starting at most that
    class's longest length before it, so one long run does not widen every query's scan
    over the short ones (interleaving producers: a read run per record beside a few
    long ones).
    """

    def __init__(self, runs: Sequence, start, length) -> None:
        groups: dict[int, list[tuple[int, int, int]]] = {}
        for i, r in enumerate(runs):
            s, n = start(r), length(r)
            groups.setdefault((max(n, 1).bit_length() + 2) // 3, []).append((s, i, s + n))
        self.runs: list = list(runs)
        #: per class (lengths up to 8 times apart): the lowest start, the highest end, the
        #: starts, ends and input positions sorted by start, and the longest length
        self._classes: list[tuple[int, int, list[int], list[int], list[int], int]] = []
        for g in groups.values():
            g.sort()
            ends = [t[2] for t in g]
            self._classes.append((g[0][0], max(ends), [t[0] for t in g], ends,
                                  [t[1] for t in g], max(t[2] - t[0] for t in g)))

    def overlapping(self, lo: int, hi: int) -> list:
        hits: list[int] = []
        for first, last, starts, ends, index, longest in self._classes:
            if first >= hi or last <= lo:
                continue
            j = bisect_left(starts, hi)
            for k in range(bisect_left(starts, lo - longest + 1, 0, j), j):
                if ends[k] > lo:
                    hits.append(index[k])
        if len(hits) > 1:
            hits.sort()
        runs = self.runs
        return [runs[i] for i in hits]


def merge_spans(spans: Iterable[tuple[int, int]]) -> list[tuple[int, int]]:
    """Half-open spans ``[lo, hi)`` as their union: sorted, those that overlap or touch
    made one. An empty span (``hi <= lo``) is kept as it is, apart: it overlaps no offset,
    but a span strictly around its point does, which merging would forget."""
    merged: list[list[int]] = []
    empty: list[tuple[int, int]] = []
    for lo, hi in sorted(spans):
        if hi <= lo:
            empty.append((lo, hi))
        elif merged and lo <= merged[-1][1]:
            merged[-1][1] = max(merged[-1][1], hi)
        else:
            merged.append([lo, hi])
    return sorted([(lo, hi) for lo, hi in merged] + empty)


class _Cover:
    """The union of half-open spans ``[lo, hi)``: ``touches(lo, hi)`` is ``any(lo < h and
    hi > l for l, h in spans)``, answered by bisection over the merged spans (a pass asks
    it once per retained read, against every pending run: a scan was their product)."""

    def __init__(self, spans: Sequence[tuple[int, int]]) -> None:
        self._spans = list(spans)
        self._empty = [s for s in self._spans if s[1] <= s[0]]  # merging would lose them
        merged = merge_spans(s for s in spans if s[1] > s[0])
        self._los = [m[0] for m in merged]
        self._his = [m[1] for m in merged]

    def touches(self, lo: int, hi: int) -> bool:
        if hi <= lo:  # an empty query: strictly inside a span (merged ones would differ)
            return any(lo < e and hi > s for s, e in self._spans)
        i = bisect_right(self._his, lo)  # the first merged span ending past lo
        return (i < len(self._los) and self._los[i] < hi) or any(
            lo < e and hi > s for s, e in self._empty)


class _Written:
    """One producer run's successful ack runs, for reorder witnesses and holds.

    ``candidates(a)``: every other run holding a seq below ``a``'s last at an
    offset above ``a``'s first (only those can witness or hold a reorder inside
    ``a``), found by walking back from ``a``'s seqs while a prefix maximum allows one.
    """

    def __init__(self, runs: Sequence[AckRun]) -> None:
        self._runs = sorted(runs, key=lambda b: b.seq)
        self._seqs = [b.seq for b in self._runs]
        self._peak: list[int] = []
        for b in self._runs:
            last = b.offset + b.count - 1  # type: ignore[operator]
            self._peak.append(max(last, self._peak[-1]) if self._peak else last)

    def candidates(self, a: AckRun) -> list[AckRun]:
        out = []
        i = bisect_left(self._seqs, a.seq + a.count - 1) - 1
        while i >= 0 and self._peak[i] > a.offset:  # type: ignore[operator]
            b = self._runs[i]
            if b is not a and b.offset + b.count - 1 > a.offset:  # type: ignore[operator]
                out.append(b)
            i -= 1
        return out


class _Decided:
    """One producer run's confirmed pieces decided in this pass's second phase, or held
    back in it: taken in descending offset order, so a piece's witnesses and holds among
    them lie above it. ``above(a)`` is what may witness or hold inside ``a``: every piece
    when all lie above ``a`` (the rule), else those :class:`_Written` would name."""

    def __init__(self) -> None:
        self.runs: list[AckRun] = []
        self._lowest_start: int | None = None
        self._lowest_seq: AckRun | None = None

    def add(self, a: AckRun) -> None:
        self.runs.append(a)
        assert a.offset is not None
        if self._lowest_start is None or a.offset < self._lowest_start:
            self._lowest_start = a.offset
        if self._lowest_seq is None or a.seq < self._lowest_seq.seq:
            self._lowest_seq = a

    def above(self, a: AckRun) -> list[AckRun]:
        if self._lowest_start is None:
            return []
        if self._lowest_start >= a.end:  # all above a: the lowest seq answers for all
            return [self._lowest_seq] if self._lowest_seq is not None else []
        return _Written(self.runs).candidates(a)  # overlapping ranges: rare, exact


def judge_partition(acks: Sequence[AckRun], reads: Sequence[ReadRun],
                    judged: Sequence[AckRun], events: Sequence[ClusterEvent],
                    clock: Clock) -> Judgement:
    """Judge every settled write of one partition, run by run, in two phases.

    ``acks``: the partition's unjudged ack runs; ``reads``: the read runs kept;
    ``judged``: runs confirmed recently (witnesses of ``reordered``); ``events``:
    the partition's cluster events known now. Returns the findings, the ack runs
    (or pieces) still pending, the runs confirmed now and re-read requests.

    First every settled write gets its own verdict (:func:`judge_write`) and its
    copies (:func:`copies_in_log`); then the confirmed ones are taken from the
    highest offset down for ``reordered`` (:func:`reorder_witness`), each held
    while a lower-seq write of its run acked above it is still pending.
    """
    out = Judgement()
    ok = sorted((a for a in acks if a.placed), key=lambda a: (a.offset, a.seq))
    failed = sorted((a for a in acks if not a.placed), key=lambda a: a.seq)
    at_offsets = _Intervals(reads, lambda r: r.offset, lambda r: r.count)
    stamped: dict[tuple[str | None, str | None], list[ReadRun]] = {}
    for r in reads:
        if r.stamped:
            stamped.setdefault((r.producer_id, r.run_id), []).append(r)
    by_seq = {k: _Intervals(v, lambda r: r.seq, lambda r: r.count) for k, v in stamped.items()}
    none = _Intervals([], lambda r: 0, lambda r: 0)
    confirmed: list[_Candidate] = []
    for a in ok:
        _judge_ok_run(a, at_offsets, by_seq.get((a.producer_id, a.run_id), none), events,
                      clock, out, confirmed)
    for a in failed:
        _judge_failed_run(a, at_offsets, by_seq.get((a.producer_id, a.run_id), none), clock,
                          out)
    _decide_confirmed(confirmed, judged, out)
    _suspects(out, at_offsets, clock)
    for a in out.acks:
        out.pending += a.count
        if a.placed:
            unread = a.end - max(a.offset, clock.stream_frontier)
            if unread > 0 and (clock.now - a.last_ack).total_seconds() > clock.unseen_after_seconds:
                out.unseen += unread
                if out.oldest_unseen is None or a.first_ack < out.oldest_unseen:
                    out.oldest_unseen = a.first_ack
    out.rereads = coalesce_rereads(out.rereads)
    return out


def _suspects(out: Judgement, at_offsets: _Intervals, clock: Clock) -> None:
    """The pending writes past the settled frontier where the consume job read another
    record (a foreign one, or another write's stamp): ``out.suspect_end``, and a re-read
    of each (:data:`SUSPECT`) unless one was made after that read. Only the request is
    early: a write is still judged once settled, on the views it has then."""
    past = _Intervals([r for r in at_offsets.runs if r.end > clock.settled_frontier
                       and r.source == "stream" and r.status == "record"],
                      lambda r: r.offset, lambda r: r.count)
    if not past.runs:  # nothing read past the frontier (a backlog's pending writes)
        return
    for a in out.acks:
        if not a.placed or a.end <= clock.settled_frontier:
            continue
        lo = max(a.offset, clock.settled_frontier)  # type: ignore[type-var]
        shift = a.seq - a.offset  # type: ignore[operator]
        for r in past.overlapping(lo, a.end):
            s, e = max(lo, r.offset), min(a.end, r.end)
            if s >= e or (
                    r.stamped and (r.producer_id, r.run_id, r.seq - r.offset)  # type: ignore
                    == (a.producer_id, a.run_id, shift)):
                continue  # a's own writes at their acked offsets (past: stream records only)
            out.suspect_end = max(out.suspect_end or e, e)
            if not any(q.source == "reread" and q.read_time >= r.read_time
                       for q in at_offsets.overlapping(s, e)):
                out.rereads.append(Reread(a.topic, a.partition, s, e, SUSPECT))


@dataclass(frozen=True)
class _Candidate:
    """A piece confirmed in the first phase, with its copies elsewhere in the log (offsets
    of its first write; the others' are shifted alike)."""

    piece: AckRun
    copies: tuple[int, ...]


def _copy_points(base: int, a: AckRun, mine: Sequence[ReadRun], at_offsets: _Intervals
                 ) -> list[int]:
    """Positions where the copies of ``a``'s writes, or the views at those copies, may
    change (``base``: the position of ``a``'s first write: its offset, or its seq for a
    failed run): the bounds of the stamped runs ``mine`` and of every read over them."""
    points = []
    for r in mine:
        assert r.seq is not None
        shift = base + r.seq - a.seq  # the position of r's first seq in a
        points += [shift, shift + r.count]
        for q in at_offsets.overlapping(r.offset, r.end):
            points += [shift + q.offset - r.offset, shift + q.end - r.offset]
    return points


def _judge_ok_run(a: AckRun, at_offsets: _Intervals, by_seq: _Intervals,
                  events: Sequence[ClusterEvent], clock: Clock, out: Judgement,
                  confirmed: list[_Candidate]) -> None:
    o, n = a.offset, a.count
    assert o is not None
    stop = min(a.end, clock.settled_frontier)
    if stop < a.end and beyond_end(a, events, clock):
        stop = a.end
    if stop <= o:
        out.acks.append(a)
        return
    if stop < a.end:
        out.acks.append(a.piece(stop - o, n))
    changes, exposed = change_gate(events, a.first_ack, a.last_ack, clock.lookback_seconds)
    if exposed:  # no re-read helps until the ISR grows or the leader changes
        out.acks.append(a.piece(0, stop - o))
        return
    here = at_offsets.overlapping(o, stop)
    mine = by_seq.overlapping(a.seq, a.seq + n)
    points = [p for r in here for p in (r.offset, r.end)]
    points += _copy_points(o, a, mine, at_offsets)
    cuts = _cuts(o, stop, points)
    for lo, hi in zip(cuts, cuts[1:], strict=False):
        stamp = (a.producer_id, a.run_id, a.seq + lo - o)
        v = judge_write(stamp, lo, _views(here, lo), changes, clock.compacted)
        if v.kind is None:
            out.acks.append(a.piece(lo - o, hi - o))
            out.rereads.append(Reread(a.topic, a.partition, lo, hi, v.hold or ""))
            continue
        copies, unsure = duplicate_cases(stamp, lo, mine, at_offsets, changes)
        if unsure:  # a copy read before a leader change: read it again first
            out.acks.append(a.piece(lo - o, hi - o))
            out.rereads += [Reread(a.topic, a.partition, c, c + hi - lo, COPY_CHANGED)
                            for c in unsure]
            continue
        if v.kind == Kind.confirmed:  # decided with its reorder witnesses, below
            confirmed.append(_Candidate(a.piece(lo - o, hi - o), tuple(copies)))
            continue
        out.findings.append(_finding(
            a, v.kind, lo - o, hi - lo, subkind=v.subkind,
            cause=likely_cause(a, events, clock.now) if v.kind in LOSSES else None,
            evidence={**v.evidence, "acks": a.acks, "settled_frontier": clock.settled_frontier}))
        if len(copies) >= 2:  # not at its acked offset, but twice elsewhere
            out.findings.append(_finding(a, Kind.duplicate, lo - o, hi - lo, evidence={
                "acked_offset": lo, "also_read_at": copies}))


def _decide_confirmed(confirmed: list[_Candidate], judged: Sequence[AckRun],
                      out: Judgement) -> None:
    """The second phase: each confirmed piece, from the highest offset down, is held while a
    lower-seq write of its run acked above it is pending (that write may yet be confirmed
    there, a reorder, or be lost there, no reorder), else confirmed with its witnesses:
    lower-seq writes of its run confirmed above it, now or in an earlier pass."""
    by_run: dict[tuple[str, str], list[AckRun]] = {}
    for p in out.acks:
        if p.placed:
            by_run.setdefault((p.producer_id, p.run_id), []).append(p)
    still = {k: _Written(v) for k, v in by_run.items()}
    by_run = {}
    for j in judged:
        by_run.setdefault((j.producer_id, j.run_id), []).append(j)
    earlier = {k: _Written(v) for k, v in by_run.items()}
    nothing = _Written([])
    held: dict[tuple[str, str], _Decided] = {}
    accepted: dict[tuple[str, str], _Decided] = {}
    for c in sorted(confirmed, key=lambda c: (c.piece.offset, c.piece.seq), reverse=True):
        a = c.piece
        key, o = (a.producer_id, a.run_id), a.offset
        assert o is not None
        held_here, accepted_here = held.setdefault(key, _Decided()), \
            accepted.setdefault(key, _Decided())
        holds = [*still.get(key, nothing).candidates(a), *held_here.above(a)]
        witnesses = [*earlier.get(key, nothing).candidates(a), *accepted_here.above(a)]
        cuts = _cuts(o, a.end, [*_reorder_cuts(a, holds), *_reorder_cuts(a, witnesses)])
        kept, taken = [], []
        for lo, hi in zip(cuts, cuts[1:], strict=False):
            s, piece = a.seq + lo - o, a.piece(lo - o, hi - o)
            if reorder_witness(lo, s, holds) is not None:
                kept.append(piece)
                continue
            taken.append(piece)
            witness = reorder_witness(lo, s, witnesses)
            if witness is not None:
                out.findings.append(_finding(a, Kind.reordered, lo - o, hi - lo, evidence={
                    "lower_seq": witness[0], "at_higher_offset": witness[1]}))
            if c.copies:
                out.findings.append(_finding(a, Kind.duplicate, lo - o, hi - lo, evidence={
                    "acked_offset": lo, "also_read_at": [x + lo - o for x in c.copies]}))
        # a piece's own writes neither witness nor hold each other: added once it is done
        for p in kept:
            held_here.add(p)
        for p in taken:
            accepted_here.add(p)
        out.acks += kept
        out.judged += taken
        for p in _merged(taken):
            out.findings.append(_finding(p, Kind.confirmed, 0, p.count))


def _merged(pieces: list[AckRun]) -> list[AckRun]:
    """Contiguous pieces of one run (in offset order) as one."""
    out: list[AckRun] = []
    for p in pieces:
        if out and out[-1].end == p.offset:
            out[-1] = replace(out[-1], count=out[-1].count + p.count,
                              last_ack=max(out[-1].last_ack, p.last_ack))
        else:
            out.append(p)
    return out


def duplicate_cases(stamp: StampKey, x: int | None, mine: Sequence[ReadRun],
                    at_offsets: _Intervals, changes: Sequence[ClusterEvent]
                    ) -> tuple[list[int], list[int]]:
    """Where ``stamp`` sits in the log besides its acked offset ``x`` (None for a failed
    write): ``(copies, unsure)`` (the definition).

    A copy is an offset where the stamp was *read* (by the consume job or a re-read) and the
    latest read there still shows it: an ack says where a write was put, not where it is,
    and a copy later destroyed (truncated, expired) sits nowhere. A copy whose reads all
    predate one of ``changes`` (the leader changes the write must be read after) may have
    been truncated since: it is ``unsure`` until read again. A write sitting at two or more
    offsets (its acked one among them if confirmed there) is a ``duplicate``.
    """
    copies: list[int] = []
    unsure: list[int] = []
    for c in _read_at(mine, stamp):
        if c == x:
            continue
        views = _views(at_offsets.overlapping(c, c + 1), c)
        if views[-1].status != "record" or views[-1].stamp != stamp:
            continue  # read there once, gone since
        if any(not any(v.read_time > e.event_time for v in views) for e in changes):
            unsure.append(c)
        else:
            copies.append(c)
    return copies, unsure


def _judge_failed_run(a: AckRun, at_offsets: _Intervals, by_seq: _Intervals, clock: Clock,
                      out: Judgement) -> None:
    if a.partition >= 0 and (a.horizon is None or clock.settled_frontier < a.horizon):
        out.acks.append(a)
        return
    mine = by_seq.overlapping(a.seq, a.seq + a.count)
    cuts = _cuts(a.seq, a.seq + a.count, _copy_points(a.seq, a, mine, at_offsets))
    for lo, hi in zip(cuts, cuts[1:], strict=False):
        found, _ = duplicate_cases((a.producer_id, a.run_id, lo), None, mine, at_offsets, ())
        v = judge_failed(a.error or NO_OFFSET, found)
        assert v.kind is not None
        out.findings.append(_finding(a, v.kind, lo - a.seq, hi - lo, subkind=v.subkind,
                                     evidence={**v.evidence, "acks": a.acks}))
        if len(found) > 1:
            out.findings.append(_finding(a, Kind.duplicate, lo - a.seq, hi - lo, evidence={
                "acked_offset": None, "also_read_at": found}))


def _finding(a: AckRun, kind: str, start: int, count: int, **kw) -> Finding:
    """The finding on writes ``start .. start+count-1`` (indices into ``a``)."""
    return Finding(kind=kind, topic=a.topic, partition=a.partition, producer_id=a.producer_id,
                   run_id=a.run_id, seq=a.seq + start,
                   offset=None if a.offset is None else a.offset + start, count=count,
                   ack_time=a.first_ack, **kw)


def coalesce_rereads(requests: Iterable[Reread]) -> list[Reread]:
    """Merge overlapping or adjacent re-read requests per partition."""
    out: list[Reread] = []
    for r in sorted(requests, key=lambda r: (r.topic, r.partition, r.offset)):
        last = out[-1] if out else None
        if last and (last.topic, last.partition) == (r.topic, r.partition) and r.offset <= last.end:
            out[-1] = Reread(r.topic, r.partition, last.offset, max(last.end, r.end), last.reason)
        else:
            out.append(r)
    return out


def retained_reads(reads: Sequence[ReadRun], pending: Sequence[AckRun], clock: Clock,
                   retention_seconds: float) -> list[ReadRun]:
    """The read runs a partition keeps in hot state.

    A read leaves once it is older than ``retention_seconds`` and no pending
    write could still need it: at its offsets, as a copy of its stamps, or as a
    view of where such a copy was read. A write that arrives after its reads left
    is judged from a direct re-read (the loss gate asks for one), so eviction can
    delay a verdict, never change it while the log still holds the offsets.
    """
    cutoff = clock.now - timedelta(seconds=retention_seconds)
    by_run: dict[tuple, list[tuple[int, int]]] = {}
    for a in pending:
        by_run.setdefault((a.producer_id, a.run_id), []).append((a.seq, a.seq + a.count))
    seqs = {run: _Cover(spans) for run, spans in by_run.items()}
    copies = [r for r in reads if r.stamped and (r.producer_id, r.run_id) in seqs
              and seqs[(r.producer_id, r.run_id)].touches(r.seq, r.seq + r.count)]
    needed = _Cover([(a.offset, a.end) for a in pending if a.placed]
                    + [(r.offset, r.end) for r in copies])
    return [r for r in reads if r.read_time >= cutoff or needed.touches(r.offset, r.end)]
