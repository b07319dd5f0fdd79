"""The KRaft metadata log folded into cluster events (pure: records in, rows out), on
records shaped as Kafka's own serde prints them (``jobs/watcher/MetadataTail.java``)."""

import json
from datetime import UTC, datetime, timedelta

from hypothesis import given, settings
from hypothesis import strategies as st

from kafka_audit.jobs.watcher.metadata_log import (
    SOURCE,
    MetadataFold,
    MetadataTail,
    Polled,
    metadata_dirs,
    state_of,
)

T0 = 1_795_474_000_000  # ms


def rec(kind: str, ms: int = 0, **data) -> dict:
    return {"time": T0 + ms, "type": kind, "data": data}


def created(fold: MetadataFold, name="orders", tid="T1", leader=1, isr=(1, 2, 3)) -> list:
    return (fold.apply(rec("TOPIC_RECORD", 0, name=name, topicId=tid))
            + fold.apply(rec("PARTITION_RECORD", 0, partitionId=0, topicId=tid,
                             replicas=[1, 2, 3], isr=list(isr), leader=leader,
                             leaderEpoch=0)))


def kinds(rows: list) -> list:
    return [r["kind"] for r in rows]


def test_a_topic_is_first_seen_at_its_creation_time():
    fold = MetadataFold()
    rows = created(fold)
    assert kinds(rows) == ["first_seen"]
    r = rows[0]
    assert (r["topic"], r["partition"], r["leader"], r["isr"], r["leader_epoch"]) == \
        ("orders", 0, 1, [1, 2, 3], 0)
    # the creation's millisecond (its records a microsecond apart, in order)
    assert r["event_time"] - datetime.fromtimestamp(T0 / 1000, UTC) < timedelta(milliseconds=1)
    assert r["source"] == SOURCE


def test_changes_count_the_leader_epoch_as_kafka_does():
    fold = MetadataFold(min_isr={"orders": 2})
    created(fold)
    # an ISR change names no leader (-2 by default, left out): the epoch stays
    shrink = fold.apply(rec("PARTITION_CHANGE_RECORD", 10, partitionId=0, topicId="T1",
                            isr=[1]))
    assert kinds(shrink) == ["isr_shrink", "under_min_isr_enter", "isr_alone_enter"]
    assert shrink[0]["leader_epoch"] == 0 and shrink[0]["previous_isr"] == [1, 2, 3]
    # the leader fenced: no leader (epoch 1), then the same one back (epoch 2)
    off = fold.apply(rec("PARTITION_CHANGE_RECORD", 20, partitionId=0, topicId="T1", leader=-1))
    assert kinds(off) == ["offline"] and off[0]["previous_leader"] == 1
    back = fold.apply(rec("PARTITION_CHANGE_RECORD", 30, partitionId=0, topicId="T1", leader=1))
    assert kinds(back) == ["leader_change"] and back[0]["leader_epoch"] == 2
    # a record naming the same leader bumps the epoch: elected again
    again = fold.apply(rec("PARTITION_CHANGE_RECORD", 40, partitionId=0, topicId="T1", leader=1))
    assert kinds(again) == ["leader_reelected"] and again[0]["leader_epoch"] == 3
    # a new leader outside the old ISR, which it replaces: an unclean election
    unclean = fold.apply(rec("PARTITION_CHANGE_RECORD", 50, partitionId=0, topicId="T1",
                             leader=2, isr=[2]))
    assert kinds(unclean)[:2] == ["leader_change", "unclean_election"]


def test_the_topics_own_min_isr_comes_from_its_config_record():
    fold = MetadataFold(min_isr={})  # nothing asked yet
    fold.apply(rec("CONFIG_RECORD", 0, resourceType=2, resourceName="orders",
                   name="min.insync.replicas", value="3"))
    created(fold)
    rows = fold.apply(rec("PARTITION_CHANGE_RECORD", 5, partitionId=0, topicId="T1",
                          isr=[1, 2]))
    assert "under_min_isr_enter" in kinds(rows)


