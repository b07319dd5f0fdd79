"""The one rate-limited produce loop (``producers/load.py``): every sequence number sent
once and in order, a full queue retried rather than dropped, the gate obeyed, the pace
kept. The producer is a stand-in recording calls: the loop's own logic, nothing of Kafka."""

from __future__ import annotations

import time

from kafka_audit.producers.load import SEND, STOP, WAIT, Pacer, produce_paced


class _Producer:
    def __init__(self, full_every: int = 0) -> None:
        self.values: list[bytes] = []
        self.partitions: list[int | None] = []
        self.polls: list[float] = []
        self.full_every, self.calls = full_every, 0

    def produce(self, topic, value, partition=None):
        self.calls += 1
        if self.full_every and self.calls % self.full_every == 0:
            raise BufferError("Local: Queue full")
        self.values.append(value)
        self.partitions.append(partition)

    def poll(self, timeout):
        self.polls.append(timeout)


def _seqs(p: _Producer) -> list[int]:
    return [int.from_bytes(v[:12], "big") for v in p.values]


def test_every_write_once_in_order_and_a_full_queue_retried():
    p, marks = _Producer(full_every=7), []
    sent = produce_paced(p, "t", Pacer(0), lambda n: STOP if n >= 1000 else SEND, b"x" * 88,
                         partition=0, every=200, on_every=marks.append)
    assert sent == 1000
    assert _seqs(p) == list(range(1000))  # the 142 refused tries sent again, none lost
    assert all(len(v) == 100 and v.endswith(b"x" * 88) for v in p.values)
    assert set(p.partitions) == {0}
    assert marks == [200, 400, 600, 800, 1000]
    assert p.polls.count(0.05) == p.calls - 1000  # a wait for each refusal


def test_wait_sends_nothing_until_the_gate_opens():
    p, asked = _Producer(), []

    def gate(n: int) -> str:
        asked.append(n)
        if len(asked) > 20:
            return STOP
        return WAIT if len(asked) <= 10 else SEND

    assert produce_paced(p, "t", Pacer(0), gate, b"") == 10
    assert asked[:11] == [0] * 11 and p.polls[:10] == [0.05] * 10
    assert p.partitions == [None] * 10  # no partition named: the partitioner's choice


def test_the_pace_holds_and_restarts():
    pacer = Pacer(1000)
    assert not pacer.ahead(0)
    assert pacer.ahead(100)  # 100 writes cannot be due a few microseconds in
    pacer.restart(5000)
    assert not pacer.ahead(5000) and pacer.ahead(5100)
    assert not Pacer(0).ahead(10**9)  # rate 0: as fast as possible

    p = _Producer()
    start = time.monotonic()
    produce_paced(p, "t", Pacer(2000), lambda n: STOP if n >= 200 else SEND, b"")
    # 200 writes at 2,000 a second cannot finish before the 199th is due (99.5 ms)
    assert time.monotonic() - start >= 0.099
    assert _seqs(p) == list(range(200))
