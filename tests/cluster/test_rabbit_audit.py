"""RabbitMQ audited end to end on the real local cluster: the instrumented publisher's
confirms in the ack ledger, the reader's reads of the queue in ``consumed``, the watcher's
events, the audit's barrier rule judging them; the losses equal what a plain consumer's
full read cannot find (scenarios/rabbit_scenarios.py)."""

from __future__ import annotations

import threading
import uuid
from contextlib import contextmanager

import pika
import pyarrow.compute as pc
import pytest

from kafka_audit.jobs.consume.rabbit_reader import RabbitReader
from kafka_audit.producers.rabbit import AuditedPublisher
from kafka_audit.scenarios.cluster import wait_until
from kafka_audit.scenarios.rabbit_scenarios import (
    RABBIT_SCENARIOS,
    audit_rabbit_until_judged,
    run_rabbit_scenario,
)
from kafka_audit.schemas.systems import rabbit_key
from kafka_audit.store import read_table

from ..conftest import test_settings


def quorum_queue(rabbit, prefix: str) -> str:
    """A new quorum queue (declared through node 1): its ledger key."""
    queue = f"{prefix}-{uuid.uuid4().hex[:8]}"
    conn = pika.BlockingConnection(rabbit.parameters(1))
    conn.channel().queue_declare(queue, durable=True, arguments={"x-queue-type": "quorum"})
    conn.close()
    return rabbit_key("queue", "/", queue)


@contextmanager
def reading(settings, nodes: dict, keys: list[str], **more):
    """A RabbitMQ reader of ``keys`` running in a thread until the block ends."""
    reader = RabbitReader(settings, nodes, keys, barrier_seconds=0.5, flush_seconds=0.2,
                          **more)
    stop = threading.Event()
    t = threading.Thread(target=reader.run, args=(stop,), daemon=True)
    t.start()
    try:
        yield reader
    finally:
        stop.set()
        t.join(30)


def test_a_quorum_queue_read_whole_confirms_every_write(rabbit, spark, tmp_path):
    """The reader beside the publisher, as in production: every write confirmed, each read
    once, barriers among the reads."""
    settings = test_settings(tmp_path)
    key = quorum_queue(rabbit, "q")
    nodes = {n: rabbit.parameters(n) for n in rabbit.nodes}
    with reading(settings, nodes, [key]) as reader:
        with AuditedPublisher(nodes, key, "q", settings) as p:
            assert all(p.publish(b"m%d" % i) for i in range(500))
        wait_until(lambda: reader.deliveries >= 500 and reader.rows_written, 60,
                   "the reader to read every message")
        counts = audit_rabbit_until_judged(spark, settings, key)
    assert counts == {"confirmed": 500}
    rows = read_table(settings.table_path("consumed"), "consumed",
                      where=pc.field("topic") == key).to_pylist()
    assert {r["system"] for r in rows} == {"rabbitmq"}
    assert sum(r["count"] for r in rows if r["status"] == "record") == 500
    assert any(r["status"] == "barrier" for r in rows)


