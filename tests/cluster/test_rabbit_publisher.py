"""The instrumented RabbitMQ publisher (``producers/rabbit.py``) on the real local RabbitMQ
cluster: every publish's outcome (confirmed, nacked, returned, unconfirmed) lands in the
ack ledger exactly as the publisher saw it, and what a queue or stream holds carries the
stamp the publisher built, read back through the same stamp rule as Kafka's records."""

from __future__ import annotations

import time
import uuid

import pika
import pytest

from kafka_audit.producers.rabbit import NACK, RETURNED, AuditedPublisher
from kafka_audit.scenarios.cluster import wait_until
from kafka_audit.schemas.stamp import crc32, stamp_of_amqp
from kafka_audit.schemas.systems import rabbit_key
from kafka_audit.store import read_table

from ..conftest import test_settings


@pytest.fixture
def channel(rabbit):
    conn = pika.BlockingConnection(rabbit.parameters(1))
    yield conn.channel()
    try:
        conn.close()
    except pika.exceptions.AMQPError:  # closed already (by the test, or the broker)
        pass


def declare(channel, kind: str, **arguments) -> str:
    name = f"q-{uuid.uuid4().hex[:8]}"
    channel.queue_declare(name, durable=True, arguments={"x-queue-type": kind, **arguments})
    return name


def ledger(settings, key: str) -> list[dict]:
    rows = [r for r in read_table(settings.table_path("acks"), "acks").to_pylist()
            if r["topic"] == key]
    return sorted(rows, key=lambda r: r["seq"])


def outcomes(rows: list[dict]) -> list[tuple[int, str | None]]:
    """Per seq, the outcome the ledger recorded (the runs spelt out)."""
    return [(r["seq"] + i, r["error_name"]) for r in rows for i in range(r["count"])]


def drain(channel, queue: str) -> list[tuple[dict | None, bytes]]:
    got = []
    while True:
        method, props, body = channel.basic_get(queue, auto_ack=True)
        if method is None:
            return got
        got.append((props.headers, body))


def test_confirmed_publishes_land_in_the_ledger_and_the_queue_holds_their_stamps(
        rabbit, channel, tmp_path):
    # two flushes: the key's first confirms at once (a topic new to the ledger), the rest
    # at the close, however slow the machine (a flush a second cut the run into more when
    # the publishes took longer on a loaded day)
    settings = test_settings(tmp_path, producer={"ledger_flush_seconds": 600})
    queue = declare(channel, "quorum")
    key = rabbit_key("queue", "/", queue)
    bodies = [b"order %d" % i * (i % 7 + 1) for i in range(300)]
    with AuditedPublisher([rabbit.parameters(n) for n in rabbit.nodes], key, "billing-1",
                          settings, keep_record=True) as p:
        assert all(p.publish(b) for b in bodies)
    rows = ledger(settings, key)
    assert outcomes(rows) == p.record == [(i, None) for i in range(300)]
    assert {(r["system"], r["partition"], r["offset"], r["acks"], r["broker"], r["run_id"])
            for r in rows} == {("rabbitmq", 0, None, "persistent", 1, p.run_id)}
    # consecutive seqs through one node with one outcome fold into a run a flush: one, or
    # two when the first flush came before the last confirm
    assert len(rows) <= 2 and rows[0]["seq"] == 0, rows
    assert all(b["seq"] == a["seq"] + a["count"] for a, b in zip(rows, rows[1:], strict=False))
    held = drain(channel, queue)
    stamps = [stamp_of_amqp(headers) for headers, _ in held]
    assert [(s.producer_id, s.run_id, s.seq) for s in stamps] == [
        ("billing-1", p.run_id, i) for i in range(300)]
    assert [body for _, body in held] == bodies
    assert all(s.checksum == crc32(body) for s, (_, body) in zip(stamps, held, strict=True))


