"""One tiny hand-made history per verdict kind, consistent and violating, with the
exact findings expected (in the manner of Jepsen's kafka checker tests)."""

from dataclasses import replace

from hypothesis import given
from hypothesis import strategies as st

from kafka_audit.jobs.core.engine import AuditConfig, InMemoryAuditor
from kafka_audit.jobs.core.model import AckRun, ClusterEvent
from kafka_audit.jobs.core.rules import (
    SUSPECT,
    _Cover,
    _Intervals,
    likely_cause,
    merge_spans,
    partition_events,
    reorder_witness,
    settled_frontier,
)

from ..support.histories import ack, at, leader_change, read

CFG = AuditConfig(settle_seconds=10, lookback_seconds=5, unseen_after_seconds=60,
                  read_retention_seconds=100)


def audit(*passes, cfg=CFG, log_end=None):
    """Run passes ``(t, acks, reads, events)``; return the auditor. ``log_end``: the log end
    of partition 0 every pass sees (the horizon of failed writes)."""
    a = InMemoryAuditor(cfg)
    for t, acks, reads, events in passes:
        a.run_pass(at(t), acks, reads, events,
                   None if log_end is None else {("t", 0): log_end})
    return a


def table(findings):
    return sorted((f.kind, f.subkind, f.offset, f.seq, f.count) for f in findings)


def test_settled_frontier_needs_the_settle_period():
    obs = [(5, at(0)), (9, at(4)), (9, at(8)), (12, at(20))]
    assert settled_frontier(obs, at(3), 10) == (0, None)
    assert settled_frontier(obs, at(14), 10) == (9, at(4))
    assert settled_frontier(obs, at(18), 10) == (9, at(8))  # the latest sighting counts


def test_a_run_confirmed_by_a_read_run_is_one_finding():
    a = audit((0, [ack(0, 0, count=100)], [read(0, 0, count=100)], []), (11, [], [], []))
    assert table(a.findings) == [("confirmed", None, 0, 0, 100)]
    assert a.hot[("t", 0)].acks == []


def test_nothing_is_judged_before_it_settles():
    a = audit((0, [ack(0, 0, count=3)], [read(0, 0, count=3)], []), (9, [], [], []))
    assert a.findings == []
    assert a.status[("t", 0)].pending == 3


def test_the_settle_period_runs_from_the_read_not_from_the_pass_that_saw_it():
    """The consume job read the run at 1 s; the first pass to see it ran at 6 s (a slow
    commit, a pass in between). The frontier stood past it from 1 s: settled at 11 s."""
    early = audit((0, [ack(0, 0, count=3)], [], []), (6, [], [read(0, 0, count=3, t=1)], []),
                  (10.5, [], [], []))
    assert early.findings == []  # 9.5 s after the read: not yet
    early.run_pass(at(11.5), [], [], [])
    assert table(early.findings) == [("confirmed", None, 0, 0, 3)]
    # a read stamped after the pass that sees it (clocks, a batch folded during the
    # pass) counts from the pass, never from the future
    late = audit((0, [ack(0, 0, count=3)], [read(0, 0, count=3, t=30)], []),
                 (10.5, [], [], []))
    assert table(late.findings) == [("confirmed", None, 0, 0, 3)]


def test_overwritten_needs_a_reread_then_is_lost():
    a = audit((0, [ack(0, 0, count=2, acks="1")], [read(0, 0), read(1, 7, producer="q")],
               [leader_change(0.5)]),
              (11, [], [], []))
    assert table(a.findings) == [("confirmed", None, 0, 0, 1)]
    # asked for while it settles (another record read at its offset), and again once
    # settled: the re-read the first asked for never came
    assert [(r.offset, r.end, r.reason) for r in a.rereads] == [
        (1, 2, SUSPECT), (1, 2, "loss needs a direct re-read")]
    a.run_pass(at(12), [], [read(1, 7, producer="q", t=12, source="reread")], [])
    lost = [f for f in a.findings if f.kind == "lost"]
    assert table(lost) == [("lost", "overwritten", 1, 1, 1)]
    assert lost[0].cause == "acks=1 fail-over"
    assert lost[0].evidence["seen"][-1][3] == ["q", "r", 7]