def test_a_confirm_recorded_after_its_reads_were_let_go_is_looked_up_not_lost(
        rabbit, spark, tmp_path):
    """A publisher's ledger that reaches the warehouse late (spooled through an outage):
    its ack rows land after the audit let the reads of their messages go (the read
    retention, 3 s here). A queue cannot be read again: the audit looks the writes up in
    ``consumed`` and judges them confirmed, none lost, the lookups kept as evidence."""
    import time

    from kafka_audit.jobs.audit.audit_pass import run_audit_pass
    from kafka_audit.store import append_rows

    retention = 3.0
    settings = test_settings(tmp_path, audit={"settle_seconds": 1, "interval_seconds": 1,
                                              "beyond_end_seconds": 15,
                                              "read_retention_seconds": retention})
    late = test_settings(tmp_path / "publisher")  # its acks: another warehouse, for now
    key = quorum_queue(rabbit, "late")
    nodes = {n: rabbit.parameters(n) for n in rabbit.nodes}
    with reading(settings, nodes, [key]) as reader:
        with AuditedPublisher(nodes, key, "late", late) as p:
            assert all(p.publish(b"m%d" % i) for i in range(200))
        wait_until(lambda: reader.deliveries >= 200 and reader.rows_written, 60,
                   "the reader to read every message")
        read_by = time.monotonic()
        # passes go on without the acks until the reads are older than the retention
        wait_until(lambda: run_audit_pass(spark, settings, quality=False) is not None
                   and time.monotonic() > read_by + retention + 1, 60,
                   "the reads to outlive the read retention", every=1)
        append_rows(settings.table_path("acks"), "acks",
                    read_table(late.table_path("acks"), "acks").to_pylist())
        counts = audit_rabbit_until_judged(spark, settings, key)
    assert counts == {"confirmed": 200}
    looked = [r for r in read_table(settings.table_path("consumed"), "consumed",
                                    where=pc.field("topic") == key).to_pylist()
              if r["status"] == "lookup"]
    assert looked and {r["source"] for r in looked} == {"reread"}
    assert sum(r["count"] for r in looked) >= 200


def test_a_queue_that_cannot_be_consumed_stops_no_other(rabbit, tmp_path):
    """Two queues read by one reader: a classic queue on node 3 and a quorum queue. Node 3
    stopped: the classic queue cannot be consumed (its only copy is there), the reader's
    status says so, and the quorum queue is read on. Node 3 back: the classic queue is
    consumed again and what it held is read."""
    from kafka_audit.status import StatusWriter, read_statuses

    settings = test_settings(tmp_path)
    classic = f"c-{uuid.uuid4().hex[:8]}"
    conn = pika.BlockingConnection(rabbit.parameters(3))
    conn.channel().queue_declare(classic, durable=True, arguments={
        "x-queue-type": "classic", "x-queue-master-locator": "client-local"})
    conn.close()
    keys = [rabbit_key("queue", "/", classic), quorum_queue(rabbit, "q")]
    nodes = {n: rabbit.parameters(n) for n in rabbit.nodes}
    with AuditedPublisher(nodes, keys[0], "c", settings) as p:
        assert all(p.publish(b"c%d" % i) for i in range(50))

    def records(key: str) -> int:
        return sum(r["count"] for r in read_table(
            settings.table_path("consumed"), "consumed", where=pc.field("topic") == key
        ).to_pylist() if r["status"] == "record")

    rabbit.stop(3)
    try:
        with reading(settings, {n: nodes[n] for n in (1, 2)}, keys, reopen_seconds=1,
                     status=StatusWriter(settings.home_dir, "rabbit-reader")) as reader:
            with AuditedPublisher({n: nodes[n] for n in (1, 2)}, keys[1], "q", settings) as p:
                assert all(p.publish(b"q%d" % i) for i in range(100))
            wait_until(lambda: records(keys[1]) == 100, 60,
                       "the quorum queue read while the classic one cannot be")
            assert reader.sources[keys[0]].channel is None and records(keys[0]) == 0
            status = read_statuses(settings.home_dir)["rabbit-reader"]
            assert status.failing_since is not None and keys[0] in status.error
            rabbit.start(3)
            wait_until(rabbit.clustered, 120, "node 3 back in the cluster")
            wait_until(lambda: records(keys[0]) == 50, 60,
                       "the classic queue consumed again once its node is back")
            wait_until(lambda: read_statuses(settings.home_dir)["rabbit-reader"]
                       .failing_since is None, 30, "the reader's status good again")
    finally:
        if rabbit.pid(3) is None:
            rabbit.start(3)
            wait_until(rabbit.clustered, 120, "node 3 back in the cluster")