def test_brokers_fenced_unfenced_registered_and_the_controller():
    fold = MetadataFold()
    reg = fold.apply(rec("REGISTER_BROKER_RECORD", 0, brokerId=2, fenced=True))
    assert kinds(reg) == ["broker_fenced"] and json.loads(reg[0]["detail"]) == {
        "broker": 2, "registered": True}
    up = fold.apply(rec("BROKER_REGISTRATION_CHANGE_RECORD", 1, brokerId=2, fenced=-1))
    assert kinds(up) == ["broker_unfenced"]
    assert fold.apply(rec("BROKER_REGISTRATION_CHANGE_RECORD", 2, brokerId=2, fenced=0)) == []
    assert kinds(fold.apply(rec("FENCE_BROKER_RECORD", 3, id=2))) == ["broker_fenced"]
    ctl = fold.apply(rec("LEADER_CHANGE", 4, leaderId=3))
    assert kinds(ctl) == ["controller_change"] and json.loads(ctl[0]["detail"]) == {
        "controller": 3, "previous": None}
    assert fold.apply(rec("LEADER_CHANGE", 5, leaderId=3)) == []  # the same one: no change


def test_internal_topics_snapshots_and_rows_written_before_make_no_rows():
    fold = MetadataFold(quiet_until=datetime.fromtimestamp((T0 + 100) / 1000, UTC))
    assert created(fold, name="__consumer_offsets", tid="C") == []
    assert created(fold) == []  # at T0: its rows were written by an earlier watcher
    rows = fold.apply(rec("PARTITION_CHANGE_RECORD", 200, partitionId=0, topicId="T1",
                          leader=2))
    assert kinds(rows) == ["leader_change"] and rows[0]["previous_leader"] == 1  # folded
    snap = {**rec("PARTITION_CHANGE_RECORD", 300, partitionId=0, topicId="T1", leader=3),
            "snapshot": True}
    assert fold.apply(snap) == [] and fold.partitions[("T1", 0)].leader == 3
    # a change to a partition never seen created, a removed topic: nothing, no error
    assert fold.apply(rec("PARTITION_CHANGE_RECORD", 400, partitionId=9, topicId="X",
                          leader=1)) == []
    fold.apply(rec("REMOVE_TOPIC_RECORD", 500, topicId="T1"))
    assert ("T1", 0) not in fold.partitions


def test_metadata_dirs_accepts_a_nodes_metadata_dir_or_the_partition_folder(tmp_path):
    assert metadata_dirs([str(tmp_path / "meta"), str(tmp_path / "__cluster_metadata-0")]) == [
        tmp_path / "meta" / "__cluster_metadata-0", tmp_path / "__cluster_metadata-0"]


def test_a_durability_setting_changed_after_creation_is_a_timed_event():
    fold = MetadataFold()
    setting = {"resourceType": 2, "resourceName": "orders", "name": "min.insync.replicas"}
    # as Kafka writes a creation, in one batch: the topic, its settings, its partitions
    assert fold.apply(rec("TOPIC_RECORD", 0, name="orders", topicId="T1")) == []
    assert fold.apply(rec("CONFIG_RECORD", 0, **setting, value="2")) == []
    fold.apply(rec("PARTITION_RECORD", 0, partitionId=0, topicId="T1", replicas=[1, 2, 3],
                   isr=[1, 2, 3], leader=1, leaderEpoch=0))
    rows = fold.apply(rec("CONFIG_RECORD", 50, **setting, value="1"))
    assert kinds(rows) == ["topic_config_change"] and rows[0]["partition"] == -1
    assert json.loads(rows[0]["detail"]) == {"name": "min.insync.replicas", "value": "1",
                                             "previous": "2"}
    assert fold.apply(rec("CONFIG_RECORD", 60, **setting, value="1")) == []  # unchanged
    removed = fold.apply(rec("CONFIG_RECORD", 70, **setting, value=None))
    assert json.loads(removed[0]["detail"])["value"] is None and "orders" not in \
        fold.topic_min_isr
    other = {**setting, "name": "segment.bytes"}  # not a durability setting: no row
    assert fold.apply(rec("CONFIG_RECORD", 80, **other, value="1024")) == []


