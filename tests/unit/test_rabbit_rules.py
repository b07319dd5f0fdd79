"""The RabbitMQ rules (jobs/core/rabbit_rules.py): the barrier rule, the verdicts seq by
seq, and a per-seq reference over random histories."""

from __future__ import annotations

from collections import Counter
from datetime import UTC, datetime, timedelta

from hypothesis import given, settings
from hypothesis import strategies as st

from kafka_audit.jobs.core.engine import AuditConfig, PartitionHot, step_partition
from kafka_audit.jobs.core.model import AckRun, ClusterEvent, ReadRun
from kafka_audit.jobs.core.rabbit_rules import (
    BARRIER,
    LOOKUP,
    RABBIT_LOOKUP,
    REDELIVERED,
    SETTING_OF_CAUSE,
    RabbitConfig,
    judge_rabbit,
    rabbit_cause,
    retained_rabbit_reads,
)
from kafka_audit.schemas.systems import rabbit_key
from kafka_audit.schemas.verdicts import PRIMARY, REJECTING_ERRORS, Cause

Q = rabbit_key("queue", "/", "orders")
T = datetime(2026, 11, 30, 12, tzinfo=UTC)
CFG = RabbitConfig(settle_seconds=30, margin_seconds=1, unseen_after_seconds=120)


def at(seconds: float) -> datetime:
    return T + timedelta(seconds=seconds)


def ack(seq: int, count: int, acked: float = 0, error: str | None = None,
        run: str = "r") -> AckRun:
    return AckRun(Q, 0, "p", run, seq, count, None, at(acked), at(acked), error=error)


def read(position: int, seq: int, count: int = 1, status: str = "record", when: float = 2,
         run: str = "r") -> ReadRun:
    return ReadRun(Q, 0, position, count, "p", run, seq, at(when), status=status)


def barrier(position: int, published: float, when: float) -> ReadRun:
    return ReadRun(Q, 0, position, 1, None, None, round(at(published).timestamp() * 1e6),
                   at(when), status=BARRIER)


def verdicts(findings) -> list[tuple[str, str | None, int, int]]:
    return sorted((f.kind, f.subkind, f.seq, f.count) for f in findings)


def test_without_a_settled_barrier_a_write_waits():
    acks = [ack(0, 3)]
    reads = [read(0, 0, 2)]
    assert judge_rabbit(acks, reads, at(10), CFG).acks == acks  # no barrier yet
    # published before the confirm (and its margin): the write may be behind it
    early = judge_rabbit(acks, [*reads, barrier(5, 0.5, 3)], at(100), CFG)
    assert early.findings == [] and early.pending == 3
    # published after, but read less than the settle period ago
    fresh = judge_rabbit(acks, [*reads, barrier(5, 1.5, 80)], at(100), CFG)
    assert fresh.findings == [] and fresh.pending == 3
    # nothing settles it for longer than unseen_after: counted unseen
    late = judge_rabbit(acks, reads, at(121), CFG)
    assert (late.unseen, late.oldest_unseen) == (3, at(0))


def test_a_settled_barrier_judges_each_seq_read_or_not():
    j = judge_rabbit([ack(0, 5)], [read(0, 0, 2), read(2, 3), barrier(3, 1.5, 5)], at(40),
                     CFG)
    assert verdicts(j.findings) == [("confirmed", None, 0, 2), ("confirmed", None, 3, 1),
                                    ("lost", "vanished", 2, 1), ("lost", "vanished", 4, 1)]
    lost = next(f for f in j.findings if f.kind == "lost")
    assert lost.cause == "unknown" and lost.offset is None
    assert lost.evidence["barrier_read"] == at(5).isoformat()
    assert j.acks == [] and j.pending == 0


