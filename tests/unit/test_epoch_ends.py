"""The watcher's questions at leader changes (``jobs/watcher/epoch_ends.py``): which rows
raise one, whom it is asked of, and the rows of the answers."""

import json
from datetime import UTC, datetime, timedelta

from kafka_audit.jobs.watcher.broker_views import EpochEndAnswer
from kafka_audit.jobs.watcher.epoch_ends import GIVE_UP_SECONDS, EpochEnds, question_of

T = datetime(2026, 11, 29, tzinfo=UTC)


def row(kind, leader, epoch, sec=0, partition=0):
    return {"event_time": T + timedelta(seconds=sec), "topic": "t", "partition": partition,
            "kind": kind, "leader": leader, "leader_epoch": epoch}


def test_only_another_leader_at_a_newer_epoch_raises_a_question():
    assert question_of(row("leader_change", 2, 5), (1, 4)).epoch == 4
    assert question_of(row("leader_change", 2, 5), (1, 4)).old_leader == 1
    assert question_of(row("leader_change", 2, 5), None) is None  # the old one not known
    assert question_of(row("leader_reelected", 1, 5), (1, 4)) is None  # its own log
    assert question_of(row("offline", -1, 5), (1, 4)) is None  # nobody to ask yet
    assert question_of(row("leader_change", 2, 4), (1, 4)) is None  # not newer
    assert question_of(row("leader_change", 2, None), (1, 4)) is None
    assert question_of(row("isr_shrink", 2, 5), (1, 4)) is None


def test_a_leader_back_after_an_offline_spell_is_asked_about_the_last_broker_led_epoch():
    e = EpochEnds()
    e.seed(("t", 0), 1, 3)
    e.follow([row("offline", -1, 4, 1), row("leader_change", 2, 5, 2),
              row("leader_change", 3, 6, 3, partition=0)])
    assert [(q.old_leader, q.epoch, q.new_leader, q.new_epoch) for q in e.pending] == [
        (1, 3, 2, 5), (2, 5, 3, 6)]
    e.seed(("t", 0), 9, 99)  # known already: the seed does not overwrite
    assert e.leaders[("t", 0)] == (3, 6)


def test_answers_become_rows_and_an_unanswered_question_waits_then_is_given_up():
    e = EpochEnds()
    e.seed(("t", 0), 1, 3)
    e.seed(("t", 1), 1, 7)
    e.follow([row("leader_change", 2, 4, 0), row("leader_change", 3, 8, 0, partition=1)])
    asked = []

    def ask_one(host, port, wanted, timeout):
        asked.append((port, wanted))
        if port == 9002:
            return {("t", 0): EpochEndAnswer(0, 3, 1200)}
        return {("t", 1): EpochEndAnswer(6, -1, -1)}  # not the leader (yet)

    brokers = {2: ("h", 9002), 3: ("h", 9003)}
    rows = e.ask(brokers, {("t", 0): (2, 4), ("t", 1): (3, 8)}, T + timedelta(seconds=1),
                 ask_one, 1.0)
    assert sorted(asked) == [(9002, {("t", 0): 3}), (9003, {("t", 1): 7})]
    assert [(r["kind"], r["partition"], r["leader"], r["previous_leader"], r["leader_epoch"],
             r["log_end"]) for r in rows] == [("epoch_end", 0, 2, 1, 3, 1200)]
    assert json.loads(rows[0]["detail"]) == {"answered_epoch": 3, "new_leader": 2,
                                             "new_epoch": 4, "changed_at": T.isoformat()}
    assert [q.partition for q in e.pending] == [1]
    later = T + timedelta(seconds=GIVE_UP_SECONDS + 1)
    assert e.ask(brokers, {("t", 1): (3, 8)}, later, ask_one, 1.0) == []
    assert (e.pending, e.answered, e.given_up) == ([], 1, 1)


def test_a_broker_that_does_not_answer_keeps_the_question():
    e = EpochEnds()
    e.seed(("t", 0), 1, 3)
    e.follow([row("leader_change", 2, 4)])

    def down(*_args):
        raise ConnectionRefusedError("down")

    def garbled(*_args):
        raise ValueError("epoch end response ends early")

    assert e.ask({2: ("h", 1)}, {}, T, down, 1.0) == []
    assert len(e.pending) == 1
    assert e.ask({2: ("h", 1)}, {}, T, garbled, 1.0) == [] and len(e.pending) == 1
    assert e.ask({}, {}, T, down, 1.0) == [] and len(e.pending) == 1  # address not known