@pytest.mark.parametrize("name", list(RABBIT_SCENARIOS))
def test_each_rabbit_scenario_matches_a_full_read(rabbit, spark, tmp_path, name):
    """Every scenario of issue 43: the audit's losses are exactly the confirmed messages a
    full read of the queue cannot find, each with a cause the scenario allows; the loss
    scenarios lose, the others do not."""
    settings = test_settings(tmp_path)
    report = run_rabbit_scenario(name, settings, rabbit, spark)
    print(report.text())
    assert report.ok, report.text()
    assert report.confirmed >= 200
    # each loss names the RabbitMQ setting that let it happen
    assert len(report.settings_named) == (1 if report.expects_loss else 0), report.text()


def test_kafka_audit_run_reads_and_watches_the_queues_of_its_rabbitmq_section(
        rabbit, tmp_path):
    """The ``rabbitmq`` settings section adds the reader and the watcher to the service of
    ``kafka-audit run``: run by the service's supervisor, they read a quorum queue's
    messages into ``consumed`` (each once, barriers beside them) and record its leader
    under the number its place in ``rabbitmq.nodes`` gives it (learnt from each node's
    own management API), each keeping its status file for health, the other components
    not needed for that."""
    from kafka_audit.app.service import Service, rabbit_components
    from kafka_audit.settings import RabbitmqSettings, RabbitNode
    from kafka_audit.status import read_statuses

    queue = f"run-{uuid.uuid4().hex[:8]}"
    key = rabbit_key("queue", "/", queue)
    conn = pika.BlockingConnection(rabbit.parameters(2))
    conn.channel().queue_declare(queue, durable=True, arguments={"x-queue-type": "quorum"})
    conn.close()
    # the nodes listed last first: the settings' numbers are not the names' order
    order = sorted(rabbit.nodes, reverse=True)
    nodes = [RabbitNode(amqp=f"{rabbit.cfg.host}:{rabbit.cfg.amqp_port(n)}",
                        management=rabbit.management_urls()[n]) for n in order]
    leader = order.index(rabbit.node_numbers()[rabbit.api(1, f"queues/%2F/{queue}")["leader"]]
                         ) + 1
    settings = test_settings(tmp_path).model_copy(update={"rabbitmq": RabbitmqSettings(
        queues=[key], nodes=nodes, heartbeat_seconds=5, barrier_seconds=0.3,
        flush_seconds=0.2, watch_interval_seconds=0.3)})
    components = rabbit_components(settings)
    assert [c.name for c in components] == ["rabbit-reader", "rabbit-watcher"]
    assert rabbit_components(test_settings(tmp_path / "none")) == []
    service = Service(settings, components)
    runs = threading.Thread(target=service.run, kwargs={"install_signals": False})
    runs.start()
    try:
        with AuditedPublisher(settings.rabbitmq.parameters(), key, "run", settings) as p:
            assert all(p.publish(b"m %d" % i) for i in range(100))

        def consumed() -> list[dict]:
            return read_table(settings.table_path("consumed"), "consumed",
                              where=pc.field("topic") == key).to_pylist()

        wait_until(lambda: sum(r["count"] for r in consumed()
                               if r["status"] == "record") >= 100
                   and any(r["status"] == "barrier" for r in consumed()), 60,
                   "the service's reader to read every message and a barrier")
        events = read_table(settings.table_path("cluster_events"), "cluster_events",
                            where=pc.field("topic") == key).to_pylist()
        assert [(e["kind"], e["leader"]) for e in events if e["kind"] == "first_seen"] == [
            ("first_seen", leader)]
        # each says in its status file that it works, as health reads them
        statuses = read_statuses(settings.home_dir)
        assert {n: (s.last_ok is not None, s.failing_since) for n, s in statuses.items()
                if n.startswith("rabbit")} == {"rabbit-reader": (True, None),
                                               "rabbit-watcher": (True, None)}
        assert statuses["rabbit-reader"].detail["deliveries"] >= 100
    finally:
        service.stop.set()
        runs.join(60)
    assert not runs.is_alive()
    assert all(c.restarts == 0 for c in components)
    seqs = sorted(r["seq"] + i for r in consumed() if r["status"] == "record"
                  for i in range(r["count"]))
    assert seqs == list(range(100))
