"""The RabbitMQ reader's rows (jobs/consume/rabbit_reader.py) from deliveries as pika hands
them over, into a real Delta table: runs, redeliveries, barriers, foreign records, commits
once, and positions going on across a restart. No broker: deliveries are pika's own
``Basic.Deliver`` and ``BasicProperties``."""

import os
import time

import pytest
from pika import BasicProperties
from pika.spec import Basic

from kafka_audit.jobs.consume.rabbit_reader import RabbitReader
from kafka_audit.schemas.stamp import (
    FORGED,
    MALFORMED,
    NO_STAMP,
    StampMac,
    amqp_barrier,
    amqp_headers,
    build_stamp,
    crc32,
)
from kafka_audit.schemas.systems import rabbit_key
from kafka_audit.settings import Settings
from kafka_audit.store import read_table

Q = rabbit_key("queue", "/", "orders")
NOW_US = time.time_ns() // 1000  # a barrier's time is within a day of the reader's clock


class _Channel:
    is_open = False  # nothing to acknowledge to


def deliver(reader, tag: int, headers: dict | None, body: bytes = b"x",
            redelivered: bool = False) -> None:
    reader._delivered(reader.sources[Q], _Channel(), Basic.Deliver(delivery_tag=tag,
                      redelivered=redelivered), BasicProperties(headers=headers), body)


def stamped(seq: int, body: bytes = b"x", mac=None) -> dict:
    return amqp_headers(build_stamp("p", "r", seq, crc32(body)), mac)


def rows(settings) -> list[tuple]:
    t = read_table(settings.table_path("consumed"), "consumed").to_pylist()
    return sorted((r["offset"], r["count"], r["status"], r["stamped"], r["stamp_error"],
                   r["seq"], r["checksum_ok"], r["system"]) for r in t)


def test_deliveries_become_runs_and_land_once(tmp_path):
    s = Settings(home=tmp_path)
    reader = RabbitReader(s, {}, [Q])
    for i in range(5):
        deliver(reader, i + 1, stamped(i))
    deliver(reader, 6, stamped(5), redelivered=True)
    deliver(reader, 7, amqp_barrier(NOW_US))
    deliver(reader, 8, None)
    deliver(reader, 9, {"kaudit": b"\x01"})
    deliver(reader, 10, stamped(6), body=b"not what was stamped")
    assert reader.flush() == 6 and reader.flush() == 0
    assert rows(s) == [
        (0, 5, "record", True, None, 0, True, "rabbitmq"),
        (5, 1, "redelivered", True, None, 5, True, "rabbitmq"),
        (6, 1, "barrier", False, None, NOW_US, None, "rabbitmq"),
        (7, 1, "record", False, NO_STAMP, None, None, "rabbitmq"),
        (8, 1, "record", False, MALFORMED, None, None, "rabbitmq"),
        (9, 1, "record", True, None, 6, False, "rabbitmq")]
    # a reader started again goes on from the table's highest position, in a new version
    again = RabbitReader(s, {}, [Q])
    deliver(again, 1, stamped(7))
    again.flush()
    assert rows(s)[-1][:2] == (10, 1) and again.version == reader.version + 1


def test_with_a_stamp_key_a_stamp_or_barrier_without_its_mac_is_forged(tmp_path):
    key = tmp_path / "stamp.key"
    key.write_bytes(b"k" * 32)
    os.chmod(key, 0o600)
    s = Settings(home=tmp_path, stamp={"key_file": str(key)})
    reader = RabbitReader(s, {}, [Q])
    mac = StampMac(b"k" * 32)
    deliver(reader, 1, stamped(0, mac=mac))
    deliver(reader, 2, stamped(1))
    deliver(reader, 3, amqp_barrier(NOW_US, mac))
    deliver(reader, 4, amqp_barrier(NOW_US + 1))
    reader.flush()
    assert [(r[2], r[4], r[5]) for r in rows(s)] == [
        ("record", None, 0), ("record", FORGED, None), ("barrier", None, NOW_US),
        ("record", FORGED, None)]


def test_a_reader_needs_something_to_read(tmp_path):
    with pytest.raises(ValueError, match="at least one"):
        RabbitReader(Settings(home=tmp_path), {}, [])
    with pytest.raises(ValueError, match="not a RabbitMQ ledger key"):
        RabbitReader(Settings(home=tmp_path), {}, ["orders"])


