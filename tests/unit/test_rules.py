from datetime import UTC, datetime, timedelta

from hypothesis import given
from hypothesis import strategies as st

from kafka_audit.jobs.model import ClusterEvent
from kafka_audit.jobs.rules import judge_partition, likely_cause, lost_write_cases, settled_frontier

from .histories import ack, read

T0 = datetime(2026, 1, 1, tzinfo=UTC)


def kinds(findings):
    return {f.kind: f.count for f in findings if f.kind in ("confirmed", "pending")}


def test_consistent_history_confirms_every_write():
    acks = [ack(0, o, o) for o in range(3)]
    reads = [read(0, o, o) for o in range(3)]
    out = judge_partition(acks, reads, settled=3)
    assert [f for f in out if f.kind == "lost"] == []
    assert kinds(out) == {"confirmed": 3, "pending": 0}


def test_overwritten_write_is_lost_with_what_was_read_there():
    acks = [ack(0, 0, 0), ack(0, 1, 1)]
    reads = [read(0, 0, 0), read(0, 1, 7, producer="other")]
    lost = lost_write_cases(acks, reads, {("t", 0): 2})
    assert len(lost) == 1
    f = lost[0]
    assert (f.subkind, f.offset, f.seq) == ("overwritten", 1, 1)
    assert f.evidence["read_at_offset"] == [["other", "r", 7]]


def test_foreign_record_at_the_acked_offset_is_an_overwrite():
    lost = lost_write_cases([ack(0, 0, 0)], [read(0, 0, None)], {("t", 0): 1})
    assert [(f.subkind, f.evidence["read_at_offset"]) for f in lost] == [("overwritten", [None])]


def test_vanished_write_needs_the_frontier_past_it():
    acks = [ack(0, 0, 0), ack(0, 1, 1), ack(0, 2, 2)]
    reads = [read(0, 0, 0), read(0, 2, 2)]
    lost = lost_write_cases(acks, reads, {("t", 0): 3})
    assert [(f.subkind, f.offset) for f in lost] == [("vanished", 1)]


def test_unread_tail_is_pending_not_lost():
    acks = [ack(0, 0, 0), ack(0, 1, 1)]
    out = judge_partition(acks, [read(0, 0, 0)], settled=1)
    assert [f for f in out if f.kind == "lost"] == []
    assert kinds(out) == {"confirmed": 1, "pending": 1}


def test_same_stamp_elsewhere_does_not_confirm_the_acked_offset():
    # the auditor judges the acked place: a copy at another offset is not that write
    lost = lost_write_cases([ack(0, 0, 5)], [read(0, 1, 5)], {("t", 0): 2})
    assert [(f.subkind, f.offset) for f in lost] == [("vanished", 0)]


def test_partitions_are_judged_apart():
    acks = [ack(0, 0, 0), ack(1, 0, 1)]
    reads = [read(0, 0, 0), read(1, 0, 9)]
    lost = lost_write_cases(acks, reads, {("t", 0): 1, ("t", 1): 1})
    assert [(f.partition, f.seq) for f in lost] == [(1, 1)]


def test_settled_frontier_needs_the_settle_period():
    obs = [(10, T0), (20, T0 + timedelta(seconds=20)), (30, T0 + timedelta(seconds=50))]
    assert settled_frontier(obs, T0 + timedelta(seconds=30), 30) == 10
    assert settled_frontier(obs, T0 + timedelta(seconds=55), 30) == 20
    assert settled_frontier(obs, T0 + timedelta(seconds=5), 30) == 0
    assert settled_frontier(obs, T0 + timedelta(seconds=50), 0) == 30


def test_cause_acks1_failover_needs_a_leader_change():
    a = ack(0, 0, 0, acks="1")
    a = a.__class__(**{**a.__dict__, "ack_time": T0})
    change = ClusterEvent(T0 + timedelta(seconds=2), "t", 0, "leader_change", 2, 1)
    assert likely_cause(a, [change]) == "acks=1 fail-over"
    assert likely_cause(a, []) == "unknown"
    other_partition = ClusterEvent(T0, "t", 1, "leader_change", 2, 1)
    assert likely_cause(a, [other_partition]) == "unknown"


@given(st.lists(st.tuples(st.integers(0, 30), st.booleans(), st.booleans()), max_size=40),
       st.integers(0, 35))
def test_every_ack_gets_exactly_one_verdict(spec, settled):
    """confirmed + pending + lost == acks, and lost is exactly the brute-force set."""
    acks, reads = [], []
    for seq, (offset, was_read, overwritten) in enumerate(dict(
            (o, (o, r, w)) for o, r, w in spec).values()):
        acks.append(ack(0, offset, seq))
        if was_read:
            reads.append(read(0, offset, seq + 1000 if overwritten else seq))
    out = judge_partition(acks, reads, settled)
    lost = {(f.offset, f.seq) for f in out if f.kind == "lost"}
    counts = kinds(out) if acks else {"confirmed": 0, "pending": 0}
    assert counts.get("confirmed", 0) + counts.get("pending", 0) + len(lost) == len(acks)
    read_stamps = {(r.offset, r.seq) for r in reads}
    expected = {(a.offset, a.seq) for a in acks
                if (a.offset, a.seq) not in read_stamps and a.offset < settled}
    assert lost == expected