def test_a_write_that_looks_lost_is_read_again_before_it_settles_and_judged_when_it_does():
    """The consume job read another record at an acked offset (an acks=1 fail-over): the
    pass asks for a re-read at once and says when the write settles (that read plus the
    settle period); once re-read it asks no more, and the pass at that instant decides on
    the view it has, with no second read."""
    a = audit((2, [ack(0, 0, count=2, acks="1")],
               [read(0, 0, t=1), read(1, 7, producer="q", t=1.5)], [leader_change(0.5)]))
    assert [(r.offset, r.end, r.reason) for r in a.rereads] == [(1, 2, SUSPECT)]
    assert a.status[("t", 0)].suspects_settle == at(11.5) and a.findings == []
    a.run_pass(at(3), [], [read(1, 7, producer="q", t=2.5, source="reread")], [])
    assert len(a.rereads) == 1 and a.status[("t", 0)].suspects_settle == at(11.5)
    a.run_pass(at(11.5), [], [], [])
    assert table(a.findings) == [("confirmed", None, 0, 0, 1), ("lost", "overwritten", 1, 1, 1)]
    assert len(a.rereads) == 1 and a.status[("t", 0)].suspects_settle is None
    # the stream read the write itself, or a copy of another run: nothing looks lost
    b = audit((2, [ack(0, 0, count=2)], [read(0, 0, count=2, t=1)], []))
    c = audit((2, [ack(0, 0, count=2)], [read(0, 0, count=2, t=1, run="r2")], []))
    assert b.rereads == [] and b.status[("t", 0)].suspects_settle is None
    assert [(r.offset, r.end) for r in c.rereads] == [(0, 2)]


def test_consumer_miss_is_not_a_loss():
    # the stream never read offset 1; the direct re-read finds the write there
    a = audit((0, [ack(0, 0, count=3)], [read(0, 0), read(2, 2)], []), (11, [], [], []))
    assert [(r.offset, r.end) for r in a.rereads] == [(1, 2)]
    a.run_pass(at(12), [], [read(1, 1, t=12, source="reread")], [])
    assert table(a.findings) == [("confirmed", None, 0, 0, 1), ("confirmed", None, 1, 1, 1),
                                 ("confirmed", None, 2, 2, 1)]


def test_vanished_when_the_reread_finds_no_record():
    a = audit((0, [ack(0, 0, count=3)], [read(0, 0), read(2, 2)], []),
              (11, [], [read(1, None, t=11, source="reread", status="absent")], []),
              (12, [], [], []))
    assert ("lost", "vanished", 1, 1, 1) in table(a.findings)
    assert len([f for f in a.findings if f.kind == "confirmed"]) == 2


def test_lost_after_being_seen_needs_a_read_after_the_leader_change():
    # the write was read at offset 0 from the old leader; an unclean election replaced it
    a = audit((0, [ack(0, 0)], [read(0, 0, t=1)], [leader_change(2, leader=3,
                                                                 previous_isr=(1, 2))]),
              (11, [], [], []))
    assert a.findings == [] and [(r.offset, r.reason[:13]) for r in a.rereads] == [
        (0, "leader change")]
    a.run_pass(at(12), [], [read(0, 9, producer="q", t=12, source="reread")], [])
    assert table(a.findings) == [("lost_after_seen", None, 0, 0, 1)]
    assert a.findings[0].cause == "unclean election"


def test_read_then_cut_off_by_a_shorter_log_is_lost_after_being_seen():
    a = audit((0, [ack(0, 0, count=2)], [read(0, 0, count=2, t=1)], [leader_change(2)]),
              (11, [], [read(0, 0, t=11, source="reread"),
                        read(1, None, t=11, source="reread", status="truncated")], []))
    assert table(a.findings) == [("confirmed", None, 0, 0, 1), ("lost_after_seen", None, 1, 1, 1)]


def test_never_read_and_past_the_log_end_is_vanished():
    a = audit((0, [ack(0, 0, count=2)], [read(0, 0), read(2, None)], []),
              (11, [], [read(1, None, t=11, source="reread", status="truncated")], []))
    assert ("lost", "vanished", 1, 1, 1) in table(a.findings)


def test_compacted_after_being_read_is_not_lost():
    a = audit((0, [ack(0, 0)], [read(0, 0, t=1), read(1, None)], []),
              (11, [], [read(0, None, t=11, source="reread", status="absent")], []),
              cfg=AuditConfig(settle_seconds=10, compacted_topics=frozenset({"t"})))
    assert table(a.findings) == [("confirmed", None, 0, 0, 1)]


def test_read_then_no_record_on_a_topic_not_compacted_is_lost_after_being_seen():
    # the new leader's log holds a transaction marker where w was read: w was destroyed
    a = audit((0, [ack(0, 0)], [read(0, 0, t=1), read(1, None)], []),
              (11, [], [read(0, None, t=11, source="reread", status="absent")], []))
    assert table(a.findings) == [("lost_after_seen", None, 0, 0, 1)]


def test_read_then_no_record_waits_while_the_cleanup_policy_is_unknown():
    a = audit((0, [ack(0, 0)], [read(0, 0, t=1), read(1, None)], []),
              (11, [], [read(0, None, t=11, source="reread", status="absent")], []),
              cfg=AuditConfig(settle_seconds=10, unknown_policy_topics=frozenset({"t"})))
    assert a.findings == [] and a.status[("t", 0)].pending == 1