def test_a_barrier_no_reader_wrote_is_malformed_and_one_after_an_unclean_loss_withheld(
        tmp_path):
    import struct

    s = Settings(home=tmp_path)
    reader = RabbitReader(s, {}, [Q], barrier_holdoff_seconds=60)
    now_us = time.time_ns() // 1000
    deliver(reader, 1, amqp_barrier(now_us + 2 * 86_400 * 10**6))  # two days ahead
    deliver(reader, 2, {"kaudit-barrier": struct.pack(">Q", 2**63)})  # no signed 64 bits
    deliver(reader, 3, amqp_barrier(now_us))
    reader._conn = _Channel()  # a connection lost uncleanly: barriers withheld a while
    reader._lost()
    deliver(reader, 4, amqp_barrier(now_us))
    reader.flush()
    assert [(r[1], r[2], r[4], r[5]) for r in rows(s)] == [
        (2, "record", MALFORMED, None), (1, "barrier", None, now_us),
        (1, "barrier", None, None)]
    assert reader.barriers_withheld == 1


def test_a_batch_whose_commit_failed_after_landing_is_written_once(tmp_path, monkeypatch):
    from kafka_audit.jobs.consume import rabbit_reader

    s = Settings(home=tmp_path)
    reader = RabbitReader(s, {}, [Q])
    real, calls = rabbit_reader.append_arrow_once, []

    def lands_then_fails(*args, **kwargs):
        calls.append(args[4])
        done = real(*args, **kwargs)
        if len(calls) == 1:
            raise OSError("the commit landed, then the answer was lost")
        return done

    monkeypatch.setattr(rabbit_reader, "append_arrow_once", lands_then_fails)
    deliver(reader, 1, stamped(0))
    with pytest.raises(OSError):
        reader.flush()
    deliver(reader, 2, stamped(1))  # read meanwhile: the next batch
    assert reader.flush() == 1 + 1
    assert calls == [1, 1, 2]  # the failed batch alone, again, then the new one
    assert [(r[0], r[5]) for r in rows(s)] == [(0, 0), (1, 1)]


def test_a_key_of_another_vhost_than_the_connections_is_refused(tmp_path):
    from pika import ConnectionParameters

    from kafka_audit.producers.rabbit import AuditedPublisher

    nodes = {1: ConnectionParameters("127.0.0.1", 1, virtual_host="prod")}
    with pytest.raises(ValueError, match="one reader per vhost"):
        RabbitReader(Settings(home=tmp_path), nodes, [Q])
    with pytest.raises(ValueError, match="names vhost '/'"):
        AuditedPublisher(nodes, Q, "p", Settings(home=tmp_path))


def test_positions_go_on_from_the_readers_own_rows_not_an_audits_lookups(tmp_path):
    """A restarted reader goes on after the highest position it wrote; the rows an audit
    pass's lookup added (offset -1, a count of seqs: no positions) do not move it (for a
    stream that would skip messages)."""
    from datetime import UTC, datetime

    from kafka_audit.jobs.audit.hot_state import consumed_row
    from kafka_audit.jobs.core.model import ReadRun
    from kafka_audit.store import append_rows

    settings = Settings(home=tmp_path)
    reader = RabbitReader(settings, {}, [Q])
    for tag, seq in enumerate(range(5), 1):
        deliver(reader, tag, stamped(seq))
    reader.flush()
    append_rows(settings.table_path("consumed"), "consumed", [consumed_row(ReadRun(
        Q, 0, -1, 10_000, "p", "r", 0, datetime.now(UTC), source="reread",
        status="lookup"), 7)])
    assert RabbitReader(settings, {}, [Q]).sources[Q].position == 5


def test_a_node_through_which_nothing_can_be_consumed_is_passed_for_the_next(
        tmp_path, monkeypatch):
    """Connecting: through node 1 no queue can be consumed (refused), through node 2 it
    can; every node is tried in turn from the first, none skipped. (pika's connection
    replaced by a scripted one: the order of the tries is the logic under test.)"""
    import pika

    tried = []

    class Channel:
        is_open = True

        def __init__(self, node):
            self.node = node

        def add_on_cancel_callback(self, _cb):
            pass

        def basic_qos(self, **_kw):
            pass

        def basic_consume(self, *_a, **_kw):
            if self.node == 1:
                self.is_open = False
                raise pika.exceptions.ChannelClosedByBroker(404, "home node down")

        def close(self):
            self.is_open = False

    class Connection:
        is_open = True

        def __init__(self, params):
            self.node = params.port
            tried.append(self.node)

        def channel(self):
            return Channel(self.node)

        def close(self):
            self.is_open = False

    monkeypatch.setattr(pika, "BlockingConnection", Connection)
    nodes = {n: pika.ConnectionParameters("127.0.0.1", n) for n in (1, 2, 3)}
    reader = RabbitReader(Settings(home=tmp_path), nodes, [Q])
    reader._connect()
    assert tried == [1, 2] and reader.node == 2 and reader.sources[Q].channel is not None
