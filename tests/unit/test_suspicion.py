"""The suspicion rule (``jobs/core/suspicion.py``) on hand-made histories, and against a
write-by-write reading of its definition on drawn ones."""

from dataclasses import replace
from datetime import timedelta
from itertools import pairwise

from hypothesis import given, settings
from hypothesis import strategies as st

from kafka_audit.jobs.core.suspicion import (
    BY_BROKER,
    BY_TIME,
    LEAD_SLACK,
    EpochEnd,
    Leadership,
    _merged,
    _uncovered,
    suspect,
)

from ..support.histories import ack, at


def acked(offset, seq, count=1, t=0, broker=1, t_last=None, producer="p"):
    return replace(ack(offset, seq, count, t=t, t_last=t_last, acks="1", producer=producer),
                   broker=broker)


def change(end, t=10, old=1, epoch=4, new=2):
    """Broker ``old``'s epoch ``epoch`` ends at ``end``; ``new`` leads at the next."""
    return EpochEnd("t", 0, old, epoch, end, at(t), new, epoch + 1)


#: broker 1 leads at epoch 4 from 0 s; broker 2 at 5 from 10 s
LEADS = [Leadership(at(0), 1, 4), Leadership(at(10), 2, 5)]


def named(suspicions):
    return [(s.run.offset, s.run.seq, s.run.count, s.basis) for s in suspicions]


def test_the_old_leaders_writes_at_and_above_the_end_are_suspected_not_below():
    runs = [acked(0, 0, 100, t=1, t_last=9),  # 0..99: cut at 90
            acked(100, 100, 5, t=9.5),  # above: whole
            acked(100, 200, 5, t=11, broker=2, producer="q")]  # the new leader's, at 100+
    assert named(suspect(runs, [change(90)], LEADS)) == [(90, 90, 10, BY_BROKER),
                                                         (100, 100, 5, BY_BROKER)]
    assert suspect(runs[:1], [change(100)], LEADS) == []  # ends at the run's end: kept
    assert suspect(runs, [change(105)], LEADS) == []


def test_a_write_of_unknown_broker_is_suspected_by_its_time_in_the_epoch():
    runs = [acked(0, 0, 10, t=9, broker=None),  # in the epoch, above the end
            acked(10, 10, 5, t=10.5, broker=None)]  # after the change: not assigned
    assert named(suspect(runs, [change(5)], LEADS)) == [(5, 5, 5, BY_TIME)]


def test_a_leader_still_acknowledging_after_the_change_is_a_split_brain_its_writes_suspected():
    paused = acked(50, 50, 20, t=11, t_last=12)  # broker 1, after broker 2 was elected
    later = acked(60, 70, 5, t=30)  # broker 1 again, but leading at epoch 6 from 20 s
    leads = [*LEADS, Leadership(at(20), 1, 6)]
    assert named(suspect([paused, later], [change(40)], leads)) == [(50, 50, 20, BY_BROKER)]


def test_writes_before_the_old_leader_led_at_that_epoch_are_not_its():
    early = acked(0, 0, 10, t=1)  # broker 1 at epoch 2, before epoch 4 began at 5 s
    leads = [Leadership(at(0), 1, 2), Leadership(at(3), 3, 3), Leadership(at(5), 1, 4),
             Leadership(at(10), 2, 5)]
    assert suspect([early], [change(0)], leads) == []


def test_two_changes_in_a_row_each_name_their_own_writes_and_a_write_is_suspected_once():
    runs = [acked(0, 0, 10, t=5), acked(8, 10, 10, t=15, broker=2),
            acked(0, 100, 10, t=5, broker=None, producer="q")]
    leads = [*LEADS, Leadership(at(20), 3, 6)]
    got = suspect(runs, [change(6), change(12, t=20, old=2, epoch=5, new=3)], leads)
    assert [(s.change.epoch, s.run.producer_id, s.run.offset, s.run.count, s.basis)
            for s in got] == [(4, "p", 6, 4, BY_BROKER), (4, "q", 6, 4, BY_TIME),
                              (5, "p", 12, 6, BY_BROKER)]


