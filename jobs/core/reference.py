"""The brute-force reference: the verdicts, message by message, over a whole history.

No runs, no hot state, no eviction: every ack run is expanded to single
messages, and at every pass every unjudged message is judged from *all* rows
known by then with the per-message definitions (:func:`rules.judge_write`,
:func:`rules.judge_failed`). The streaming engine (runs, segments, hot state,
Spark) must give exactly the same verdicts; property tests check that.

A history is a list of ``(arrival_time, row)``; a row is known to a pass at
time ``t`` when ``arrival_time <= t``.
"""

from __future__ import annotations

from collections import defaultdict
from collections.abc import Callable, Sequence
from datetime import datetime
from typing import Any

from kafka_audit.jobs.core import rules
from kafka_audit.jobs.core.engine import AuditConfig
from kafka_audit.jobs.core.model import AckRun, Clock, ClusterEvent, ReadRun

__all__ = ["reference_verdicts", "finding_messages", "Message"]

#: (kind, subkind, cause, topic, partition, offset, producer, run, seq, extra)
Message = tuple[Any, ...]


def reference_verdicts(history: Sequence[tuple[datetime, Any]], passes: Sequence[datetime],
                       cfg: AuditConfig,
                       log_ends: Callable[[str, int, datetime], int | None] | None = None
                       ) -> list[Message]:
    """``log_ends(topic, partition, now)``: the partition's log end seen by a pass (None:
    unknown); a failed write's horizon is the first one known after its report.

    Each pass, per partition: first every unjudged write gets its own verdict and its
    copies; then the writes confirmed now, from the highest offset down, are held while a
    lower-seq write of their run acked above them is still unjudged, else confirmed, and
    ``reordered`` if a lower-seq write of their run was confirmed above them (ever)."""
    judged: set[tuple[str, int, str, str, int]] = set()
    confirmed_at: dict[tuple[str, int, str, str], list[tuple[int, int]]] = defaultdict(list)
    horizons: dict[tuple[str, int, str, str, int], int] = {}
    observations: dict[tuple[str, int], list[tuple[int, datetime]]] = defaultdict(list)
    out: list[Message] = []
    for now in passes:
        known = [row for at, row in history if at <= now]
        acks = [r for r in known if isinstance(r, AckRun)]
        reads = [r for r in known if isinstance(r, ReadRun)]
        events = [r for r in known if isinstance(r, ClusterEvent)]
        parts = sorted({(r.topic, r.partition) for r in [*acks, *reads]})
        for key in parts:
            p_reads = [r for r in reads if (r.topic, r.partition) == key]
            at_offsets = rules._Intervals(p_reads, lambda r: r.offset, lambda r: r.count)
            p_events = rules.partition_events(events, key)
            stream = [r for r in p_reads if r.source == "stream"]
            if stream:
                observations[key].append((max(r.end for r in stream), now))
            observations[key].extend(rules.read_observations(stream))
            settled, _at = rules.settled_frontier(observations[key], now, cfg.settle_seconds)
            msgs = sorted(((a.offset + i if a.offset is not None else -1, a.seq + i, a)
                           for a in acks if (a.topic, a.partition) == key
                           for i in range(a.count)), key=lambda m: (not m[2].placed,
                                                                    m[0], m[1]))
            log_end = log_ends(*key, now) if log_ends else None
            confirmed_now: list[tuple[int, int, AckRun, tuple[int, ...]]] = []
            for x, seq, a in msgs:
                mid = (a.topic, a.partition, a.producer_id, a.run_id, seq)
                if mid in judged:
                    continue
                stamp = (a.producer_id, a.run_id, seq)
                if not a.placed:
                    if mid not in horizons and log_end is not None:
                        horizons[mid] = log_end
                    if a.partition >= 0 and (mid not in horizons or settled < horizons[mid]):
                        continue
                    found, _ = rules.duplicate_cases(stamp, None, p_reads, at_offsets, ())
                    v = rules.judge_failed(a.error or rules.NO_OFFSET, found)
                    judged.add(mid)
                    out.append((v.kind, v.subkind, None, *key, None, *stamp, None))
                    if len(found) > 1:
                        out.append(("duplicate", None, None, *key, None, *stamp,
                                    tuple(found)))
                    continue
                if x >= settled and not rules.beyond_end(a, p_events, Clock(
                        now, settled, lookback_seconds=cfg.lookback_seconds, log_end=log_end,
                        beyond_end_seconds=cfg.beyond_end_seconds)):
                    continue
                views = rules._views(p_reads, x)
                changes, exposed = rules.change_gate(p_events, a.first_ack, a.last_ack,
                                                     cfg.lookback_seconds)
                if exposed:
                    continue
                compacted = (None if a.topic in cfg.unknown_policy_topics
                             else a.topic in cfg.compacted_topics)
                v = rules.judge_write(stamp, x, views, changes, compacted)
                if v.kind is None:
                    continue
                copies, unsure = rules.duplicate_cases(stamp, x, p_reads, at_offsets, changes)
                if unsure:
                    continue
                if v.kind == "confirmed":
                    confirmed_now.append((x, seq, a, tuple(copies)))
                    continue
                judged.add(mid)
                if len(copies) >= 2:
                    out.append(("duplicate", None, None, *key, x, *stamp, tuple(copies)))
                cause = (rules.likely_cause(a, p_events, now)
                         if v.kind in ("lost", "lost_after_seen") else None)
                out.append((v.kind, v.subkind, cause, *key, x, *stamp, None))
            # the writes still unjudged: a lower-seq one above a confirmed write holds it
            candidates = {(x, seq, a.producer_id, a.run_id) for x, seq, a, _c in confirmed_now}
            unjudged = [(x, seq, a.producer_id, a.run_id) for x, seq, a in msgs if a.placed
                        and (a.topic, a.partition, a.producer_id, a.run_id, seq) not in judged
                        and (x, seq, a.producer_id, a.run_id) not in candidates]
            for x, seq, a, copies in sorted(confirmed_now, key=lambda m: (m[0], m[1]),
                                            reverse=True):
                run = (a.producer_id, a.run_id)
                if any(s2 < seq and x2 > x and (p2, r2) == run for x2, s2, p2, r2 in unjudged):
                    unjudged.append((x, seq, *run))
                    continue
                stamp = (a.producer_id, a.run_id, seq)
                judged.add((*key, *stamp))
                mine = confirmed_at[(*key, *run)]
                if any(s2 < seq and x2 > x for x2, s2 in mine):
                    out.append(("reordered", None, None, *key, x, *stamp, None))
                if copies:
                    out.append(("duplicate", None, None, *key, x, *stamp, copies))
                out.append(("confirmed", None, None, *key, x, *stamp, None))
                mine.append((x, seq))
    return sorted(map(_plain, out), key=repr)


def _plain(m: Message) -> Message:
    """Kinds, sub-kinds and causes as plain strings (a ``StrEnum``'s repr names its class)."""
    return tuple(str(v) if isinstance(v, str) else v for v in m)


def finding_messages(findings) -> list[Message]:
    """Findings (ranges) expanded to the reference's one tuple per message."""
    out: list[Message] = []
    for f in findings:
        for i in range(f.count):
            off = None if f.offset is None else f.offset + i
            extra = None
            if f.kind == "duplicate":
                extra = tuple(c + i for c in f.evidence["also_read_at"])
            kind_cause = f.cause if f.kind in ("lost", "lost_after_seen") else None
            out.append(_plain((f.kind, f.subkind, kind_cause, f.topic, f.partition, off,
                               f.producer_id, f.run_id, f.seq + i, extra)))
    return sorted(out, key=repr)