def test_records_of_one_millisecond_keep_the_logs_order():
    """A restart's fencings and elections come in one batch, stamped with one millisecond:
    each record gets a microsecond more than the one before, so ordering by time keeps
    the log's order (which leader change came first); a clock that went back keeps its
    own time, and a replay gives the same times."""
    def times(fold: MetadataFold) -> list:
        rows = created(fold)
        for ms, isr, leader in ((10, [1, 2], -2), (10, [2], 2), (10, [2], -1),
                                (10, [2], 2), (11, [1, 2], -2), (5, [1, 2, 3], -2)):
            change = {"isr": isr} | ({"leader": leader} if leader != -2 else {})
            rows += fold.apply(rec("PARTITION_CHANGE_RECORD", ms, partitionId=0,
                                   topicId="T1", **change))
        return [(r["kind"], r["event_time"]) for r in rows]

    got = times(MetadataFold())
    base = datetime.fromtimestamp(T0 / 1000, UTC)
    us = [round((t - base).total_seconds() * 1_000_000) for _, t in got]
    assert [k for k, _ in got][:4] == ["first_seen", "isr_shrink", "leader_change",
                                       "isr_shrink"]
    # one record's rows share its time; the next record in the same ms is a us later
    assert us[1] == 10_000 and us[2] == us[3] == 10_001
    assert sorted(us[1:-1]) == us[1:-1] and us[-2] == 11_000  # a later ms: its own time
    assert us[-1] == 5_000  # the clock went back: kept
    assert times(MetadataFold()) == got


def test_a_change_to_a_partition_never_seen_created_is_a_counted_skip():
    fold = MetadataFold()
    created(fold)
    rows = fold.apply(rec("PARTITION_CHANGE_RECORD", 10, partitionId=7, topicId="T1", isr=[1]))
    assert rows == [] and fold.unknown_changes == 1
    # the partitions it knows still change
    assert kinds(fold.apply(rec("PARTITION_CHANGE_RECORD", 20, partitionId=0, topicId="T1",
                                isr=[1, 2]))) == ["isr_shrink"]
    assert fold.unknown_changes == 1


def polled(at: datetime, *rows: dict) -> Polled:
    return Polled([(state_of({"partition": 0, **r}), at) for r in rows])


def fenced(broker: int, kind="broker_fenced") -> dict:
    return {"partition": -1, "kind": kind, "detail": json.dumps({"broker": broker})}


def test_changes_the_polls_wrote_while_the_log_was_late_are_not_written_again():
    fold = MetadataFold()
    created(fold)
    created(fold, name="payments", tid="T2")
    polled_at = datetime.fromtimestamp((T0 + 100) / 1000, UTC)
    # the polls wrote orders/0's ISR shrink and broker 3's fencing at T0+100
    fold.polled.update({("orders", 0): polled(polled_at, {"leader": 1, "isr": [2, 1],
                                                          "leader_epoch": 0}),
                        ("", -1): Polled([(state_of(fenced(3)), polled_at)])})
    assert fold.apply(rec("PARTITION_CHANGE_RECORD", 50, partitionId=0, topicId="T1",
                          isr=[1, 2])) == []
    assert fold.apply(rec("FENCE_BROKER_RECORD", 60, id=3, epoch=1)) == []
    # another partition's change in that span: the polls did not write it, the log does
    late = fold.apply(rec("PARTITION_CHANGE_RECORD", 70, partitionId=0, topicId="T2",
                          isr=[1, 2]))
    assert kinds(late) == ["isr_shrink"] and late[0]["topic"] == "payments"
    # the active controller is never polled; after the polls, every row again, at its time
    assert kinds(fold.apply(rec("LEADER_CHANGE", 80, leaderId=2))) == ["controller_change"]
    after = fold.apply(rec("PARTITION_CHANGE_RECORD", 150, partitionId=0, topicId="T1",
                           isr=[1]))
    assert kinds(after)[0] == "isr_shrink"
    assert after[0]["event_time"] == datetime.fromtimestamp((T0 + 150) / 1000, UTC)
    assert not fold.polled.get(("orders", 0))