def test_a_write_still_there_after_the_leader_change_is_confirmed():
    a = audit((0, [ack(0, 0)], [read(0, 0, t=1)], [leader_change(2)]),
              (11, [], [read(0, 0, t=11, source="reread")], []))
    assert table(a.findings) == [("confirmed", None, 0, 0, 1)]


def test_duplicate_from_a_retry():
    # seq 3 reached the log twice (offsets 4 and 5); the producer's ack names 5
    a = audit((0, [ack(4, 2), ack(5, 3)], [read(3, 3), read(4, 2), read(5, 3)], []),
              (11, [], [], []))
    dup = [f for f in a.findings if f.kind == "duplicate"]
    assert table(dup) == [("duplicate", None, 5, 3, 1)]
    assert dup[0].evidence["also_read_at"] == [3]
    assert table(f for f in a.findings if f.kind == "confirmed") == [
        ("confirmed", None, 4, 2, 1), ("confirmed", None, 5, 3, 1)]


def test_reordered_when_seq_and_offset_order_disagree():
    # seq 0 was retried and landed after seq 1
    a = audit((0, [ack(0, 1), ack(1, 0), ack(2, 2)], [read(0, 1), read(1, 0), read(2, 2)], []),
              (11, [], [], []))
    r = [f for f in a.findings if f.kind == "reordered"]
    assert table(r) == [("reordered", None, 0, 1, 1)]
    assert (r[0].evidence["lower_seq"], r[0].evidence["at_higher_offset"]) == (0, 1)


def test_reorder_against_a_write_judged_in_an_earlier_pass():
    a = audit((0, [ack(5, 0)], [read(5, 0)], []), (11, [], [], []),
              (12, [ack(3, 4, t=12)], [read(3, 4, t=12)], []), (23, [], [], []))
    assert table(f for f in a.findings if f.kind == "reordered") == [("reordered", None, 3, 4, 1)]


def test_a_reorder_witness_acked_at_two_offsets_is_named_whatever_the_order():
    # seq 5 acked at offsets 20 and 22 (a retry's two reports), both above seq 6 at 10: the
    # witness is the lower offset, in whichever order the runs come (a pass's rows do not
    # keep one order: the driver passes some state through as Arrow)
    runs = [ack(20, 5), ack(22, 5)]
    assert reorder_witness(10, 6, runs) == reorder_witness(10, 6, runs[::-1]) == (5, 20)


def test_in_order_writes_are_not_reordered():
    a = audit((0, [ack(0, 0, 2), ack(2, 5, 3)], [read(0, 0, 2), read(2, 5, 3)], []),
              (11, [], [], []))
    assert [f for f in a.findings if f.kind == "reordered"] == []


def test_failed_yet_in_the_log_is_indeterminate_present():
    a = audit((0, [ack(None, 4, error="REQUEST_TIMED_OUT")], [read(7, 4)], []),
              (11, [], [], []), log_end=8)
    assert table(a.findings) == [("indeterminate", "present", None, 4, 1)]
    assert a.findings[0].evidence["found_at"] == [7]


def test_failed_and_absent_is_a_failed_write_not_a_loss():
    a = audit((0, [ack(None, 4, error="_MSG_TIMED_OUT")], [read(0, None)], []),
              (11, [], [], []), log_end=1)
    assert table(a.findings) == [("indeterminate", "absent", None, 4, 1)]


def test_not_enough_replicas_is_rejected():
    a = audit((0, [ack(None, 0, count=5, error="NOT_ENOUGH_REPLICAS")],
               [read(0, None)], []), (11, [], [], []), log_end=1)
    assert table(a.findings) == [("rejected", None, None, 0, 5)]


def test_failed_write_waits_until_the_settled_frontier_passes_its_horizon():
    # the report came when the log ended at 6; the consumer is stuck at 1: no verdict yet,
    # the write may sit at offsets 1..5, unread
    a = InMemoryAuditor(CFG)
    a.run_pass(at(0), [], [read(0, None)], [], {("t", 0): 6})
    a.run_pass(at(1), [ack(None, 4, error="NOT_ENOUGH_REPLICAS", t=0.5)], [], [],
               {("t", 0): 6})
    a.run_pass(at(30), [], [], [], {("t", 0): 9})
    assert a.findings == [] and a.status[("t", 0)].pending == 1
    # the consumer reads on: the write was there after all
    a.run_pass(at(31), [], [read(1, None, count=3, t=31), read(4, 4, t=31),
                            read(5, None, count=4, t=31)], [], {("t", 0): 9})
    a.run_pass(at(42), [], [], [], {("t", 0): 9})
    assert table(a.findings) == [("indeterminate", "present", None, 4, 1)]


def test_failed_write_without_a_known_log_end_waits():
    a = audit((0, [ack(None, 4, error="_MSG_TIMED_OUT")], [read(0, None)], []),
              (11, [], [], []))
    assert a.findings == [] and a.status[("t", 0)].pending == 1