def test_a_write_confirmed_before_its_reads_were_let_go_is_looked_up_before_judged():
    """Its ack came after the read retention: the seqs not read here are looked up in
    consumed first (a re-read naming its run), and only what the lookup cannot find
    either is lost; a read found again beside the one kept counts once."""
    late = at(CFG.read_retention_seconds)  # its confirm now older than the retention
    acks = [ack(0, 4)]
    kept = [read(0, 0), barrier(9, 1.5, 5)]
    j = judge_rabbit(acks, kept, late, CFG)
    assert j.findings == [] and j.acks == acks and j.pending == 4
    assert [(q.topic, q.offset, q.end, q.reason, q.producer_id, q.run_id)
            for q in j.rereads] == [(Q, 0, 4, RABBIT_LOOKUP, "p", "r")]
    looked = ReadRun(Q, 0, -1, 4, "p", "r", 0, late, source="reread", status=LOOKUP)
    found = [ReadRun(Q, 0, p, 1, "p", "r", s, at(2), source="reread")
             for p, s in ((0, 0), (1, 1), (3, 3))]
    j = judge_rabbit(acks, [*kept, *found, looked], late, CFG)
    assert verdicts(j.findings) == [("confirmed", None, 0, 2), ("confirmed", None, 3, 1),
                                    ("lost", "vanished", 2, 1)]
    assert j.rereads == [] and j.pending == 0
    # a write whose reads are all here needs no lookup; a young one neither
    assert judge_rabbit([ack(0, 1)], kept, late, CFG).rereads == []
    assert judge_rabbit(acks, kept, at(40), CFG).rereads == []


def test_a_write_that_was_not_confirmed_is_judged_by_kafkas_definition():
    acks = [ack(0, 2, error="UNCONFIRMED"), ack(2, 2, error="NACK"), ack(4, 2, error="RETURNED")]
    reads = [read(0, 0), read(1, 2), read(2, 4), barrier(3, 2, 5)]
    assert "NACK" in REJECTING_ERRORS and "RETURNED" in REJECTING_ERRORS
    assert verdicts(judge_rabbit(acks, reads, at(40), CFG).findings) == [
        ("indeterminate", "absent", 1, 1), ("indeterminate", "present", 0, 1),
        ("indeterminate", "present", 2, 1), ("indeterminate", "present", 4, 1),
        ("rejected", None, 3, 1), ("rejected", None, 5, 1)]


def test_a_redelivery_is_presence_and_a_second_first_delivery_a_duplicate():
    reads = [read(0, 0, 3), read(3, 1, status=REDELIVERED), read(4, 2), barrier(5, 2, 5)]
    j = judge_rabbit([ack(0, 3)], reads, at(40), CFG)
    assert verdicts(j.findings) == [("confirmed", None, 0, 3), ("duplicate", None, 2, 1)]
    assert next(f for f in j.findings if f.kind == "duplicate").evidence == {"read_at": [2, 4]}


def test_a_seq_read_after_a_higher_one_of_its_run_is_reordered():
    reads = [read(0, 5, 5), read(5, 0, 5), barrier(10, 2, 5)]
    j = judge_rabbit([ack(0, 10)], reads, at(40), CFG)
    assert verdicts(j.findings) == [("confirmed", None, 0, 10), ("reordered", None, 0, 5)]


def test_reads_and_barriers_a_pending_write_needs_are_kept():
    pending = [ack(0, 2, acked=1000)]
    old = [read(0, 0, when=0), read(1, 9, when=0), barrier(2, 999, 0), barrier(3, 1001, 0)]
    kept = retained_rabbit_reads(old, pending, at(2000), CFG)
    # its own seq, and the barrier published after its confirm: not the others
    assert kept == [old[0], old[3]]
    assert retained_rabbit_reads(old, [], at(100), CFG) == old  # within the retention


def test_the_engine_judges_a_queue_once_and_lets_the_judged_go():
    cfg = AuditConfig(settle_seconds=30, rabbit_margin_seconds=1)
    hot = PartitionHot(acks=[ack(0, 3)], reads=[read(0, 0, 2), barrier(2, 2, 5)])
    first = step_partition(Q, hot, [], at(40), cfg)
    assert verdicts(first.findings) == [("confirmed", None, 0, 2), ("lost", "vanished", 2, 1)]
    again = step_partition(Q, first.hot, [], at(80), cfg)
    assert again.findings == [] and again.hot.acks == [] and again.pending == 0


# ---- random histories against a per-seq reference ------------------------------------

