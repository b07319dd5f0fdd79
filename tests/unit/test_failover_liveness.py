"""Every write of a fail-over is judged, and judged right: a partition's log simulated
through leader changes (an ``acks=1`` leader's unreplicated tail truncated, a paused
leader acknowledging after it was replaced, the old leader handed its partition back),
the consume job reading what each leader serves, and the audit's passes run on the
driver's path (:func:`~kafka_audit.jobs.audit.hot_state.arrow_step_fn` with its idle
split, each pass's re-reads answered from the log as it then stands and the partition
judged again at once, as ``audit_pass`` does). Once the last change is a lookback and a
settle period old, nothing is pending and the losses are exactly the acknowledged writes
the final log does not hold at their offsets."""

from __future__ import annotations

from dataclasses import dataclass, field

import pyarrow as pa
import pyarrow.compute as pc
from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st

from kafka_audit.jobs.audit.hot_state import arrow_step_fn, hot_table, step_arrow_schema
from kafka_audit.jobs.core.engine import AuditConfig, PartitionHot
from kafka_audit.jobs.core.model import AckRun, ClusterEvent, ReadRun
from kafka_audit.schemas.verdicts import LOSSES

from ..support.histories import at
from ..support.sizes import examples

CFG = AuditConfig(settle_seconds=1, lookback_seconds=30, unseen_after_seconds=120,
                  read_retention_seconds=600, beyond_end_seconds=10)
TICK = 0.1  # seconds between simulation steps
KEY = ("t", 0)
LOSS = {k.value for k in LOSSES}


@dataclass
class Broker:
    log: list[tuple[int, int]] = field(default_factory=list)  # (epoch, seq) per offset


@dataclass
class History:
    acks: list[tuple[float, AckRun]] = field(default_factory=list)  # (arrives, run)
    reads: list[tuple[float, ReadRun]] = field(default_factory=list)
    events: list[tuple[float, ClusterEvent]] = field(default_factory=list)
    logs: dict[int, tuple[tuple[int, int], ...]] = field(default_factory=dict)  # tick -> log
    hw: dict[int, int] = field(default_factory=dict)  # tick -> the high watermark
    end: float = 0.0


