"""Delivery reports a producer's ack ledger could record nowhere, from its full disk to
the REST API: a real ledger on a full tmpfs while the warehouse is out of reach drops past
its bound and says so in its next commit; the audit pass (real Spark, real Delta tables)
turns that into ``unrecorded`` findings, once; the API counts them in ``/v1/summary``,
``/v1/topics``, ``/metrics`` and ``/readyz``."""

import re
import time
from datetime import UTC, datetime

from fastapi.testclient import TestClient

from kafka_audit.auditor_api.main import create_app
from kafka_audit.jobs.audit.audit_pass import run_audit_pass
from kafka_audit.producers.ledger import AckLedger
from kafka_audit.schemas.policy import Durability
from kafka_audit.settings import Settings
from kafka_audit.store import read_table

from ..support.full_disk import fill
from .test_spark_engine import AUDIT, Recorded


def report(seq: int, partition: int):
    return (seq, "t", partition, seq, None, 0.002, time.time())


def unrecorded(settings: Settings) -> list[tuple]:
    rows = read_table(settings.table_path("findings"), "findings").to_pylist()
    return sorted((r["partition"], r["seq"], r["count"], r["pass_id"]) for r in rows
                  if r["kind"] == "unrecorded")


def test_reports_no_one_could_record_become_unrecorded_findings_served_and_counted(
        spark, small_disk, tmp_path):
    settings = Settings(home=tmp_path / "home", audit=AUDIT)
    warehouse = tmp_path / "home" / "warehouse"
    assert settings.table_path("acks") == str(warehouse / "acks")
    warehouse.parent.mkdir(parents=True)
    warehouse.write_text("a file where the warehouse's folder goes: out of reach")
    led = AckLedger(settings.table_path("acks"), small_disk / "spool", "p/r", "p", "r",
                    Durability("all", False, 2, 5), flush_seconds=60, max_held_reports=250)
    fill(small_disk)
    for batch in range(4):  # 400 reports, 100 a flush; 250 may wait in memory
        for seq in range(batch * 100, batch * 100 + 100):
            led.add(report(seq, seq % 2))
        led.flush()
    assert led.dropped_reports == 200
    warehouse.unlink()  # the warehouse is back: what was held is committed, with the notes
    warehouse.mkdir()
    led.add(report(400, 0))
    led.flush()
    assert led.held_reports == 0

    lookups = Recorded(frozenset(), frozenset(), lambda *_: None)
    lookups.now = datetime.now(UTC)
    first = run_audit_pass(spark, settings, lookups.now, lookups)
    assert first.findings.get("unrecorded") == 200, first.line()
    # the two oldest batches, per partition: the seqs the judgement never saw
    assert unrecorded(settings) == [(0, 0, 50, 1), (0, 100, 50, 1), (1, 1, 50, 1),
                                    (1, 101, 50, 1)]
    led.add(report(401, 1))  # a later commit of the ledger, no notes: nothing added
    led.flush()
    lookups.now = datetime.now(UTC)
    second = run_audit_pass(spark, settings, lookups.now, lookups)
    assert "unrecorded" not in second.findings and second.pass_id == 2
    assert len(unrecorded(settings)) == 4
    led.close()

    api = TestClient(create_app(settings), base_url="http://localhost")
    summary = api.get("/v1/summary").json()
    assert summary["unrecorded"] == 200 and summary["acked"] == 202
    assert summary["pending"] == 202 - sum(summary["verdicts"].values())  # not among them
    assert api.get("/v1/topics/t").json()["unrecorded"] == 200
    page = api.get("/v1/findings", params={"kind": "unrecorded"}).json()
    assert page["total"] == 4 and {f["producer_id"] for f in page["items"]} == {"p"}
    metrics = api.get("/metrics").text
    assert re.search(r'^kafka_audit_ledger_dropped_total\{system="kafka",topic="t"\} 200\.0$',
                     metrics, re.M), metrics
    assert api.get("/readyz").json()["ledger_dropped"] == 200
    assert api.get("/healthz").json()["ledger_dropped"] == 200