def test_a_flap_between_two_polls_is_written_from_the_log_after_the_polled_row():
    """The polls saw orders/0 go from leader 1 to leader 2 and broker 1 fenced; the log,
    late, holds a leader 3 between them, and broker 2 fenced and unfenced meanwhile: those
    the polls never wrote are written, and a change the log gives before the poll's time
    that follows a polled state is timed after it (a timeline orders by time)."""
    fold = MetadataFold()
    created(fold)
    polled_at = datetime.fromtimestamp((T0 + 100) / 1000, UTC)
    fold.polled.update({("orders", 0): polled(polled_at, {"leader": 2, "isr": [2, 3],
                                                          "leader_epoch": None}),
                        ("", -1): Polled([(state_of(fenced(1)), polled_at)])})
    via = fold.apply(rec("PARTITION_CHANGE_RECORD", 10, partitionId=0, topicId="T1",
                         leader=3, isr=[2, 3]))
    assert kinds(via)[:2] == ["leader_change", "isr_shrink"] and via[0]["leader"] == 3
    assert {r["event_time"] for r in via} == {datetime.fromtimestamp((T0 + 10) / 1000, UTC)}
    # the state the polls wrote (their epoch unknown: it matches any): not again
    assert fold.apply(rec("PARTITION_CHANGE_RECORD", 20, partitionId=0, topicId="T1",
                          leader=2)) == []
    assert fold.apply(rec("FENCE_BROKER_RECORD", 30, id=1, epoch=1)) == []
    flap = fold.apply(rec("FENCE_BROKER_RECORD", 40, id=2, epoch=1)) \
        + fold.apply(rec("UNFENCE_BROKER_RECORD", 50, id=2, epoch=1))
    assert kinds(flap) == ["broker_fenced", "broker_unfenced"]
    # a change after the polled state, before the poll's time: just after the polled row
    later = fold.apply(rec("PARTITION_CHANGE_RECORD", 60, partitionId=0, topicId="T1",
                           leader=1))
    assert kinds(later) == ["leader_change"]
    assert later[0]["event_time"] == polled_at + timedelta(microseconds=1)


def test_a_state_the_log_arrives_at_twice_is_muted_once():
    """The polls wrote an ISR shrink to [1, 2] once; the log shrinks, grows back and
    shrinks again (Kafka keeps the epoch through ISR changes): the second shrink is
    written, so the record ends where the partition is. The same for a broker fenced,
    unfenced and fenced again."""
    fold = MetadataFold()
    created(fold)
    polled_at = datetime.fromtimestamp((T0 + 100) / 1000, UTC)
    fold.polled.update({("orders", 0): polled(polled_at, {"leader": 1, "isr": [1, 2],
                                                          "leader_epoch": 0}),
                        ("", -1): Polled([(state_of(fenced(3)), polled_at)])})
    rows = []
    for ms, isr in ((10, [1, 2]), (20, [1, 2, 3]), (30, [1, 2])):
        rows += fold.apply(rec("PARTITION_CHANGE_RECORD", ms, partitionId=0, topicId="T1",
                               isr=isr))
    assert kinds(rows) == ["isr_expand", "isr_shrink"]
    assert [r["event_time"] for r in rows] == [polled_at + timedelta(microseconds=n)
                                               for n in (1, 2)]
    brokers = []
    for ms, kind in ((40, "FENCE_BROKER_RECORD"), (50, "UNFENCE_BROKER_RECORD"),
                     (60, "FENCE_BROKER_RECORD")):
        brokers += fold.apply(rec(kind, ms, id=3, epoch=1))
    assert kinds(brokers) == ["broker_unfenced", "broker_fenced"]