def simulate(draw) -> History:
    """One partition, brokers 1-3, broker 1 leading at epoch 0. Per tick the producer
    sends a batch to the broker it believes leads (acks=1: acknowledged once appended);
    the followers copy the leader's log ``lag`` records behind; the consume job reads up
    to the high watermark (what every replica in the ISR holds)."""
    h = History()
    brokers = {b: Broker() for b in (1, 2, 3)}
    rate = draw(st.integers(1, 20))  # writes per tick
    lag = draw(st.integers(0, 60))  # records the followers are behind
    change = draw(st.integers(5, 40)) * TICK  # broker 2 elected
    deposed = draw(st.integers(0, 15)) * TICK  # broker 1 goes on acknowledging this long
    silent = draw(st.integers(0, 40)) * TICK  # then the producer finds the new leader
    back = draw(st.one_of(st.none(), st.integers(5, 60))) # ticks after: broker 1 again
    hand_back = None if back is None else change + deposed + silent + back * TICK
    expand = change + draw(st.integers(1, 60)) * TICK  # broker 1 back in the ISR
    if hand_back is not None:
        expand = min(expand, hand_back - TICK)
    stop = max(change + deposed + silent, hand_back or 0.0) + draw(st.integers(5, 40)) * TICK
    if draw(st.booleans()):  # the producer stops at the change: nothing written after it
        stop = change + deposed
    read_lag = draw(st.sampled_from([0.0, 0.2, 1.0]))
    ledger_lag = draw(st.sampled_from([0.1, 0.5, 2.0]))
    event_lag = draw(st.sampled_from([0.0, 0.5, 3.0]))

    seq, epoch, leader, read_to = 0, 0, 1, 0
    rejoined = False  # broker 1 back in the ISR after the change
    h.events.append((0.0, ClusterEvent(at(0), *KEY, "first_seen", 1, None, (1, 2, 3))))
    t = 0.0
    tick = 0
    while t < stop + 3:
        # leadership changes
        if leader == 1 and epoch == 0 and t >= change:
            epoch, leader = 1, 2
            h.events.append((t + event_lag, ClusterEvent(at(t), *KEY, "leader_change", 2, 1,
                                                         (2, 3), (1, 2, 3))))
        if hand_back is not None and epoch == 1 and t >= hand_back:
            epoch, leader = 2, 1
            h.events.append((t + event_lag, ClusterEvent(at(t), *KEY, "leader_change", 1, 2,
                                                         (1, 2, 3), (1, 2, 3))))
        if epoch >= 1 and t >= expand and not rejoined:
            rejoined = True
            brokers[1].log = list(brokers[2].log)  # truncated to the leader's, caught up
            h.events.append((t + event_lag, ClusterEvent(at(t), *KEY, "isr_expand", leader,
                                                         leader, (1, 2, 3), (2, 3))))
        # the producer's batch
        if t < stop:
            if epoch == 0 or (epoch == 1 and t < change + deposed and not rejoined):
                to, at_epoch = 1, 0  # broker 1, leading or believing it leads
            elif epoch == 1 and t < change + deposed + silent:
                to = None  # the producer waits for the new leader
            else:
                to, at_epoch = leader, epoch
            if to is not None:
                log = brokers[to].log
                offset = len(log)
                log.extend((at_epoch, seq + k) for k in range(rate))
                run = AckRun(*KEY, "p", "r", seq, rate, offset, at(t + 0.01), at(t + 0.01),
                             None, "1", broker=to)
                h.acks.append((t + 0.01 + ledger_lag, run))
                seq += rate
        # replication: every follower of the current leader, ``lag`` behind
        lead = brokers[leader].log
        for b, br in brokers.items():
            if b == leader or (epoch == 1 and b == 1 and not rejoined):
                continue  # broker 1, deposed and not yet back, copies nothing
            held = next((i for i, (x, y) in enumerate(zip(br.log, lead, strict=False)) if x != y),
                        min(len(br.log), len(lead)))  # what it holds of the leader's log
            br.log = list(lead[:max(held, len(lead) - (lag if t < stop else 0))])
        # the consume job: up to the high watermark of the leader's ISR
        isr = (1, 2, 3) if epoch != 1 or rejoined else (2, 3)
        hw = min(len(brokers[b].log) for b in isr)
        if hw > read_to:
            for o in range(read_to, hw):
                _epoch, s = lead[o]
                h.reads.append((t + read_lag, ReadRun(*KEY, o, 1, "p", "r", s,
                                                      at(t + read_lag))))
            read_to = hw
        h.logs[tick] = tuple(brokers[leader].log)
        h.hw[tick] = hw
        t = round(t + TICK, 6)
        tick += 1
    h.end = t
    return h


def answer(h: History, now: float, lo: int, hi: int) -> list[ReadRun]:
    """A direct re-read of ``[lo, hi)`` against the leader's log as it stands at ``now``,
    up to its high watermark."""
    tick = min(int(now / TICK), max(h.logs))
    log = h.logs[tick]
    out = []
    for o in range(lo, hi):
        if o < h.hw[tick]:
            out.append(ReadRun(*KEY, o, 1, "p", "r", log[o][1], at(now), "reread"))
        else:
            out.append(ReadRun(*KEY, o, 1, None, None, None, at(now), "reread", "truncated"))
    return out


def audit(h: History) -> tuple[pa.Table, list[dict]]:
    """Passes every second until well after the history: the state left and the findings."""
    schema = step_arrow_schema()
    state = schema.empty_table()
    findings: list[dict] = []
    fed = {"acks": 0, "reads": 0, "events": 0}
    acks = sorted(h.acks, key=lambda x: x[0])
    reads = sorted(h.reads, key=lambda x: x[0])
    events: list[ClusterEvent] = []
    now = 1.0
    while now < h.end + max(CFG.lookback_seconds, CFG.beyond_end_seconds) + 10:
        new_acks = [a for w, a in acks[fed["acks"]:] if w <= now]
        new_reads = [r for w, r in reads[fed["reads"]:] if w <= now]
        fed["acks"] += len(new_acks)
        fed["reads"] += len(new_reads)
        events = [e for w, e in h.events if w <= now]
        step = arrow_step_fn({KEY: events}, at(now), CFG,
                             {KEY: h.hw[min(int(now / TICK), max(h.hw))]})
        fresh = hot_table(*KEY, PartitionHot(acks=new_acks, reads=new_reads), schema)
        out = step(KEY, pa.concat_tables([state, fresh]))
        findings += _rows(out, "finding")
        asked = _rows(out, "reread")
        if asked:  # re-read now, judged again at once from the state the first kept
            answers = [r for q in asked for r in answer(h, now, q["offset"],
                                                         q["offset"] + q["count"])]
            kept = out.filter(pc.equal(out.column("row"), "hot"))
            out = step(KEY, pa.concat_tables([kept, hot_table(
                *KEY, PartitionHot(reads=answers), schema)]))
            findings += _rows(out, "finding")
        state = out.filter(pc.equal(out.column("row"), "hot"))
        now += 1.0
    return state, findings


