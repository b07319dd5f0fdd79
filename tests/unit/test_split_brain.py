"""Two leaders at once: the Metadata v8 codec the watcher asks each broker with, the
watcher's split-brain events from per-broker views, the cause of a loss acknowledged
then, and the observed split-brain window."""

import struct

import pytest

from kafka_audit.jobs.core.model import ClusterEvent, Finding
from kafka_audit.jobs.core.rules import likely_cause, split_brain_spans
from kafka_audit.jobs.core.windows import partition_windows, two_leader_windows
from kafka_audit.jobs.watcher.broker_views import (
    BrokerView,
    claimants,
    decode_response,
    decode_sasl_authenticate,
    decode_sasl_handshake,
    encode_request,
    encode_sasl_authenticate,
    encode_sasl_handshake,
)
from kafka_audit.schemas.verdicts import Cause

from ..support.histories import ack, at, leader_change


def s(v):
    b = v.encode()
    return struct.pack(">h", len(b)) + b


def ints(values):
    return struct.pack(">i", len(values)) + b"".join(struct.pack(">i", v) for v in values)


def response(corr, partitions, brokers=((1, "h1", 9091), (2, "h2", 9092))):
    """A Metadata v8 response body, laid out as the protocol says."""
    body = struct.pack(">ii", corr, 0) + struct.pack(">i", len(brokers))
    for node, host, port in brokers:
        body += struct.pack(">i", node) + s(host) + struct.pack(">i", port) + struct.pack(">h", -1)
    body += s("cluster") + struct.pack(">i", 2) + struct.pack(">i", 1)  # one topic
    body += struct.pack(">h", 0) + s("t") + struct.pack(">b", 0) + struct.pack(">i", len(
        partitions))
    for index, leader, epoch, replicas, isr, error in partitions:
        body += struct.pack(">hiii", error, index, leader, epoch) + ints(replicas) + ints(isr)
        body += ints([])
    return body + struct.pack(">i", 0) + struct.pack(">i", 0)


def test_the_metadata_request_and_response_codec():
    req = encode_request(7, "me", ["t", "u"])
    size, key, version, corr = struct.unpack_from(">ihhi", req)
    assert (size, key, version, corr) == (len(req) - 4, 3, 8, 7)
    assert req.endswith(s("t") + s("u") + b"\x00\x00\x00")
    brokers, views = decode_response(response(7, [(0, 2, 5, [2, 3, 1], [3, 2], 0),
                                                  (1, -1, 4, [1, 2, 3], [], 5)]), 7)
    assert brokers == {1: ("h1", 9091), 2: ("h2", 9092)}
    # a partition in error (5: leader not available) has no view
    assert views == {("t", 0): BrokerView(2, 5, (2, 3), (2, 3, 1))}
    with pytest.raises(ValueError, match="another request"):
        decode_response(response(8, []), 7)
    with pytest.raises(ValueError, match="ends early"):
        decode_response(response(7, [(0, 2, 5, [2], [2], 0)])[:-9], 7)


def test_claimants_are_the_brokers_naming_themselves_leader():
    key = ("t", 0)
    stale, new = BrokerView(1, 4, (1, 2, 3), (1, 2, 3)), BrokerView(2, 5, (2, 3), (1, 2, 3))
    assert claimants({1: {key: stale}, 2: {key: new}, 3: {key: new}}, key) == {1: 4, 2: 5}
    assert claimants({2: {key: new}, 3: {key: new}}, key) == {2: 5}  # one view, one leader


def test_the_view_believed_is_the_newest_epochs_then_the_leaders_own():
    from kafka_audit.jobs.watcher.broker_views import freshest

    key = ("t", 0)
    stale, new = BrokerView(1, 4, (1, 2, 3), (1, 2, 3)), BrokerView(2, 5, (2, 3), (1, 2, 3))
    assert freshest({1: {key: stale}, 2: {key: new}, 3: {key: new}}) == {key: new}
    # a partitioned follower (3) keeps the old ISR at the same epoch: the leader's own wins
    shrunk, old_isr = BrokerView(1, 4, (1, 2), (1, 2, 3)), BrokerView(1, 4, (1, 2, 3), (1, 2, 3))
    assert freshest({3: {key: old_isr}, 1: {key: shrunk}, 2: {key: shrunk}}) == {key: shrunk}
    # the leader does not answer: the view most brokers give
    assert freshest({3: {key: old_isr}, 2: {key: shrunk}, 4: {key: shrunk}}) == {key: shrunk}
    assert freshest({}) == {}


