"""``GET /v1/summary`` answers from the ack ledger, not only from what the audit judged.

Real Delta tables (delta-rs): the ack ledger written in two commits, findings of a
committed and of a dead pass, consumed stream records the auditor cannot judge.
"""

from datetime import UTC, datetime, timedelta

import pytest
from fastapi.testclient import TestClient

from kafka_audit.auditor_api.main import create_app
from kafka_audit.settings import Settings
from kafka_audit.store import append_rows

T = datetime(2026, 1, 1, 12, tzinfo=UTC)
PRIMARY = ("confirmed", "lost", "lost_after_seen", "indeterminate", "rejected", "unverified")


def ack(topic, seq, count, partition=0, run="r1", producer="p", error=None, at=T):
    return {"run_id": run, "producer_id": producer, "seq": seq, "count": count, "topic": topic,
            "partition": -1 if error else partition, "offset": None if error else seq,
            "send_time": at, "ack_time": at, "last_ack_time": at + timedelta(seconds=2),
            "error_code": 1 if error else None, "error_name": error, "acks": "1",
            "idempotence": False, "retries": 0, "max_in_flight": 5, "leader_epoch": None}


def finding(kind, count, topic="orders", pass_id=1, offset=0):
    return {"finding_id": f"{kind}:{topic}:{pass_id}:{offset}", "kind": kind, "subkind": None,
            "topic": topic, "partition": 0, "offset": offset, "producer_id": "p",
            "run_id": "r1", "seq": offset, "count": count, "ack_time": T, "evidence": "{}",
            "cause": None, "detected_at": T, "pass_id": pass_id}


def stream(topic, count, stamped=True, error=None, ok=True, producer="p", run="r1",
           source="stream"):
    return {"topic": topic, "partition": 0, "offset": 0, "count": count, "kafka_timestamp": T,
            "stamped": stamped, "stamp_error": error,
            "producer_id": producer if stamped else None, "run_id": run if stamped else None,
            "seq": 0 if stamped else None, "checksum_ok": ok if stamped else None,
            "read_time": T, "batch_id": 1, "source": source,
            "status": "record" if source == "stream" else "absent", "leader_epoch": None}


def progress(s, pass_id, acks_version):
    append_rows(s.table_path("audit_hot"), "audit_hot", [
        {"kind": "progress", "topic": "", "partition": -1, "pass_id": pass_id,
         "progress": f'{{"pass_id": {pass_id}, "acks_version": {acks_version}, '
                     f'"consumed_version": 0}}'}])


@pytest.fixture
def s(tmp_path):
    return Settings(home=tmp_path)


def summary(s, **params):
    return TestClient(create_app(s), base_url="http://localhost").get("/v1/summary", params=params)


def test_pending_writes_come_from_the_ledger_before_any_pass(s):
    append_rows(s.table_path("acks"), "acks", [ack("orders", 0, 1_500_000),
                                               ack("orders", 1_500_000, 500_000, partition=1),
                                               ack("orders", 2_000_000, 7, error="_MSG_TIMED_OUT")])
    body = summary(s, topic="orders").json()
    assert body["acked"] == 2_000_007  # failed reports included: each gets a verdict too
    # what a producer counts as sent, and the failures, named apart
    assert (body["acknowledged"], body["failed"]) == (2_000_000, 7)
    c = TestClient(create_app(s), base_url="http://localhost")
    (producer,) = c.get("/v1/producers").json()
    assert (producer["acked"], producer["acknowledged"], producer["failed"]) == (
        2_000_007, 2_000_000, 7)
    topic = c.get("/v1/topics/orders").json()
    assert (topic["acked"], topic["acknowledged"], topic["failed"]) == (2_000_007, 2_000_000, 7)
    assert body["pending"] == 2_000_007
    assert body["verdicts"] == dict.fromkeys(PRIMARY, 0)
    assert body["judged_through"] == {"pass_id": 0, "ack_time": None}
    assert (body["lost"], body["unseen"]) == (0, 0)