def test_a_success_without_an_offset_is_judged_by_its_stamp():
    # acks=0: librdkafka reports success but no offset
    a = audit((0, [ack(None, 3, count=2, acks="0")], [read(0, 3), read(1, None)], []),
              (11, [], [], []), log_end=2)
    assert table(a.findings) == [("indeterminate", "absent", None, 4, 1),
                                 ("indeterminate", "present", None, 3, 1)]
    assert {f.evidence["error"] for f in a.findings} == {"NO_OFFSET"}


def test_unknown_cleanup_policy_holds_a_verdict_that_rests_on_it():
    cfg = AuditConfig(settle_seconds=10, unknown_policy_topics=frozenset({"t"}))
    a = audit((0, [ack(0, 0)], [read(1, None)], []),
              (11, [], [read(0, None, t=11, source="reread", status="absent")], []),
              (12, [], [], []), cfg=cfg)
    assert a.findings == [] and a.status[("t", 0)].pending == 1


def test_retention_is_unverified_not_lost():
    a = audit((0, [ack(0, 0, count=2)], [read(2, None)], []),
              (11, [], [read(0, None, count=2, t=11, source="reread", status="expired")], []))
    assert table(a.findings) == [("unverified", "retention", 0, 0, 2)]


def test_compacted_topic_absence_is_unverified_not_lost():
    cfg = AuditConfig(settle_seconds=10, compacted_topics=frozenset({"t"}))
    a = audit((0, [ack(0, 0)], [read(1, None)], []),
              (11, [], [read(0, None, t=11, source="reread", status="absent")], []), cfg=cfg)
    assert table(a.findings) == [("unverified", "compacted", 0, 0, 1)]


def test_unread_tail_is_unseen_after_the_bound():
    a = audit((0, [ack(0, 0, count=5)], [read(0, 0, count=2)], []), (30, [], [], []))
    assert a.status[("t", 0)].unseen == 0
    a.run_pass(at(70), [], [], [])
    s = a.status[("t", 0)]
    assert (s.pending, s.unseen, s.oldest_unseen) == (3, 3, at(0))


def test_hot_state_keeps_only_what_pending_writes_need():
    a = audit((0, [ack(0, 0, count=10), ack(10, 10, count=10)],
               [read(0, 0, count=10, t=1), read(10, 10, count=5, t=1)], []),
              (11, [], [], []), (200, [], [], []))
    hot = a.hot[("t", 0)]
    assert [(x.offset, x.count) for x in hot.acks] == [(15, 5)]  # never read: still pending
    assert hot.reads == []  # old, and no pending write needs them
    a.run_pass(at(201), [], [read(15, 15, count=5, t=201)], [])
    a.run_pass(at(212), [], [], [])
    assert a.hot[("t", 0)].acks == []
    a.run_pass(at(400), [], [], [])
    assert a.hot[("t", 0)].acks == [] and a.hot[("t", 0)].reads == []


def test_likely_cause_from_the_events_after_the_ack():
    def cause(a, events):
        return likely_cause(a, events, at(100))

    lost = ack(0, 0, acks="all")
    assert cause(lost, []) == "unknown"
    assert cause(lost, [leader_change(1, leader=3, previous_isr=(1, 2))]) == "unclean election"
    # elected from the ISR that held the acks=all write, yet without it: every in-sync
    # copy went (a power cut of them all)
    assert cause(lost, [leader_change(1, leader=2, previous_isr=(1, 2))]) == \
        "simultaneous crash"
    assert cause(lost, [leader_change(1, leader=2, previous=1, previous_isr=(1,))]) \
        == "ISR shrunk to leader then leader lost"
    # the sole in-sync replica elected again (a newer epoch, or back from offline) and the
    # write gone: it came back without what it had acknowledged alone
    again = ClusterEvent(at(1), "t", 0, "leader_reelected", 1, 1, (1,), (1,))
    assert cause(lost, [again]) == "disk loss"
    offline = ClusterEvent(at(1), "t", 0, "offline", -1, 1, (1,), (1,))
    back = ClusterEvent(at(3), "t", 0, "leader_change", 1, -1, (1,), (1,))
    assert cause(lost, [offline, back]) == "disk loss"
    other = ClusterEvent(at(3), "t", 0, "leader_change", 2, -1, (2,), (1,))
    assert cause(lost, [offline, other]) == "ISR shrunk to leader then leader lost"
    # the whole ISR elected again at a newer epoch, the write gone: all of them lost it
    everyone = ClusterEvent(at(1), "t", 0, "leader_reelected", 1, 1, (1, 2, 3), (1, 2, 3))
    assert cause(lost, [everyone]) == "simultaneous crash"
    assert cause(lost, [leader_change(-9, leader=3, previous_isr=(1, 2))]) == "unknown"
    assert cause(ack(0, 0, acks="1"), [leader_change(1)]) == "acks=1 fail-over"