def test_the_old_leaders_return_seen_late_keeps_its_new_epochs_writes_out():
    """A polled leadership is seen late: broker 1 led again at epoch 6 from 19.8 s, the
    watcher saw it at 20 s. Its writes at epoch 6 (at or above where the epoch begins, 70)
    are not epoch 4's; without the return's answer, those acked near it are not either."""
    lost = acked(50, 50, 10, t=9)  # epoch 4, above its end (40): truncated
    early = acked(70, 100, 5, t=19.9)  # epoch 6, acknowledged before the watcher saw it
    leads = [*LEADS, Leadership(at(20), 1, 6)]
    back = change(70, t=20, old=2, epoch=5, new=1)  # epoch 5 ends at 70: epoch 6 begins
    assert named(suspect([lost, early], [change(40)], leads, known=[change(40), back])) == [
        (50, 50, 10, BY_BROKER)]
    assert named(suspect([lost, early], [change(40)], leads)) == [(50, 50, 10, BY_BROKER)]
    # an epoch-4 write of a paused leader acknowledged that close to its return, below
    # where epoch 6 begins, stays suspected
    late4 = acked(60, 60, 5, t=18)
    assert named(suspect([late4], [change(40)], leads, known=[change(40), back])) == [
        (60, 60, 5, BY_BROKER)]


def test_a_paused_leaders_last_writes_before_it_leads_again_are_told_by_exact_time():
    """Broker 1, deposed at 10 s (epoch 4 ends at 40), resumed and acknowledged at its old
    epoch until it learned; it led again at epoch 6 from 20 s. Its writes acknowledged
    1 s before that lie above where epoch 6 begins (45: the deposed tail was longer than
    epoch 5's log), as its new epoch's would. Read from the metadata log, the return's
    time is exact: they are epoch 4's. Polled, it may have been seen up to LEAD_SLACK
    late: they are taken as epoch 6's (by offset they cannot be told apart)."""
    deposed = acked(60, 60, 10, t=19)
    back = change(45, t=20, old=2, epoch=5, new=1)
    exact = [Leadership(at(0), 1, 4, True), Leadership(at(10), 2, 5, True),
             Leadership(at(20), 1, 6, True)]
    assert named(suspect([deposed], [change(40)], exact, known=[change(40), back])) == [
        (60, 60, 10, BY_BROKER)]
    polled = [*LEADS, Leadership(at(20), 1, 6)]
    assert suspect([deposed], [change(40)], polled, known=[change(40), back]) == []
    # its epoch-6 writes, acknowledged after the exact return, are not suspected
    new = acked(70, 70, 5, t=20.5)
    assert suspect([new], [change(40)], exact, known=[change(40), back]) == []


def test_a_leadership_seen_twice_begins_at_its_first_sight():
    """The log's row at 0 s and a restarted watcher's first sight of the same leadership at
    5 s: broker 1's epoch-4 writes from 2 s on are its."""
    seen_twice = [Leadership(at(0), 1, 4, True), Leadership(at(5), 1, 4),
                  Leadership(at(10), 2, 5, True)]
    assert named(suspect([acked(50, 50, 5, t=2)], [change(40)], seen_twice)) == [
        (50, 50, 5, BY_BROKER)]


def test_a_clean_hand_over_suspects_nothing():
    """acks=all: every acknowledged write is below the high watermark the new leader (in
    the ISR) holds, so the old epoch ends at or past the last of them."""
    runs = [acked(0, 0, 100, t=1, t_last=9), acked(100, 100, 50, t=11, broker=2)]
    assert suspect(runs, [change(100)], LEADS) == []


def test_failed_and_offsetless_reports_are_never_suspected():
    runs = [replace(ack(None, 0, 3, t=5, error="_MSG_TIMED_OUT"), broker=None),
            replace(ack(None, 3, 3, t=5, acks="0"), broker=1)]
    assert suspect(runs, [change(0)], LEADS) == []