def test_a_change_polled_without_its_epoch_still_asks_where_the_old_epoch_ends():
    """A poll that could ask no broker (a quorum coming back) wrote orders/0's change from
    leader 3 to leader 1 without its epoch: it raises no question of where leader 3's
    epoch ends. The log's row of that change, late, is not written again, yet it is kept
    (:meth:`MetadataFold.take_muted`) with its epoch, and raises the question; taken once."""
    from kafka_audit.jobs.watcher.epoch_ends import EpochEnds

    fold = MetadataFold()
    created(fold, leader=3)
    fold.apply(rec("PARTITION_CHANGE_RECORD", 10, partitionId=0, topicId="T1", leader=2))
    fold.apply(rec("PARTITION_CHANGE_RECORD", 20, partitionId=0, topicId="T1", leader=3))
    ends = EpochEnds()
    ends.seed(("orders", 0), 3, 2)  # leader 3 at epoch 2, as the watcher saw it
    polled_at = datetime.fromtimestamp((T0 + 100) / 1000, UTC)
    row = {"event_time": polled_at, "topic": "orders", "partition": 0,
           "kind": "leader_change", "leader": 1, "isr": [1, 2], "leader_epoch": None}
    ends.follow([row])
    assert ends.pending == []  # no epoch: no question
    fold.polled[("orders", 0)] = polled(polled_at, row)
    assert fold.apply(rec("PARTITION_CHANGE_RECORD", 50, partitionId=0, topicId="T1",
                          leader=1, isr=[1, 2])) == []
    muted = fold.take_muted()
    assert [(r["kind"], r["leader"], r["leader_epoch"]) for r in muted] == [
        ("leader_change", 1, 3)]
    assert fold.take_muted() == []
    ends.follow(muted)
    assert [(q.old_leader, q.epoch, q.new_leader, q.new_epoch)
            for q in ends.pending] == [(3, 2, 1, 3)]


def test_the_muted_changes_come_in_the_logs_order_with_the_written():
    """The tail hands the watcher the rows to write and, among them in the log's order,
    the muted leader changes: a muted change followed by one no poll saw (written) both
    raise their question; the later one first would leave the muted one too old to."""
    from kafka_audit.jobs.watcher.epoch_ends import EpochEnds

    fold = MetadataFold()
    created(fold, leader=3)  # leader 3 at epoch 0
    tail = MetadataTail([], fold, 3)
    polled_at = datetime.fromtimestamp((T0 + 100) / 1000, UTC)
    tail.polled([{"event_time": polled_at, "topic": "orders", "partition": 0,
                  "kind": "leader_change", "leader": 1, "isr": [1, 2],
                  "leader_epoch": None}], polled_at)
    tail.take(rec("PARTITION_CHANGE_RECORD", 50, partitionId=0, topicId="T1", leader=1,
                  isr=[1, 2]))  # muted: the polled row stands for it
    tail.take(rec("PARTITION_CHANGE_RECORD", 60, partitionId=0, topicId="T1", leader=2,
                  isr=[1, 2]))  # written: no poll saw it
    written, changes = tail.drain_with_muted()
    assert [(r["kind"], r["leader"]) for r in written] == [("leader_change", 2)]
    assert [(r["kind"], r["leader"], r["leader_epoch"]) for r in changes] == [
        ("leader_change", 1, 1), ("leader_change", 2, 2)]
    assert tail.drain_with_muted() == ([], [])
    ends = EpochEnds()
    ends.seed(("orders", 0), 3, 0)
    ends.follow(changes)
    assert [(q.old_leader, q.epoch, q.new_leader, q.new_epoch) for q in ends.pending] == [
        (3, 0, 1, 1), (1, 1, 2, 2)]