def fenced(t: float, broker: int) -> ClusterEvent:
    return ClusterEvent(at(t), "", -1, "broker_fenced", broker=broker)


def test_a_power_cut_is_told_from_a_lost_disk_by_who_went_down():
    """The exact timeline of a power cut: the restarted nodes are fenced one by one, the
    ISR shrinks to the leader, it goes offline and the same leader returns. That shape is
    a lost disk under a sole in-sync replica too; who went down tells them apart."""
    lost = ack(0, 0, acks="all", t=0)
    replicas = (1, 2, 3)
    shrink = ClusterEvent(at(5), "t", 0, "isr_shrink", 1, 1, (1,), (1, 2, 3), replicas)
    offline = ClusterEvent(at(6), "t", 0, "offline", -1, 1, (1,), (1,), replicas)
    back = ClusterEvent(at(8), "t", 0, "leader_change", 1, -1, (1,), (1,), replicas)
    shape = [shrink, offline, back]
    everyone = [fenced(5, 2), fenced(5, 3), fenced(6, 1)]
    assert likely_cause(lost, [*shape, *everyone], at(100)) == "simultaneous crash"
    # only the leader went down (its followers were cut off, not down): its disk
    assert likely_cause(lost, [*shape, fenced(6, 1)], at(100)) == "disk loss"
    # the others went down only after the leader was back: not part of it
    late = [fenced(6, 1), fenced(9, 2), fenced(9, 3)]
    assert likely_cause(lost, [*shape, *late], at(100)) == "disk loss"
    # or before the write was acknowledged
    early = [fenced(-20, 2), fenced(-20, 3), fenced(6, 1)]
    assert likely_cause(lost, [*shape, *early], at(100)) == "disk loss"
    # the replicas unknown: the brokers the partition's changes named
    bare = [ClusterEvent(e.event_time, "t", 0, e.kind, e.leader, e.previous_leader, e.isr,
                         e.previous_isr) for e in shape]
    assert likely_cause(lost, [*bare, *everyone], at(100)) == "simultaneous crash"
    # the in-memory audit gives every partition the cluster-wide rows
    key = ("t", 0)
    assert partition_events([*shape, *everyone, blind(1, 2),
                             ClusterEvent(at(1), "u", 0, "offline")], key) == \
        [*shape, *everyone, blind(1, 2)]


def test_a_power_cut_whose_leader_moved_before_every_copy_went():
    """The metadata log of a real power cut (CI, 2026-11-26), in the log's order, one
    batch at restart: broker 3 fenced (ISR 1,2), broker 1 fenced (the lead moves to 2,
    which had the write), broker 2 fenced (offline), and 2 back leading without it.
    Every in-sync copy went: a simultaneous crash, though the ISR was 2 alone when it
    came back (its records a microsecond apart, as the fold stamps one millisecond's)."""
    lost = ack(0, 0, acks="all", t=0)
    replicas = (1, 2, 3)
    us = 0.000_001
    timeline = [
        ClusterEvent(at(5), "t", 0, "isr_shrink", 1, 1, (1, 2), (1, 2, 3), replicas),
        fenced(5, 3),
        ClusterEvent(at(5 + us), "t", 0, "leader_change", 2, 1, (2,), (1, 2), replicas),
        ClusterEvent(at(5 + us), "t", 0, "isr_shrink", 2, 1, (2,), (1, 2), replicas),
        fenced(5 + us, 1),
        ClusterEvent(at(5 + 3 * us), "t", 0, "offline", -1, 2, (2,), (2,), replicas),
        fenced(5 + 3 * us, 2),
        ClusterEvent(at(6), "t", 0, "leader_change", 2, -1, (2,), (2,), replicas),
    ]
    assert likely_cause(lost, timeline, at(100)) == "simultaneous crash"


def blind(start: float, until: float | None) -> ClusterEvent:
    return ClusterEvent(at(start), "", -1, "watcher_blind", until=None if until is None
                        else at(until))


def test_a_loss_in_a_watcher_gap_says_so_in_its_cause():
    lost = ack(0, 0, acks="all", t=10)
    # nothing observed after the ack, the watcher blind from 8 to 40: never a bare unknown
    assert likely_cause(lost, [blind(8, 40)], at(100)) == \
        "unknown: watcher blind 00:00:08-00:00:40"
    assert likely_cause(lost, [blind(8, None)], at(100)) == "unknown: watcher blind since 00:00:08"
    # the fail-over was seen when the watcher could see again: the gap is named beside it
    acks1 = ack(0, 0, acks="1", t=10)
    assert likely_cause(acks1, [blind(8, 40), leader_change(40)], at(100)) == \
        "acks=1 fail-over (watcher blind 00:00:08-00:00:40)"
    # gaps before the ack or after the change that explains the loss are not named
    assert likely_cause(acks1, [blind(1, 3), leader_change(20), blind(30, 40)], at(100)) == \
        "acks=1 fail-over"