def _reference(runs, changes, leads):
    """The definition write by write: (producer, seq) -> the epoch of the first change
    (by time) that names it."""
    out = {}
    for c in sorted(changes, key=lambda c: (c.changed_at, c.epoch)):
        # when each leadership may have begun: a polled one up to LEAD_SLACK before seen
        start = min((ls.at - (timedelta(0) if ls.exact else LEAD_SLACK) for ls in leads
                     if ls.leader == c.old_leader and ls.epoch == c.epoch
                     and ls.at <= c.changed_at), default=None)
        again = min((ls.at - (timedelta(0) if ls.exact else LEAD_SLACK) for ls in leads
                     if ls.leader == c.old_leader and ls.epoch > c.epoch
                     and ls.at > c.changed_at), default=None)
        # where its next epoch begins: the answer of the first change back to it
        back = min(((e.changed_at, e.end_offset) for e in changes
                    if e.new_leader == c.old_leader and e.changed_at > c.changed_at
                    and e.new_epoch > c.epoch), default=None)
        for a in runs:
            for k in range(a.count):
                if a.offset + k < c.end_offset or (start and a.last_ack < start):
                    continue
                if a.broker is None:
                    mine = a.first_ack <= c.changed_at
                else:
                    # a run is the old epoch's or the new one's as a whole
                    newer = (again and a.first_ack >= again
                             and (back is None or a.end > back[1]))
                    mine = a.broker == c.old_leader and not newer
                if mine:
                    out.setdefault((a.producer_id, a.seq + k), c.epoch)
    return out


@settings(max_examples=300, deadline=None)
@given(st.data())
def test_the_rule_equals_the_write_by_write_definition(data):
    runs = [acked(data.draw(st.integers(0, 40)), 1000 * i, data.draw(st.integers(1, 8)),
                  t=data.draw(st.integers(0, 30)),
                  broker=data.draw(st.sampled_from([None, 1, 2, 3])),
                  producer=data.draw(st.sampled_from(["p", "q"])))
            for i in range(data.draw(st.integers(0, 6)))]
    leads = sorted((Leadership(at(data.draw(st.integers(0, 30))), data.draw(
        st.integers(1, 3)), e, data.draw(st.booleans()))
        for e in range(1, data.draw(st.integers(1, 6)))), key=lambda ls: ls.epoch)
    changes = [change(data.draw(st.integers(0, 50)), t=data.draw(st.integers(0, 30)),
                      old=data.draw(st.integers(1, 3)), epoch=data.draw(st.integers(1, 5)),
                      new=data.draw(st.integers(1, 3)))
               for _ in range(data.draw(st.integers(0, 3)))]
    got = suspect(runs, changes, leads)
    flat = {}
    for s in got:
        for k in range(s.run.count):
            key = (s.run.producer_id, s.run.seq + k)
            assert key not in flat, "a write suspected twice"
            flat[key] = s.change.epoch
    assert flat == _reference(runs, changes, leads)


@settings(max_examples=300, deadline=None)
@given(st.lists(st.tuples(st.integers(0, 60), st.integers(1, 15)), max_size=25),
       st.integers(0, 70), st.integers(1, 30))
def test_the_seqs_left_uncovered_are_those_no_span_holds(spans, lo, width):
    """Spans as a marker's seed gives them (unsorted, overlapping), merged once; the parts
    found by bisection are exactly the seqs outside them, in order, disjoint."""
    spans = [(s, s + w) for s, w in spans]
    merged = _merged(spans)
    assert all(a[1] < b[0] for a, b in pairwise(merged))  # sorted, apart
    assert {q for s, e in merged for q in range(s, e)} == {q for s, e in spans
                                                            for q in range(s, e)}
    parts = _uncovered(lo, lo + width, merged)
    held = {q for s, e in spans for q in range(s, e)}
    assert [q for s, e in parts for q in range(s, e)] == [
        q for q in range(lo, lo + width) if q not in held]
    assert all(s < e for s, e in parts)
    assert all(a[1] < b[0] for a, b in pairwise(parts))  # each part maximal