def _rows(out: pa.Table, row: str) -> list[dict]:
    return out.filter(pc.equal(out.column("row"), row)).to_pylist()


@settings(max_examples=examples(30), deadline=None, suppress_health_check=[HealthCheck.too_slow])
@given(st.data())
def test_every_write_of_a_fail_over_is_judged_and_the_losses_are_exact(data):
    h = simulate(data.draw)
    state, findings = audit(h)
    acks = state.filter(pc.equal(state.column("kind"), "ack"))
    assert acks.num_rows == 0, f"pending after the history: {acks.to_pylist()[:3]}"
    final = h.logs[max(h.logs)]
    truth = {(a.offset + k, a.seq + k) for _, a in h.acks for k in range(a.count)
             if a.offset + k >= len(final) or final[a.offset + k][1] != a.seq + k}
    lost = {(f["offset"] + k, f["seq"] + k) for f in findings if f["kind"] in LOSS
            for k in range(f["count"])}
    assert lost == truth
    judged = [(f["seq"] + k) for f in findings if f["kind"] in LOSS | {"confirmed"}
              for k in range(f["count"])]
    assert sorted(judged) == sorted(a.seq + k for _, a in h.acks for k in range(a.count))


def _stalled(events: list[ClusterEvent], broker: int | None = 1) -> list[dict]:
    """Writes 0-9 acked at 0 s by ``broker``; the high watermark stays at 5 (the followers
    stopped fetching), the consume job reads 0-4, every re-read past it says truncated.
    Passes every second for 80 s: the loss findings."""
    from kafka_audit.jobs.core.engine import InMemoryAuditor

    auditor = InMemoryAuditor(CFG)
    acks = [AckRun(*KEY, "p", "r", 0, 10, 0, at(0), at(0), None, "1", broker=broker)]
    reads = [ReadRun(*KEY, 0, 5, "p", "r", 0, at(0.5))]
    lost = []
    for now in range(1, 80):
        answers = [ReadRun(*KEY, o, 1, "p", "r", o, at(now), "reread") if o < 5 else
                   ReadRun(*KEY, o, 1, None, None, None, at(now), "reread", "truncated")
                   for q in auditor.rereads for o in range(q.offset, q.end)]
        auditor.rereads = []
        found = auditor.run_pass(at(now), acks, [*reads, *answers],
                                 [e for e in events if e.event_time <= at(now)], {KEY: 5})
        acks, reads = [], []
        lost += [f for f in found if f.kind in LOSS]
    return lost


def test_a_high_watermark_stalled_with_no_leader_change_loses_nothing():
    """The followers down with the controller quorum: the ISR cannot shrink, the high
    watermark stays below writes the leader holds. No leader change moved leadership away
    from them (none at all, or one to the broker that acknowledged them): they wait."""
    assert _stalled([]) == []
    to_it = ClusterEvent(at(-5), *KEY, "leader_change", 1, 2, (1,), (1, 2, 3))
    assert _stalled([to_it]) == []
    # leadership moved away from it after its ack: past the log's end once old enough
    away = ClusterEvent(at(2), *KEY, "leader_change", 2, 1, (2, 3), (1, 2, 3))
    lost = _stalled([to_it, away])
    assert sorted(f.offset + k for f in lost for k in range(f.count)) == [5, 6, 7, 8, 9]
    assert all(f.ack_time == at(0) for f in lost)