OUTCOMES = (None, None, None, "UNCONFIRMED", "NACK", "RETURNED")


@st.composite
def histories(draw):
    """One producer run of up to 40 seqs in runs of random outcomes; a random subset of the
    seqs read in a random order, some twice, some redelivered; a barrier that settles all
    of them, or not."""
    n = draw(st.integers(1, 40))
    cuts = sorted(set(draw(st.lists(st.integers(1, n - 1), max_size=6)))) if n > 1 else []
    bounds = [0, *cuts, n]
    acks = [ack(lo, hi - lo, acked=draw(st.floats(0, 5)), error=draw(st.sampled_from(OUTCOMES)))
            for lo, hi in zip(bounds, bounds[1:], strict=False)]
    seqs = draw(st.lists(st.integers(0, n - 1), max_size=60))
    statuses = draw(st.lists(st.sampled_from(["record", "record", REDELIVERED]),
                             min_size=len(seqs), max_size=len(seqs)))
    reads = [read(p, s, status=st_) for p, (s, st_) in enumerate(zip(seqs, statuses,
                                                                     strict=True))]
    if draw(st.booleans()):
        reads.append(barrier(len(reads), 7, 8))
    return acks, draw(st.permutations(reads))


def reference(acks: list[AckRun], reads: list[ReadRun], now: datetime) -> Counter:
    """Per seq, straight from the rule's words: (kind, subkind, seq) of each write, and its
    annotations."""
    settled = any(r.status == BARRIER and r.read_time <= now - timedelta(seconds=30)
                  for r in reads)
    out: Counter = Counter()
    firsts = sorted((r for r in reads if r.status == "record"), key=lambda r: r.offset)
    for a in acks:
        for s in range(a.seq, a.seq + a.count):
            if not settled:
                out["pending", None, s] += 1
                continue
            present = any(r.seq == s and r.status != BARRIER for r in reads)
            if a.error is None:
                out[("confirmed", None, s) if present else ("lost", "vanished", s)] += 1
            elif present:
                out["indeterminate", "present", s] += 1
            elif a.error in REJECTING_ERRORS:
                out["rejected", None, s] += 1
            else:
                out["indeterminate", "absent", s] += 1
            if sum(r.seq == s for r in firsts) > 1:
                out["duplicate", None, s] += 1
            first = next((r for r in firsts if r.seq == s), None)
            if first is not None and any(r.seq > s for r in firsts if r.offset < first.offset):
                out["reordered", None, s] += 1
    return out


@settings(max_examples=300, deadline=None)
@given(histories())
def test_the_rules_equal_the_per_seq_reference(history):
    acks, reads = history
    now = at(60)
    j = judge_rabbit(acks, reads, now, CFG)
    got: Counter = Counter()
    for f in j.findings:
        for s in range(f.seq, f.seq + f.count):
            got[f.kind, f.subkind, s] += 1
    for a in j.acks:
        for s in range(a.seq, a.seq + a.count):
            got["pending", None, s] += 1
    assert got == reference(acks, reads, now)
    # each write gets exactly one verdict (or stays pending)
    primary = Counter(s for (k, _, s), n in got.items() for _ in range(n)
                      if k in PRIMARY or k == "pending")
    assert primary == Counter(range(sum(a.count for a in acks)))


# ---- causes ----------------------------------------------------------------------------

def ev(seconds: float, kind: str, leader: int | None = None) -> ClusterEvent:
    return ClusterEvent(at(seconds), Q, 0, kind, leader)


def transient(seq: int = 0) -> AckRun:
    return AckRun(Q, 0, "p", "r", seq, 1, None, at(0), at(0), acks="transient")


LED_BY_1 = [ev(-60, "first_seen", 1)]