def test_verdicts_sum_to_the_acked_writes_annotations_apart(s):
    append_rows(s.table_path("acks"), "acks", [ack("orders", 0, 100), ack("orders", 100, 20)])
    append_rows(s.table_path("acks"), "acks", [ack("orders", 120, 30, at=T + timedelta(hours=1)),
                                               ack("other", 0, 9)])
    append_rows(s.table_path("findings"), "findings", [
        finding("confirmed", 80), finding("lost", 5), finding("lost_after_seen", 2),
        finding("indeterminate", 1), finding("rejected", 3), finding("unverified", 4),
        finding("duplicate", 6), finding("reordered", 7),  # annotations of confirmed writes
        finding("confirmed", 9, topic="other"),
        finding("confirmed", 10, pass_id=2, offset=80)])  # pass 2 died: never counted
    progress(s, 1, acks_version=0)
    body = summary(s, topic="orders").json()
    assert body["acked"] == 150
    assert body["verdicts"] == {"confirmed": 80, "lost": 5, "lost_after_seen": 2,
                                "indeterminate": 1, "rejected": 3, "unverified": 4}
    assert body["annotations"] == {"duplicate": 6, "reordered": 7}
    assert body["lost"] == 7
    assert body["pending"] == 150 - 95
    assert sum(body["verdicts"].values()) + body["pending"] == body["acked"]
    # pass 1 had taken in the ledger's first commit only: its newest ack, not the later one
    assert body["judged_through"] == {"pass_id": 1, "ack_time": "2026-01-01T12:00:02Z"}

    every = summary(s).json()
    assert every["topic"] is None and every["acked"] == 159
    assert every["verdicts"]["confirmed"] == 89 and every["pending"] == 159 - 104
    assert sum(every["verdicts"].values()) + every["pending"] == every["acked"]
    assert sorted(every["unjudged_records"]) == ["orders", "other"]


def test_unjudged_records_by_reason(s):
    append_rows(s.table_path("acks"), "acks", [ack("orders", 0, 10), ack("events", 0, 1,
                                                                        run="r9")])
    append_rows(s.table_path("consumed"), "consumed", [
        stream("orders", 10), stream("orders", 4, False, "no kaudit header"),
        stream("orders", 3, False, "malformed stamp"), stream("orders", 2, ok=False),
        stream("orders", 7, False, "forged stamp"),
        stream("orders", 6, producer="stranger"), stream("orders", 5, run="r-unknown"),
        stream("orders", 1, run="r9"),  # a run the ledger knows (on another topic)
        stream("orders", 50, False, "no kaudit header", source="reread"),  # not the stream
        stream("events", 8, False, "malformed stamp")])
    body = summary(s, topic="orders").json()
    assert body["unjudged_records"] == {"orders": {
        "no_stamp": 4, "malformed_stamp": 3, "forged_stamp": 7, "bad_checksum": 2,
        "unknown_producer": 11}}
    every = summary(s).json()["unjudged_records"]
    assert every["events"] == {"no_stamp": 0, "malformed_stamp": 8, "forged_stamp": 0,
                               "bad_checksum": 0, "unknown_producer": 0}


def test_an_unknown_topic_is_a_404_a_topic_only_read_is_known(s):
    append_rows(s.table_path("acks"), "acks", [ack("orders", 0, 1)])
    append_rows(s.table_path("consumed"), "consumed", [stream("foreign", 3, False,
                                                              "no kaudit header")])
    r = summary(s, topic="ordres")
    assert r.status_code == 404 and r.headers["content-type"] == "application/problem+json"
    assert "ordres" in r.json()["detail"]
    foreign = summary(s, topic="foreign").json()
    assert (foreign["acked"], foreign["pending"]) == (0, 0)
    assert foreign["unjudged_records"]["foreign"]["no_stamp"] == 3
    assert summary(s).status_code == 200  # no topic: every topic, never a 404


def test_an_empty_warehouse_has_nothing_to_summarise(tmp_path):
    s = Settings(home=tmp_path / "none")
    assert summary(s, topic="orders").status_code == 404
    body = summary(s).json()
    assert (body["acked"], body["pending"], body["unjudged_records"]) == (0, 0, {})