def test_a_nack_and_a_return_are_recorded_as_the_broker_answered(rabbit, channel, tmp_path):
    settings = test_settings(tmp_path)
    # a queue that takes three messages and refuses the rest: the broker nacks them
    full = declare(channel, "classic", **{"x-max-length": 3, "x-overflow": "reject-publish"})
    key = rabbit_key("queue", "/", full)
    with AuditedPublisher({1: rabbit.parameters(1)}, key, "p", settings,
                          persistent=False, keep_record=True) as p:
        assert [p.publish(b"x") for _ in range(5)] == [True] * 3 + [False] * 2
    assert outcomes(ledger(settings, key)) == p.record == [(0, None), (1, None), (2, None),
                                                           (3, NACK), (4, NACK)]
    assert {r["acks"] for r in ledger(settings, key)} == {"transient"}
    assert len(drain(channel, full)) == 3
    # a routing key no queue is bound to: the mandatory message comes back
    nowhere = rabbit_key("queue", "/", f"missing-{uuid.uuid4().hex[:8]}")
    with AuditedPublisher({1: rabbit.parameters(1)}, nowhere, "p", settings) as p:
        assert not p.publish(b"x")
    [row] = ledger(settings, nowhere)
    assert (row["error_name"], row["error_code"], row["count"]) == (RETURNED, 312, 1)


def test_a_stream_keeps_the_stamps_read_by_offset(rabbit, channel, tmp_path):
    settings = test_settings(tmp_path)
    stream = declare(channel, "stream")
    key = rabbit_key("stream", "/", stream)
    with AuditedPublisher({2: rabbit.parameters(2)}, key, "s", settings) as p:
        assert all(p.publish(b"event %d" % i) for i in range(50))
    assert {r["broker"] for r in ledger(settings, key)} == {2}
    read: list[tuple[int, int]] = []  # (stream offset, seq)
    channel.basic_qos(prefetch_count=100)

    def on_message(ch, method, props, body):
        stamp = stamp_of_amqp(props.headers)
        assert stamp.checksum == crc32(body) and stamp.run_id == p.run_id
        read.append((props.headers["x-stream-offset"], stamp.seq))
        ch.basic_ack(method.delivery_tag)

    tag = channel.basic_consume(stream, on_message, arguments={"x-stream-offset": "first"})
    wait_until(lambda: channel.connection.process_data_events(0.2) or len(read) >= 50, 30,
               "the stream read from its first offset")
    channel.basic_cancel(tag)
    assert [seq for _, seq in read] == list(range(50))
    assert [o for o, _ in read] == sorted(o for o, _ in read)


def test_a_killed_node_costs_at_most_the_publish_in_flight_and_the_publisher_moves_on(
        rabbit, channel, tmp_path):
    """A quorum queue on three nodes; the publisher's node killed between two publishes:
    the next publish finds the connection gone (recorded unconfirmed, or confirmed if it
    was not yet), the publisher connects to the next node, and every confirmed message is
    in the queue (a majority kept it)."""
    settings = test_settings(tmp_path)
    queue = declare(channel, "quorum")
    key = rabbit_key("queue", "/", queue)
    with AuditedPublisher({n: rabbit.parameters(n) for n in rabbit.nodes}, key, "k",
                          settings, first=2, keep_record=True) as p:
        assert all(p.publish(b"before %d" % i) for i in range(100))
        rabbit.kill(2)
        for i in range(100):
            p.publish(b"after %d" % i)
        assert p.node == 3
    try:
        rows = ledger(settings, key)
        assert outcomes(rows) == p.record and len(p.record) == 200
        assert [r["broker"] for r in rows][0] == 2 and rows[-1]["broker"] == 3
        assert {e for _, e in p.record} <= {None, "UNCONFIRMED"}
        assert sum(e is not None for _, e in p.record) <= 1
        held = {stamp_of_amqp(h).seq for h, _ in drain(channel, queue)}
        assert {s for s, e in p.record if e is None} <= held
    finally:
        rabbit.start(2)
        wait_until(rabbit.clustered, 120, "node 2 back in the cluster")


