"""A minute without the warehouse costs no acknowledged write's record.

The warehouse is a bucket of an S3 server of the test's own (s3proxy, a real process);
an audited producer (the Python ledger, then the plugin and its shipper) writes to the
real cluster while the server is stopped for 60 seconds: the ledger keeps every delivery
report in its spool, says it cannot write, and once the server is back commits each one,
once. Nothing is dropped (no disk filled here: ``tests/unit/test_ledger_full_disk.py``
covers that)."""

import threading
import time

import pytest

from kafka_audit.producers.instrumented import AuditedProducer
from kafka_audit.scenarios.cluster import wait_until
from kafka_audit.scenarios.object_store import S3Server
from kafka_audit.store import read_table

from ..conftest import S3_PORT, test_settings
from ..support.native_checks import ledger_reports

OUTAGE = 60  # seconds without the warehouse


class Load:
    """An audited producer sending ~500 msg/s in a thread until stopped."""

    def __init__(self, p: AuditedProducer, topic: str) -> None:
        self.p, self.topic = p, topic
        self.stop = threading.Event()
        self.thread = threading.Thread(target=self._run, daemon=True)
        self.thread.start()

    def _run(self) -> None:
        i = 0
        while not self.stop.is_set():
            for _ in range(50):
                self.p.produce(self.topic, b"v%d" % i, partition=i % 3)
                i += 1
            self.p.poll(0)
            time.sleep(0.1)

    def end(self) -> None:
        self.stop.set()
        self.thread.join(30)


def acks_in_table(settings) -> int:
    t = read_table(settings.table_path("acks"), "acks", ["count"])
    return sum(t.column("count").to_pylist())


@pytest.mark.parametrize("native", [False, True], ids=["python-ledger", "plugin-shipper"])
def test_a_minute_without_the_warehouse_loses_and_doubles_no_ack(cluster, topic, tmp_path,
                                                                 native):
    server = S3Server(tmp_path / "s3", S3_PORT + 1).start()
    try:
        bucket = server.bucket("outage")
        settings = test_settings(tmp_path / "home", warehouse=f"{bucket}/w",
                                 storage=server.storage())
        p = AuditedProducer({"bootstrap.servers": cluster.bootstrap, "acks": "all",
                             "linger.ms": 5}, f"outage-{native}", settings,
                            keep_record=True, native=native)
        assert p.native is native
        load = Load(p, topic)
        wait_until(lambda: acks_in_table(settings) > 0, 60, "the first acks in the bucket")
        server.stop()  # the store is gone: requests are refused
        gone = time.monotonic()
        wait_until(lambda: p.ledger.write_failures > 0, OUTAGE, "the ledger to notice")
        acked_before = p.acked
        time.sleep(max(0.0, OUTAGE - (time.monotonic() - gone)))
        assert p.acked > acked_before  # producing went on
        assert p.ledger.last_error is not None
        server.start()  # the same folder and port: the store is back
        wait_until(lambda: p.ledger.last_error is None, 60, "the ledger to write again")
        back = p.acked  # and writes acknowledged after it is back, recorded too
        wait_until(lambda: p.acked > back + 500, 60, "writes after the outage")
        load.end()
        p.close()
        assert p.failed == 0
        mine = ledger_reports(settings, p.producer_id, p.run_id)
        # every report the producer was told of, once: none lost, none doubled
        assert mine == sorted((s, t, part, off, None) for s, t, part, off in p.record)
        assert len(mine) == p.acked > 10 * OUTAGE
    finally:
        server.stop(discard=True)