def test_the_watcher_writes_two_leaders_seen_by_two_polls_in_a_row(tmp_path):
    from kafka_audit.jobs.watcher.watcher import ClusterWatcher, PartitionView
    from kafka_audit.settings import Settings

    key = ("t", 0)
    stale, new = BrokerView(1, 4, (1, 2, 3), (1, 2, 3)), BrokerView(2, 5, (2, 3), (1, 2, 3))
    answers: dict = {}
    w = ClusterWatcher(Settings(home=tmp_path))
    w.state[key] = PartitionView(2, (2, 3), (1, 2, 3))

    def poll(sec):
        return [(r["kind"], r["event_time"], r["leader"], r["previous_leader"])
                for r in w._split_brain({b: {key: v} for b, v in answers.items()}, ["t"],
                                        at(sec))]

    answers.update({1: stale, 2: new, 3: new})
    assert poll(0) == []  # once: maybe a broker's first moments after a restart
    assert poll(1) == [("split_brain_enter", at(0), 2, 1)]
    assert poll(2) == []  # lasting
    del answers[1]  # the stale one does not answer: no say, the others see one leader
    assert poll(3) == [("split_brain_exit", at(3), 2, 1)]
    answers[1] = stale
    assert poll(4) == [] and poll(5) == [("split_brain_enter", at(4), 2, 1)]
    answers.clear()  # nobody answers: nothing is decided
    assert poll(6) == [] and w.two_leaders == {key: {1: 4, 2: 5}}


def two(t: float, kind: str = "split_brain_enter") -> ClusterEvent:
    return ClusterEvent(at(t), "t", 0, kind, 2, 1)


def test_a_loss_acknowledged_while_two_brokers_led_is_an_isolated_leaders():
    events = [leader_change(10), two(10.5), two(14, "split_brain_exit")]
    assert split_brain_spans(events, at(100)) == [(at(10.5), at(14))]
    assert likely_cause(ack(0, 0, acks="1", t=12), events, at(100)) == Cause.isolated_leader
    # up to a second before the watcher saw it: already the cut-off leader's
    assert likely_cause(ack(0, 0, acks="1", t=9.6), events, at(100)) == Cause.isolated_leader
    assert likely_cause(ack(0, 0, acks="1", t=5), events, at(100)) == Cause.acks1_failover
    # still open: it lasts until now
    assert likely_cause(ack(0, 0, acks="all", t=50), [two(20)], at(100)) == \
        Cause.isolated_leader
    assert likely_cause(ack(0, 0, acks="all", t=50), [two(20)], at(40)) == Cause.unknown


def test_two_leaders_seen_make_a_split_brain_window_with_the_acks_and_losses_inside():
    events = [two(10), two(14, "split_brain_exit"), two(30)]
    ws = two_leader_windows(events, "t", 0)
    assert [(w.start, w.end) for w in ws] == [(at(10), at(14)), (at(30), None)]
    assert ws[0].opened_by.startswith("brokers 1 and 2 each named themselves leader")
    lost = [Finding("lost", "t", 0, "p", "r", 5, 5, 2, "overwritten", at(12.5),
                    Cause.isolated_leader)]
    placed = [ack(5, 5, count=3, t=12), ack(0, 0, count=2, t=20)]
    counted = [w for w in partition_windows("t", 0, events, None, placed, lost)
               if w.kind == "split_brain"]
    assert [(w.start, w.acks, w.losses) for w in counted] == [(at(10), 3, 2), (at(30), 0, 0)]