def test_a_message_that_cannot_be_encoded_is_refused_and_uses_no_sequence(
        rabbit, channel, tmp_path):
    settings = test_settings(tmp_path)
    queue = declare(channel, "classic")
    key = rabbit_key("queue", "/", queue)
    with AuditedPublisher({1: rabbit.parameters(1)}, key, "e", settings,
                          keep_record=True) as p:
        with pytest.raises(ValueError, match="cannot be encoded"):
            p.publish(b"x", headers={"price": 1.5})  # AMQP 0-9-1 in pika: no float
        assert p.publish(b"y")
    assert p.record == [(0, None)] == outcomes(ledger(settings, key))
    [(headers, body)] = drain(channel, queue)
    assert body == b"y" and stamp_of_amqp(headers).seq == 0


def test_a_connection_closed_while_idle_is_opened_again_before_the_next_publish(
        rabbit, channel, tmp_path):
    """The broker closes every connection (as it does one whose heartbeats stopped): the
    next publish notices first and connects again; nothing is recorded unconfirmed."""
    settings = test_settings(tmp_path)
    queue = declare(channel, "quorum")
    key = rabbit_key("queue", "/", queue)
    with AuditedPublisher([rabbit.parameters(n) for n in rabbit.nodes], key, "idle",
                          settings, keep_record=True) as p:
        assert p.publish(b"a")
        rabbit.ctl(1, "close_all_connections", "a test closes every connection")
        wait_until(lambda: not rabbit.api(1, "connections"), 30, "every connection closed")
        assert p.publish(b"b") and p.record == [(0, None), (1, None)]
    conn = pika.BlockingConnection(rabbit.parameters(1))
    assert [stamp_of_amqp(h).seq for h, _ in drain(conn.channel(), queue)] == [0, 1]
    conn.close()


def test_a_publish_the_broker_never_answers_is_given_up_after_the_confirm_timeout(
        rabbit, channel, tmp_path):
    """A memory alarm (the watermark at 0) blocks every publishing connection: the broker
    stops reading them, no confirm comes. The publish is recorded unconfirmed once
    ``confirm_timeout`` passed, instead of waiting for ever; after the alarm clears, the
    next publish connects anew and is confirmed."""
    settings = test_settings(tmp_path)
    queue = declare(channel, "classic")
    key = rabbit_key("queue", "/", queue)
    with AuditedPublisher({1: rabbit.parameters(1)}, key, "blocked", settings,
                          confirm_timeout=2, keep_record=True) as p:
        assert p.publish(b"before")
        rabbit.ctl(1, "set_vm_memory_high_watermark", "0")
        try:
            wait_until(lambda: rabbit.api(1, "nodes/" + rabbit.cfg.node_name(1))["mem_alarm"],
                       30, "node 1's memory alarm")
            start = time.monotonic()
            assert not p.publish(b"blocked")
            waited = time.monotonic() - start
        finally:
            rabbit.ctl(1, "set_vm_memory_high_watermark", "0.4")
        wait_until(lambda: not rabbit.api(1, "nodes/" + rabbit.cfg.node_name(1))["mem_alarm"],
                   30, "node 1's memory alarm cleared")
        assert p.publish(b"after")
    assert 2 <= waited < 30
    assert p.record == [(0, None), (1, "UNCONFIRMED"), (2, None)] == outcomes(
        ledger(settings, key))
    conn = pika.BlockingConnection(rabbit.parameters(1))  # the fixture's idled past heartbeats
    seqs = [stamp_of_amqp(h).seq for h, _ in drain(conn.channel(), queue)]
    conn.close()
    assert seqs[0] == 0 and seqs[-1] == 2 and set(seqs) <= {0, 1, 2}
