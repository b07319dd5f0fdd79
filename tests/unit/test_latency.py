"""Loss latency: ack-to-detection time per loss finding, its percentiles, and
``GET /v1/latency`` over a real Delta findings table."""

from datetime import UTC, datetime, timedelta

import pytest
from fastapi import Depends
from fastapi.testclient import TestClient

from kafka_audit.auditor_api import problems
from kafka_audit.auditor_api.main import create_app
from kafka_audit.auditor_api.params import declared_query_only
from kafka_audit.auditor_api.routes import latency as latency_route
from kafka_audit.latency import ack_to_detection, loss_latency, nearest_rank
from kafka_audit.settings import Settings
from kafka_audit.store import append_rows

T = datetime(2026, 1, 1, 12, tzinfo=UTC)


def finding(kind, offset, after, count=1, topic="orders", pass_id=1, acked=0.0):
    return {"finding_id": f"{kind}:{topic}:{offset}", "kind": kind, "subkind": None,
            "topic": topic, "partition": 0, "offset": offset, "producer_id": "p",
            "run_id": "r", "seq": offset, "count": count,
            "ack_time": T + timedelta(seconds=acked), "evidence": "{}", "cause": None,
            "detected_at": T + timedelta(seconds=acked + after), "pass_id": pass_id}


def test_nearest_rank():
    assert nearest_rank([3.0], 0.95) == 3.0
    assert nearest_rank(list(map(float, range(1, 11))), 0.5) == 5.0
    assert nearest_rank(list(map(float, range(1, 11))), 0.95) == 10.0
    assert nearest_rank(list(map(float, range(1, 101))), 0.95) == 95.0
    with pytest.raises(ValueError):
        nearest_rank([], 0.5)


def test_only_losses_count_each_finding_once():
    rows = [finding("lost", 1, 12.5, count=40), finding("lost_after_seen", 50, 20.0),
            finding("confirmed", 0, 3.0, count=1000), finding("lost", 9, 31.0, topic="b")]
    seconds, writes = ack_to_detection(rows, "orders")
    assert sorted(seconds) == [12.5, 20.0] and writes == 41
    stats = loss_latency(rows)
    assert (stats.count, stats.writes, stats.p50, stats.p95, stats.max) == (3, 42, 20.0, 31.0,
                                                                            31.0)
    assert loss_latency([finding("confirmed", 0, 1.0)]) is None


@pytest.fixture
def client(tmp_path):
    settings = Settings(home=tmp_path)
    append_rows(settings.table_path("findings"), "findings", [
        finding("lost", 1, 10.0), finding("lost", 2, 14.0, acked=100),
        finding("lost_after_seen", 3, 18.0, acked=200), finding("confirmed", 4, 2.0),
        finding("lost", 5, 99.0, topic="other"),
        finding("lost", 6, 1.0, pass_id=2)])  # an uncommitted pass: never counted
    append_rows(settings.table_path("acks"), "acks", [
        {"run_id": "r", "producer_id": "p", "seq": 0, "count": 1, "topic": "quiet",
         "partition": 0, "offset": 0, "send_time": T, "ack_time": T, "last_ack_time": T,
         "acks": "1", "idempotence": False, "retries": 0, "max_in_flight": 5}])
    append_rows(settings.table_path("audit_hot"), "audit_hot", [
        {"kind": "progress", "topic": "", "partition": -1,
         "progress": '{"pass_id": 1, "acks_version": 0, "consumed_version": 0}'}])
    app = create_app(settings)
    # as main.py wires every /v1 router
    app.include_router(latency_route.router, dependencies=[Depends(declared_query_only)],
                       responses=problems.PROBLEM_RESPONSES)
    return TestClient(app, base_url="http://localhost")


def test_latency_over_rest(client):
    body = client.get("/v1/latency", params={"topic": "orders"}).json()
    assert body == {"topic": "orders", "since": None, "findings": 3, "writes": 3,
                    "p50_seconds": 14.0, "p95_seconds": 18.0, "max_seconds": 18.0}
    every = client.get("/v1/latency").json()
    assert (every["findings"], every["max_seconds"]) == (4, 99.0)
    later = client.get("/v1/latency", params={"topic": "orders",
                                              "since": "2026-01-01T12:01:00Z"}).json()
    assert (later["findings"], later["p50_seconds"]) == (2, 14.0)
    assert later["since"] == "2026-01-01T12:01:00Z"
    quiet = client.get("/v1/latency", params={"topic": "quiet"}).json()  # acked, never lost
    assert (quiet["findings"], quiet["p95_seconds"]) == (0, None)


def test_latency_errors_are_problems(client):
    r = client.get("/v1/latency", params={"topic": "nope"})
    assert r.status_code == 404 and r.headers["content-type"] == problems.MEDIA_TYPE
    for params, name in (({"bogus": "1"}, "bogus"), ({"since": "12"}, "since"),
                         ({"topic": "a b"}, "topic"), ({"topic": "x" * 250}, "topic")):
        r = client.get("/v1/latency", params=params)
        assert r.status_code == 422, params
        assert r.headers["content-type"] == problems.MEDIA_TYPE
        assert [e["name"] for e in r.json()["errors"]] == [name]