def test_the_sasl_handshake_and_authenticate_codec():
    # requests: size, key, version, correlation id, client id, then the body (protocol docs)
    hs = encode_sasl_handshake(7, "c", "SCRAM-SHA-512")
    assert hs == struct.pack(">ihhih", 26, 17, 1, 7, 1) + b"c" + struct.pack(">h", 13) + \
        b"SCRAM-SHA-512"
    au = encode_sasl_authenticate(8, "c", b"\0u\0p")
    assert au == struct.pack(">ihhih", 19, 36, 1, 8, 1) + b"c" + struct.pack(">i", 4) + \
        b"\0u\0p"
    # answers: correlation id, error, then the mechanisms / message, token, session lifetime
    answer = struct.pack(">ihi", 7, 0, 2) + struct.pack(">h", 5) + b"PLAIN" + \
        struct.pack(">h", 13) + b"SCRAM-SHA-512"
    assert decode_sasl_handshake(answer, 7) == (0, ["PLAIN", "SCRAM-SHA-512"])
    ok = struct.pack(">ihh", 8, 0, -1) + struct.pack(">i", 3) + b"v=x" + struct.pack(">q", 0)
    assert decode_sasl_authenticate(ok, 8) == (0, None, b"v=x")
    bad = struct.pack(">ihh", 8, 58, 4) + b"nope" + struct.pack(">i", 0)
    assert decode_sasl_authenticate(bad, 8) == (58, "nope", b"")
    with pytest.raises(ValueError):
        decode_sasl_handshake(answer, 9)  # another request's answer
    with pytest.raises(ValueError):
        decode_sasl_authenticate(struct.pack(">ihh", 8, 0, -1) + struct.pack(">i", 9) + b"ab", 8)


def _by(broker, t, offset=100):
    from dataclasses import replace

    return replace(ack(offset, offset, t=t, acks="1"), broker=broker)


def test_a_deposed_leader_acknowledging_is_a_split_brain_seen_in_the_ledger():
    """A leader paused past its session timeout, resumed: it acknowledges at its old epoch
    after another broker was named leader. The ledger's broker (the kaudit plugin) says so,
    whether or not the watcher saw two leaders."""
    from kafka_audit.jobs.core.rules import DEPOSED_SLACK, deposed_at

    seen = ClusterEvent(at(0), "t", 0, "first_seen", 1, None, (1, 2, 3), None)
    change = leader_change(10, leader=2, previous=1)
    events = [seen, change]
    slack = DEPOSED_SLACK.total_seconds()
    assert deposed_at(_by(1, 21), events) == change  # resumed 11 s after the change
    assert likely_cause(_by(1, 21), events, at(60)) == Cause.isolated_leader
    assert deposed_at(_by(1, 10 + slack / 2), events) is None  # a hand-over's last acks
    assert deposed_at(_by(1, 9), events) is None  # acknowledged while it led
    assert deposed_at(_by(2, 21), events) is None  # the new leader
    assert deposed_at(_by(None, 21), events) is None  # the ledger names no broker
    assert likely_cause(_by(None, 21), events, at(60)) != Cause.isolated_leader
    # led again before the ack (a hand-back), or a change the watcher saw late names it
    back = leader_change(15, leader=1, previous=2)
    assert deposed_at(_by(1, 21), [*events, back]) is None
    late = leader_change(20, leader=1, previous=2)
    assert deposed_at(_by(1, 21), [*events, late]) is None
    # a broker never seen leading is not deposed (the watcher saw its election late)
    assert deposed_at(_by(3, 21), events) is None
    # blind since the change: a change back may have gone unseen
    blind = ClusterEvent(at(12), "t", 0, "watcher_blind", until=at(16))
    assert deposed_at(_by(1, 21), [*events, blind]) is None


def test_a_deposed_leaders_losses_open_a_split_brain_window_from_the_change():
    from kafka_audit.jobs.core.windows import deposed_windows

    seen = ClusterEvent(at(0), "t", 0, "first_seen", 1, None, (1, 2, 3), None)
    change = leader_change(10, leader=2, previous=1)
    lost = [Finding("lost", "t", 0, "p", "r", 500, 500, 20, "truncated", at(21),
                    str(Cause.isolated_leader)),
            Finding("lost", "t", 0, "p", "r", 520, 520, 5, "truncated", at(21.8),
                    str(Cause.isolated_leader)),
            Finding("lost", "t", 0, "p", "r", 90, 90, 5, "truncated", at(9),
                    "acks=1 fail-over")]
    ws = partition_windows("t", 0, [seen, change], None, [], lost)
    brain = [w for w in ws if w.kind == "split_brain"]
    assert [(w.start, w.end, w.losses, w.detail["writes_lost_in_it"]) for w in brain] == [
        (at(10), at(21.8), 25, 25)]
    assert "broker 2 named leader" in brain[0].opened_by
    # held by a split-brain window the watcher saw: no second one
    assert deposed_windows(lost, [seen, change], brain, "t", 0) == []