def isr_event(t: float, isr: tuple[int, ...], previous: tuple[int, ...],
              replicas: tuple[int, ...] = (1, 2, 3)) -> ClusterEvent:
    kind = "isr_shrink" if len(isr) < len(previous) else "isr_expand"
    return ClusterEvent(at(t), "t", 0, kind, 1, 1, isr, previous, replicas)


def test_a_write_acked_while_the_isr_is_the_leader_alone_waits_for_the_isr_to_grow():
    shrink = isr_event(-1, (1,), (1, 2, 3))
    a = audit((0, [ack(0, 0)], [read(0, 0, t=1), read(1, None, t=1)], [shrink]),
              (20, [], [], []))
    assert a.findings == [] and a.rereads == [] and a.status[("t", 0)].pending == 1
    a.run_pass(at(30), [], [], [isr_event(25, (1, 2), (1,))])
    assert table(a.findings) == [("confirmed", None, 0, 0, 1)]


def test_a_run_acked_across_the_isr_growing_back_is_not_held_for_ever():
    # writes acked from 0 to 2 s; the ISR, the leader alone since -5, seen grown at 1 and
    # unchanged since: the watcher records changes only, so no event follows the last ack.
    # (min-isr-2 in CI: 2,522 writes pending for 300 s, found by the timeout's account)
    from kafka_audit.jobs.core.rules import change_gate

    shrink, grown = isr_event(-5, (1,), (1, 2, 3)), isr_event(1, (1, 2, 3), (1,))
    assert change_gate([shrink, grown], at(0), at(2), 5) == ([], None)
    # seen alone again within the lookback after the last ack (metadata lags): held, until
    # the ISR is seen grown after that
    again = isr_event(4, (1,), (1, 2, 3))
    assert change_gate([shrink, grown, again], at(0), at(2), 5)[1] is not None
    assert change_gate([shrink, grown, again, isr_event(9, (1, 2), (1,))], at(0), at(2),
                       5) == ([], None)
    # acked wholly while the leader was alone: held until it grows
    assert change_gate([shrink], at(0), at(2), 5)[1] is not None
    # grown and alone seen at one instant after the acks: the worst counts
    tie = [shrink, isr_event(1, (1,), (1, 2, 3)), grown]
    assert change_gate(tie, at(0), at(2), 5)[1] is not None


def test_a_leader_from_the_eligible_replicas_had_the_write_the_classic_rules_miss_it():
    """KIP-966: ISR [1, 2, 3] at min.insync.replicas 2 acknowledged the write; 2 and 3 left
    (3 first, then 2: eligible as the ISR fell below 2), the leader 1 was lost, 2 elected
    from the eligible replicas. 2 held the write, so whatever lost it was no ISR shrunk to
    the leader: 2's own copy went (disk loss), or every replica's (simultaneous crash)."""
    lost = ack(0, 0, acks="all")

    def change(elr):
        return ClusterEvent(at(10), "t", 0, "leader_change", 2, 1, (2,), (1,), (1, 2, 3),
                            previous_elr=elr)

    # the classic rules, the eligible replicas unknown (a poll): the ISR was the leader alone
    assert likely_cause(lost, [change(None)], at(100)) == "ISR shrunk to leader then leader lost"
    assert likely_cause(lost, [change((2,))], at(100)) == "disk loss"
    fenced = [ClusterEvent(at(5 + b), "", -1, "broker_fenced", broker=b) for b in (1, 2, 3)]
    assert likely_cause(lost, [change((2,)), *fenced], at(100)) == "simultaneous crash"
    # nor an unclean election where the eligible one took over from a larger ISR
    wider = ClusterEvent(at(10), "t", 0, "leader_change", 3, 1, (3,), (1, 2), (1, 2, 3),
                         previous_elr=(3,))
    assert likely_cause(lost, [replace(wider, previous_elr=None)], at(100)) == \
        "unclean election"
    assert likely_cause(lost, [wider], at(100)) == "disk loss"


def test_a_write_read_while_exposed_and_destroyed_by_a_late_unclean_election():
    # read at once, settled long before the leader dies: the late election must still count
    shrink = isr_event(-1, (1,), (1, 2, 3))
    a = audit((0, [ack(0, 0)], [read(0, 0, t=1), read(1, None, t=1)], [shrink]),
              (100, [], [], [leader_change(90, previous_isr=(1,))]))
    assert a.findings == [] and [r.offset for r in a.rereads] == [0]
    a.run_pass(at(101), [], [read(0, 0, producer="q", t=101, source="reread")], [])
    assert table(a.findings) == [("lost_after_seen", None, 0, 0, 1)]
    assert a.findings[0].cause == "ISR shrunk to leader then leader lost"