def test_a_polled_state_at_another_epoch_is_another_change():
    fold = MetadataFold()
    created(fold)
    polled_at = datetime.fromtimestamp((T0 + 100) / 1000, UTC)
    fold.polled[("orders", 0)] = polled(polled_at, {"leader": 1, "isr": [1, 2, 3],
                                                    "leader_epoch": 9})
    assert kinds(fold.apply(rec("PARTITION_CHANGE_RECORD", 60, partitionId=0, topicId="T1",
                                leader=1)))[0] == "leader_reelected"


@st.composite
def late_log_and_polls(draw):
    """One partition's changes in the log (10 ms apart), and the polls made while the log
    was late: each sees the state at its view time and stamps its rows when its lookups
    end (up to 30 ms later); the next poll's view comes after."""
    n = draw(st.integers(1, 12))
    changes = [(draw(st.sampled_from([1, 2, 3, -1])),
                draw(st.lists(st.sampled_from([1, 2, 3]), min_size=1, max_size=3, unique=True)))
               for _ in range(n)]
    polls, t = [], draw(st.integers(0, 20))
    while t < 10 * (n + 2):
        stamp = t + draw(st.integers(0, 30))
        polls.append((t, stamp, draw(st.booleans())))  # view, stamp, epoch known
        t = stamp + draw(st.integers(1, 25))
    return changes, polls


