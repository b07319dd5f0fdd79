"""RabbitMQ audited end to end on the real local cluster: the instrumented publisher's
confirms in the ack ledger, the reader's reads of the queue in ``consumed``, the audit's
barrier rule judging them; the losses equal what a plain consumer's full read cannot
find."""

from __future__ import annotations

import threading
import uuid
from contextlib import contextmanager

import pika
import pyarrow.compute as pc
import pytest

from kafka_audit.jobs.audit.audit_pass import run_audit_pass
from kafka_audit.jobs.consume.rabbit_reader import RabbitReader
from kafka_audit.producers.rabbit import AuditedPublisher
from kafka_audit.scenarios.cluster import wait_until
from kafka_audit.schemas.stamp import stamp_of_amqp
from kafka_audit.schemas.systems import rabbit_key
from kafka_audit.store import read_table

from ..conftest import test_settings


@pytest.fixture
def channel(rabbit):
    conn = pika.BlockingConnection(rabbit.parameters(1))
    yield conn.channel()
    if conn.is_open:
        conn.close()


@contextmanager
def reading(settings, rabbit, key: str):
    reader = RabbitReader(settings, {n: rabbit.parameters(n) for n in rabbit.nodes}, [key],
                          barrier_seconds=0.5, flush_seconds=0.2)
    stop = threading.Event()
    t = threading.Thread(target=reader.run, args=(stop,), daemon=True)
    t.start()
    try:
        yield reader
    finally:
        stop.set()
        t.join(30)


def audit_until_judged(spark, settings, key: str, timeout: float = 120) -> dict[str, int]:
    """Audit passes until no write of ``key`` is pending; its verdicts, counted."""
    def judged():
        summary = run_audit_pass(spark, settings, quality=False)
        state = read_table(settings.table_path("partition_state"), "partition_state",
                           where=(pc.field("pass_id") == summary.pass_id)
                           & (pc.field("topic") == key))
        return state.num_rows and sum(state.column("pending").to_pylist()) == 0

    wait_until(judged, timeout, f"every write of {key} judged", every=1)
    counts: dict[str, int] = {}
    for f in read_table(settings.table_path("findings"), "findings",
                        where=pc.field("topic") == key).to_pylist():
        counts[f["kind"]] = counts.get(f["kind"], 0) + f["count"]
    return counts


def lost_seqs(settings, key: str) -> set[int]:
    return {f["seq"] + i for f in read_table(settings.table_path("findings"), "findings",
                                             where=pc.field("topic") == key).to_pylist()
            if f["kind"] == "lost" for i in range(f["count"])}


def held_seqs(channel, queue: str) -> set[int]:
    """What a plain consumer's full read of the queue finds: the stamps' seqs."""
    out = set()
    while True:
        method, props, _ = channel.basic_get(queue, auto_ack=True)
        if method is None:
            return out
        stamp = stamp_of_amqp(props.headers)
        if stamp is not None:
            out.add(stamp.seq)


def test_a_quorum_queue_read_whole_confirms_every_write(rabbit, channel, spark, tmp_path):
    settings = test_settings(tmp_path)
    queue = f"q-{uuid.uuid4().hex[:8]}"
    channel.queue_declare(queue, durable=True, arguments={"x-queue-type": "quorum"})
    key = rabbit_key("queue", "/", queue)
    with reading(settings, rabbit, key) as reader:
        with AuditedPublisher({n: rabbit.parameters(n) for n in rabbit.nodes}, key, "q",
                              settings) as p:
            assert all(p.publish(b"m%d" % i) for i in range(500))
        wait_until(lambda: reader.deliveries >= 500 and reader.rows_written, 60,
                   "the reader to read every message")
        counts = audit_until_judged(spark, settings, key)
    assert counts == {"confirmed": 500}
    rows = read_table(settings.table_path("consumed"), "consumed",
                      where=pc.field("topic") == key).to_pylist()
    assert {r["system"] for r in rows} == {"rabbitmq"}
    assert sum(r["count"] for r in rows if r["status"] == "record") == 500
    assert any(r["status"] == "barrier" for r in rows)


def test_transient_messages_across_a_restart_are_lost_exactly(rabbit, channel, spark,
                                                              tmp_path):
    """A durable classic queue on node 1, messages published without the persistent flag,
    node 1 restarted before anyone read them: every one is confirmed and gone. The audit
    finds each, and no other: what a full read of the queue cannot find."""
    settings = test_settings(tmp_path)
    queue = f"q-{uuid.uuid4().hex[:8]}"
    channel.queue_declare(queue, durable=True, arguments={"x-queue-type": "classic"})
    key = rabbit_key("queue", "/", queue)
    with AuditedPublisher({1: rabbit.parameters(1)}, key, "t", settings,
                          persistent=False, keep_record=True) as p:
        assert all(p.publish(b"m%d" % i) for i in range(200))
    channel.connection.close()
    rabbit.stop(1)
    rabbit.start(1)
    wait_until(rabbit.clustered, 120, "node 1 back in the cluster")
    with reading(settings, rabbit, key):
        counts = audit_until_judged(spark, settings, key)
    conn = pika.BlockingConnection(rabbit.parameters(1))
    held = held_seqs(conn.channel(), queue)
    conn.close()
    confirmed = {s for s, e in p.record if e is None}
    assert lost_seqs(settings, key) == confirmed - held == set(range(200))
    assert counts == {"lost": 200}