def test_an_isr_of_one_on_an_unreplicated_partition_is_no_exposure():
    alone = isr_event(-1, (1,), (1,), replicas=(1,))
    a = audit((0, [ack(0, 0)], [read(0, 0, t=1), read(1, None, t=1)], [alone]), (20, [], [], []))
    assert table(a.findings) == [("confirmed", None, 0, 0, 1)]


def test_observations_made_at_one_instant_are_unordered():
    # the watcher saw the ISR as the leader alone and as two replicas at the same instant:
    # which came last is unknown, so the write waits whichever order they arrive in (found
    # by Hypothesis: arrival order decided it, and the engine and the reference disagreed)
    alone, grown = isr_event(-1, (1,), (1, 2, 3)), isr_event(-1, (1, 2), (1,))
    for events in ([alone, grown], [grown, alone]):
        a = audit((0, [ack(0, 0)], [read(0, 0, t=1), read(1, None, t=1)], events),
                  (20, [], [], []))
        assert a.findings == [] and a.status[("t", 0)].pending == 1
        a.run_pass(at(30), [], [], [isr_event(25, (1, 2), (1,))])
        assert table(a.findings) == [("confirmed", None, 0, 0, 1)]
    lost = ack(0, 0, acks="all")
    unclean = leader_change(1, leader=3, previous_isr=(1, 2))
    shrunk = leader_change(1, leader=2, previous=1, previous_isr=(1,))
    assert likely_cause(lost, [unclean, shrunk], at(100)) == \
        likely_cause(lost, [shrunk, unclean], at(100)) == "ISR shrunk to leader then leader lost"


def test_acks_of_truncated_writes_witness_no_reorder():
    # the old leader acked seqs 10-12 at offsets 5-7 (acks=1); after the fail-over the new
    # leader put seqs 20-22 there. The old acks say where lost writes were, not where
    # anything is: no reorder (found by the demo: 3,321 false `reordered`)
    old = ack(5, 10, count=3, acks="1", t=0)
    new = ack(5, 20, count=3, t=2)
    a = audit((3, [old, new], [read(5, 20, count=3, t=3)], [leader_change(1)]),
              (14, [], [], []))
    # the losses need a re-read (asked for while they settle, and again once settled)
    assert [(r.offset, r.end) for r in a.rereads] == [(5, 8), (5, 8)]
    a.run_pass(at(15), [], [read(5, 20, count=3, t=15, source="reread")], [])
    assert table(a.findings) == [("confirmed", None, 5, 20, 2), ("confirmed", None, 7, 22, 1),
                                 ("lost", "overwritten", 5, 10, 3)]
    assert {f.cause for f in a.findings if f.kind == "lost"} == {"acks=1 fail-over"}


def test_a_reorder_waits_for_the_lower_seq_write_acked_above_it():
    # seq 5 sits at offset 0; seq 1 was acked at offset 3, not read yet: if it is found
    # there, seq 5 is reordered; if it was lost there, it is not. Seq 5 waits to know
    a = audit((0, [ack(0, 5), ack(3, 1)], [read(0, 5, t=1), read(1, None, count=2, t=1)], []),
              (11, [], [], []))
    assert a.findings == [] and a.status[("t", 0)].pending == 2
    a.run_pass(at(12), [], [read(3, 1, t=12), read(4, None, t=12)], [])
    a.run_pass(at(23), [], [], [])
    r = [f for f in a.findings if f.kind == "reordered"]
    assert table(r) == [("reordered", None, 0, 5, 1)]
    assert (r[0].evidence["lower_seq"], r[0].evidence["at_higher_offset"]) == (1, 3)
    assert table(f for f in a.findings if f.kind == "confirmed") == [
        ("confirmed", None, 0, 5, 1), ("confirmed", None, 3, 1, 1)]


def test_a_copy_read_then_replaced_is_no_duplicate():
    # seq 3 was read at offset 4 too, but a later read shows another record there: the copy
    # is gone, only the acked offset holds the write
    copy_gone = audit((0, [ack(7, 3)], [read(4, 3, t=1), read(7, 3, t=1), read(8, None)], []),
                      (5, [], [read(4, 9, producer="q", t=5, source="reread")], []),
                      (11, [], [], []))
    assert table(copy_gone.findings) == [("confirmed", None, 7, 3, 1)]
    copy_kept = audit((0, [ack(7, 3)], [read(4, 3, t=1), read(7, 3, t=1), read(8, None)], []),
                      (11, [], [], []))
    assert table(copy_kept.findings) == [("confirmed", None, 7, 3, 1),
                                         ("duplicate", None, 7, 3, 1)]