@settings(max_examples=300, deadline=None)
@given(late_log_and_polls())
def test_the_polls_and_the_late_log_together_give_each_state_once_in_order(case):
    """Whatever the polls saw of a partition while the log was late, the rows written (the
    polls' and the log's not muted), in time order, go through the log's states exactly
    (a repeat of the same state aside), ending where the log ends."""
    changes, polls = case
    states = [(1, (1, 2, 3), 0)]  # (leader, ISR, epoch) after each record, as Kafka has it
    records = []
    for i, (leader, isr) in enumerate(changes):
        prev = states[-1]
        epoch = prev[2] + 1 if leader != prev[0] else prev[2]
        data = {"isr": isr} if leader == prev[0] else {"isr": isr, "leader": leader}
        records.append(rec("PARTITION_CHANGE_RECORD", 10 * (i + 1), partitionId=0,
                           topicId="T1", **data))
        states.append((leader, tuple(sorted(isr)), epoch))
    ms = lambda x: datetime.fromtimestamp((T0 + x) / 1000, UTC)  # noqa: E731

    def at(view: int) -> tuple:  # the state the log holds at a poll's view time
        return states[min(view // 10, len(changes))]

    fold = MetadataFold()
    created(fold)
    tail = MetadataTail([], fold, 3)
    written, seen = [], states[0]
    for view, stamp, known in polls:
        leader, isr, epoch = at(view)
        if (leader, isr, epoch) != seen:  # a change the poll saw: its row, at its stamp
            row = {"event_time": ms(stamp), "topic": "orders", "partition": 0,
                   "kind": "polled", "leader": leader, "isr": list(isr),
                   "leader_epoch": epoch if known else None}
            written.append(row)
            tail.polled([row], ms(stamp))
        seen = (leader, isr, epoch)
    for r in records:
        written += fold.apply(r)

    def norm(s: tuple) -> tuple:
        return (s[0], s[1], s[2] if s[0] >= 0 else None)

    got = []
    for r in sorted(written, key=lambda r: r["event_time"]):
        s = (r["leader"], tuple(sorted(r["isr"])), r["leader_epoch"])
        if got and got[-1][:2] == s[:2] and None in (got[-1][2], s[2]):
            continue  # the same state, one row without the epoch
        if not got or norm(got[-1]) != norm(s):
            got.append(s)
    want = []
    for s in states[1:]:
        if not want or norm(want[-1]) != norm(s):
            want.append(s)
    if want and norm(want[0]) == norm(states[0]):
        want = want[1:]  # no change from the created state: no row
    assert [norm(s)[:2] for s in got] == [norm(s)[:2] for s in want], (
        changes, polls, [(r['event_time'].isoformat()[17:], r['kind'], r['leader'], r['isr'])
                         for r in written])
    # and the epochs where both know them
    assert all(g[2] is None or w[0] < 0 or g[2] == w[2] for g, w in zip(got, want, strict=True))


def test_eligible_leader_replicas_and_the_recovery_state_name_the_election():
    """The records a 4.x cluster with eligible leader replicas wrote (shapes as
    ``MetadataTail`` printed them on a real one, ``eligible.leader.replicas.version=1``)."""
    fold = MetadataFold(min_isr={"orders": 2})
    created(fold, leader=3, isr=(1, 2, 3))
    fold.apply(rec("PARTITION_CHANGE_RECORD", 10, partitionId=0, topicId="T1", isr=[2, 3]))
    shrunk = fold.apply(rec("PARTITION_CHANGE_RECORD", 20, partitionId=0, topicId="T1",
                            isr=[3], eligibleLeaderReplicas=[2]))
    assert shrunk[0]["eligible_leader_replicas"] == [2]
    assert shrunk[0]["previous_eligible_leader_replicas"] == []
    # the leader lost, the eligible 2 elected in one record: clean
    rows = fold.apply(rec("PARTITION_CHANGE_RECORD", 30, partitionId=0, topicId="T1",
                          isr=[2], leader=2, eligibleLeaderReplicas=[]))
    assert kinds(rows)[:2] == ["leader_change", "elr_election"]
    assert "unclean_election" not in kinds(rows)
    assert rows[0]["previous_eligible_leader_replicas"] == [2]
    assert rows[0]["eligible_leader_replicas"] == []
    # the ISR emptied (the last member fenced), its eligible replicas dropped on an unclean
    # restart, the last known leader elected back: RECOVERING, an unclean election
    fold.apply(rec("PARTITION_CHANGE_RECORD", 40, partitionId=0, topicId="T1",
                   isr=[], leader=-1, eligibleLeaderReplicas=[2], lastKnownElr=[2]))
    assert fold.apply(rec("PARTITION_CHANGE_RECORD", 50, partitionId=0, topicId="T1",
                          eligibleLeaderReplicas=[])) == []  # no event of its own
    back = fold.apply(rec("PARTITION_CHANGE_RECORD", 60, partitionId=0, topicId="T1",
                          isr=[2], leader=2, leaderRecoveryState=1, lastKnownElr=[]))
    assert kinds(back)[:2] == ["leader_change", "unclean_election"]
    # recovered: no election, and the state no longer marks the next one
    fold.apply(rec("PARTITION_CHANGE_RECORD", 70, partitionId=0, topicId="T1",
                   isr=[2, 3], leaderRecoveryState=0))
    handed = fold.apply(rec("PARTITION_CHANGE_RECORD", 80, partitionId=0, topicId="T1",
                            leader=3))
    assert kinds(handed) == ["leader_change"]


def test_a_clear_elr_record_empties_the_eligible_replicas():
    fold = MetadataFold()
    created(fold, leader=3)
    created(fold, name="other", tid="T2", leader=3)
    for tid in ("T1", "T2"):
        fold.apply(rec("PARTITION_CHANGE_RECORD", 10, partitionId=0, topicId=tid, isr=[3],
                       eligibleLeaderReplicas=[1, 2]))
    fold.apply(rec("CLEAR_ELR_RECORD", 20, topicName="orders"))
    assert fold.partitions[("T1", 0)].elr == ()
    assert fold.partitions[("T2", 0)].elr == (1, 2)
    fold.apply(rec("CLEAR_ELR_RECORD", 30, topicName=""))  # every topic's
    assert fold.partitions[("T2", 0)].elr == ()
    # elected from an emptied set: by the ISRs alone again (3 lost, 1 not in its ISR)
    rows = fold.apply(rec("PARTITION_CHANGE_RECORD", 40, partitionId=0, topicId="T2",
                          isr=[1], leader=1))
    assert "unclean_election" in kinds(rows) and "elr_election" not in kinds(rows)