def test_each_cause_from_the_watchers_events():
    persistent = ack(0, 1)
    assert rabbit_cause(transient(), [*LED_BY_1, ev(5, "rabbit_node_down", 1),
                                      ev(20, "rabbit_node_up", 1)]) == \
        "non-persistent message across a restart"
    # a persistent message across the same restart: not that
    assert rabbit_cause(persistent, [*LED_BY_1, ev(5, "rabbit_node_down", 1),
                                     ev(20, "rabbit_node_up", 1)]) == "unknown"
    assert rabbit_cause(persistent, [*LED_BY_1, ev(5, "rabbit_partition", 1),
                                     ev(12, "rabbit_partition_end", 1),
                                     ev(13, "rabbit_node_up", 1)]) == "partition loser restarted"
    # another node cut off and restarted: not the queue's leader's side
    assert rabbit_cause(persistent, [*LED_BY_1, ev(5, "rabbit_partition", 3),
                                     ev(13, "rabbit_node_up", 3)]) == "unknown"
    # published through node 3, cut off with it while the watcher saw node 2 lead (the
    # other side's view): node 3 restarted when the cut healed (autoheal's loser)
    through_3 = AckRun(Q, 0, "p", "r", 0, 1, None, at(0), at(0), broker=3)
    autoheal = [*LED_BY_1, ev(-1, "leader_change", 2), ev(1, "rabbit_partition", 2),
                ev(1, "rabbit_partition", 3), ev(9, "rabbit_node_down", 3),
                ev(12, "rabbit_node_up", 3)]
    assert rabbit_cause(through_3, autoheal) == "partition loser restarted"
    # under pause_minority node 3 pauses and comes back (restarted to the watcher) while
    # the majority promoted a mirror that lacked the write: the promotion is the cause
    assert rabbit_cause(through_3, [*autoheal, ev(2, "unclean_election", 2)]) == \
        "unsynchronised mirror promoted"
    # autoheal chose node 3's side (more clients): the majority's copy gave way to node
    # 3's, unsynchronised, as the cut healed; a write through node 1 is the loser's
    through_1 = AckRun(Q, 0, "p", "r", 0, 1, None, at(0), at(0), broker=1)
    won_by_3 = [*LED_BY_1, ev(1, "rabbit_partition", 1), ev(1, "rabbit_partition", 3),
                ev(8, "rabbit_partition_end", 1), ev(8, "rabbit_partition_end", 3),
                ev(8.3, "leader_change", 3), ev(8.3, "unclean_election", 3)]
    assert rabbit_cause(through_1, won_by_3) == "partition loser restarted"
    # the same cut, node 3 never restarted: not that
    assert rabbit_cause(through_3, autoheal[:-2]) == "unknown"
    # a cut begun long before the confirm and still on: that too; one healed before: not
    long_cut = [*LED_BY_1, ev(-30, "rabbit_partition", 3), ev(9, "rabbit_partition_end", 3),
                ev(12, "rabbit_node_up", 3)]
    assert rabbit_cause(through_3, long_cut) == "partition loser restarted"
    healed = [*LED_BY_1, ev(-30, "rabbit_partition", 3), ev(-20, "rabbit_partition_end", 3),
              ev(12, "rabbit_node_up", 3)]
    assert rabbit_cause(through_3, healed) == "unknown"
    assert rabbit_cause(persistent, [*LED_BY_1, ev(5, "leader_change", 2),
                                     ev(5, "unclean_election", 2)]) == \
        "unsynchronised mirror promoted"
    assert rabbit_cause(persistent, [*LED_BY_1, ev(5, "rabbit_queue_gone")]) == \
        "queue lost with its node"
    # events long before the write explain nothing
    assert rabbit_cause(persistent, [ev(-60, "first_seen", 1), ev(-30, "unclean_election", 2)]
                        ) == "unknown"


def test_a_lost_write_carries_its_cause():
    events = [*LED_BY_1, ev(3, "rabbit_node_down", 1), ev(4, "rabbit_node_up", 1)]
    j = judge_rabbit([transient()], [barrier(0, 6, 8)], at(60), CFG, events)
    assert [(f.kind, f.cause) for f in j.findings] == [
        ("lost", "non-persistent message across a restart")]
    # and the setting that let it be lost
    assert j.findings[0].evidence["setting"].startswith("delivery_mode 1 (transient)")
    # every RabbitMQ cause but unknown names one
    assert set(SETTING_OF_CAUSE) == {str(c) for c in (
        Cause.transient_restart, Cause.partition_loser, Cause.unsynced_promotion,
        Cause.queue_lost)}