def test_a_copy_read_before_a_leader_change_is_read_again_first():
    a = audit((0, [ack(7, 3, t=2)], [read(4, 3, t=1), read(7, 3, t=3), read(8, None, t=3)],
               [leader_change(2)]), (11, [], [], []))
    assert a.findings == [] and [(r.offset, r.end) for r in a.rereads] == [(4, 5)]
    a.run_pass(at(12), [], [read(4, 3, t=12, source="reread")], [])
    assert table(a.findings) == [("confirmed", None, 7, 3, 1), ("duplicate", None, 7, 3, 1)]


_span = st.tuples(st.integers(0, 40), st.integers(0, 40))


@given(st.lists(_span, max_size=12), st.lists(_span, min_size=1, max_size=12))
def test_a_cover_answers_as_the_scan_it_replaces(spans, queries):
    """Merged and bisected, the same answer as scanning every span, empty ones and
    touching ones included (a query is empty when hi <= lo)."""
    cover = _Cover(spans)
    for lo, hi in queries:
        assert cover.touches(lo, hi) == any(lo < e and hi > s for s, e in spans)


@given(st.lists(st.tuples(st.integers(-20, 60), st.integers(0, 40)), max_size=30),
       st.lists(_span, min_size=1, max_size=12))
def test_intervals_answer_as_the_scan_they_replace(runs, queries):
    """Runs of every length (empty ones too, one long run beside short ones), in any
    order and repeated: each query gives exactly the runs a full scan keeps, in input
    order (the rules read the first of several views at an offset)."""
    runs = [(s, n, i) for i, (s, n) in enumerate(runs)]  # distinct objects, same spans
    index = _Intervals(runs, lambda r: r[0], lambda r: r[1])
    for lo, hi in queries:
        assert index.overlapping(lo, hi) == [r for r in runs if r[0] < hi and r[0] + r[1] > lo]


def test_a_piece_keeps_every_other_field_of_its_run():
    """A piece is built field by field (for speed): a field added to AckRun and not
    copied there fails here."""
    import dataclasses
    from datetime import UTC, datetime

    t0, t1 = datetime(2026, 1, 1, tzinfo=UTC), datetime(2026, 1, 2, tzinfo=UTC)
    values = {"topic": "t", "partition": 2, "producer_id": "p", "run_id": "r", "seq": 10,
              "count": 5, "offset": 100, "first_ack": t0, "last_ack": t1, "error": "E",
              "acks": "1", "horizon": 7, "broker": 3}
    fields = [f.name for f in dataclasses.fields(AckRun)]
    assert sorted(fields) == sorted(values), "a new AckRun field: give it a value here"
    run = AckRun(**values)
    piece = run.piece(1, 3)
    assert piece == dataclasses.replace(run, seq=11, count=2, offset=101)
    assert AckRun(**{**values, "offset": None}).piece(2, 5).offset is None


@given(st.lists(_span, max_size=12), st.lists(_span, min_size=1, max_size=12))
def test_merged_spans_overlap_what_the_spans_overlap(spans, queries):
    """The union of the spans, sorted, none touching another, overlapping every query the
    spans overlap and no other (empty ones kept apart: a span around their point). An
    empty query at the point where two spans touch overlaps neither but their union: a
    superset, as a filter before the exact check may be."""
    merged = merge_spans(spans)
    full = [(lo, hi) for lo, hi in merged if hi > lo]
    assert all(a[1] < b[0] for a, b in zip(full, full[1:], strict=False))
    assert {x for lo, hi in merged for x in range(lo, hi)} == {
        x for lo, hi in spans for x in range(lo, hi)}
    for lo, hi in queries:
        by_merged = any(lo < e and hi > s for s, e in merged)
        by_spans = any(lo < e and hi > s for s, e in spans)
        assert by_merged == by_spans if hi > lo else by_merged >= by_spans


def test_a_write_above_a_high_watermark_held_under_min_isr_is_not_past_the_log_end():
    """Kafka (3.7+) holds the high watermark while the ISR is below min.insync.replicas: an
    acks=1 write the leader acknowledged above it is on the leader, not truncated, however
    long the consume job has read the whole log below it."""
    from kafka_audit.jobs.core.model import Clock
    from kafka_audit.jobs.core.rules import beyond_end

    run = ack(100, 0, count=5, t=10, acks="1")  # the Python ledger names no broker
    moved = leader_change(8, leader=2, previous=1)  # just before: leadership moved

    def past(*more):
        clock = Clock(now=at(100), settled_frontier=100, log_end=100, lookback_seconds=30,
                      beyond_end_seconds=60)
        return beyond_end(run, [moved, *more], clock)

    def said(t, kind):
        return ClusterEvent(at(t), "t", 0, kind, 2, 2, (2,), (2, 3))

    assert past()  # the log ends below it, long enough: truncated (a re-read says so)
    assert not past(said(20, "under_min_isr_enter"))  # held below the write: it waits
    assert past(said(20, "under_min_isr_enter"), said(30, "under_min_isr_exit"))