def test_two_questions_of_one_partition_are_asked_in_turn_each_answered_for_its_epoch():
    e = EpochEnds()
    e.seed(("t", 0), 1, 3)
    e.follow([row("leader_change", 2, 5, 1), row("leader_change", 3, 6, 2)])
    asked = []
    ends = {3: 100, 5: 150}

    def ask_one(host, port, wanted, timeout):
        asked.append(dict(wanted))
        return {k: EpochEndAnswer(0, epoch, ends[epoch]) for k, epoch in wanted.items()}

    brokers = {3: ("h", 9003)}
    first = e.ask(brokers, {("t", 0): (3, 6)}, T, ask_one, 1.0)
    second = e.ask(brokers, {("t", 0): (3, 6)}, T, ask_one, 1.0)
    assert asked == [{("t", 0): 3}, {("t", 0): 5}]
    assert [(r["leader_epoch"], r["log_end"]) for r in first + second] == [(3, 100), (5, 150)]
    assert e.pending == []


def test_the_old_leader_is_not_asked_while_the_polls_still_see_it_lead():
    """The metadata log is ahead of the brokers' answers: the view still names the old
    leader at the old epoch, which would answer with its own (untruncated) log."""
    e = EpochEnds()
    e.seed(("t", 0), 1, 3)
    e.follow([row("leader_change", 2, 4)])
    asked = []

    def ask_one(host, port, wanted, timeout):
        asked.append(port)
        return {("t", 0): EpochEndAnswer(0, 3, 80)}

    e.ask({1: ("h", 9001), 2: ("h", 9002)}, {("t", 0): (1, 3)}, T, ask_one, 1.0)
    assert asked == [9002]


def test_an_answer_for_a_newer_epoch_than_asked_is_not_taken():
    e = EpochEnds()
    e.seed(("t", 0), 1, 3)
    e.follow([row("leader_change", 2, 4)])
    rows = e.ask({2: ("h", 1)}, {}, T, lambda *_a: {("t", 0): EpochEndAnswer(0, 4, 90)}, 1.0)
    assert rows == [] and len(e.pending) == 1


def test_the_watcher_asks_at_once_the_leader_the_log_named_last_and_keeps_a_failed_write(
        tmp_path, monkeypatch):
    """Two changes of one partition drained together from the metadata log (1 -> 2 -> 3):
    the first question goes to broker 3, the leader the log named last (broker 2 may be
    dead), before the poll's lookups; an answer whose write fails is written with the
    next poll's rows, not lost (it is no longer pending)."""
    import pytest

    import kafka_audit.jobs.watcher.watcher as watcher_module
    from kafka_audit.jobs.watcher.watcher import ClusterWatcher
    from kafka_audit.settings import Settings

    w = ClusterWatcher(Settings(home=tmp_path))
    w.known_brokers.update({2: ("h2", 2), 3: ("h3", 3)})
    w.epoch_ends.seed(("t", 0), 1, 4)
    now = datetime.now(UTC)  # the watcher asks at its own time: the changes are recent
    w.epoch_ends.follow([{**row("leader_change", 2, 5), "event_time": now},
                         {**row("leader_change", 3, 6), "event_time": now}])
    asked = []

    def ask_one(host, port, wanted, budget, security=None):
        asked.append((port, dict(wanted)))
        return {k: EpochEndAnswer(0, e, 100 + e) for k, e in wanted.items()}

    monkeypatch.setattr("kafka_audit.jobs.watcher.broker_views.epoch_ends", ask_one)

    def refused(*_a, **_k):
        raise OSError("the store is out of reach")

    monkeypatch.setattr(watcher_module, "append_rows", refused)
    with pytest.raises(OSError):
        w._ask_epoch_ends_now()
    assert asked == [(3, {("t", 0): 4})]
    assert [(r["kind"], r["leader"], r["leader_epoch"], r["log_end"]) for r in w._unwritten] \
        == [("epoch_end", 3, 4, 104)]
    written = []
    monkeypatch.setattr(watcher_module, "append_rows",
                        lambda _path, _table, rows: written.extend(rows))
    w._ask_epoch_ends_now()  # the second question (epoch 5), now: written at once
    assert asked[-1] == (3, {("t", 0): 5}) and [r["leader_epoch"] for r in written] == [5]
    assert [r["leader_epoch"] for r in w._unwritten] == [4]  # until the poll's own write
