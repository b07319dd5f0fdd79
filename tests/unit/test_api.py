"""The REST API over a real Delta findings table (written with delta-rs)."""

from datetime import UTC, datetime

import pytest
from fastapi.testclient import TestClient

from kafka_audit.auditor_api.main import create_app
from kafka_audit.jobs.io import append_rows
from kafka_audit.settings import Settings, get_settings

T = datetime(2026, 1, 1, 12, tzinfo=UTC)


def finding(kind, partition, offset=None, count=1, topic="orders", pass_id=1):
    return {"finding_id": f"{kind}:{topic}:{partition}:{offset}", "kind": kind,
            "subkind": "vanished" if kind == "lost" else None, "topic": topic,
            "partition": partition, "offset": offset, "producer_id": "p", "run_id": "r",
            "seq": offset, "count": count, "ack_time": T if offset is not None else None,
            "evidence": "{\"acked_offset\": 1}", "cause": None, "detected_at": T,
            "pass_id": pass_id}


@pytest.fixture
def client(tmp_path):
    settings = Settings(home=tmp_path)
    append_rows(settings.table_path("findings"), "findings", [
        finding("lost", 0, 5), finding("lost", 0, 3), finding("lost", 1, 9),
        finding("confirmed", 0, 0, count=10), finding("lost", 0, 1, topic="other"),
        finding("duplicate", 1, 4, count=2),
        finding("lost", 0, 8, pass_id=2)])  # an uncommitted pass: never served
    append_rows(settings.table_path("audit_hot"), "audit_hot", [
        {"kind": "progress", "topic": "", "partition": -1,
         "progress": '{"pass_id": 1, "acks_version": 0, "consumed_version": 0}'}])
    append_rows(settings.table_path("partition_state"), "partition_state", [
        {"topic": "orders", "partition": p, "frontier": 20, "settled_frontier": 15,
         "observed_at": T, "pending": n, "unseen": u, "oldest_unseen": T if u else None,
         "pass_id": pid} for p, n, u, pid in [(0, 9, 9, 0), (0, 5, 2, 1), (1, 1, 0, 1),
                                              (1, 7, 0, 2)]])
    app = create_app()
    app.dependency_overrides[get_settings] = lambda: settings
    return TestClient(app)


def test_filters_and_order(client):
    body = client.get("/v1/findings", params={"topic": "orders", "kind": "lost"}).json()
    assert body["total"] == 3  # the uncommitted pass's offset 8 is not served
    assert [(i["partition"], i["offset"]) for i in body["items"]] == [(0, 3), (0, 5), (1, 9)]
    assert body["items"][0]["evidence"] == {"acked_offset": 1}
    one = client.get("/v1/findings", params={"topic": "orders", "partition": 1}).json()
    assert [(i["kind"], i["offset"]) for i in one["items"]] == [("duplicate", 4), ("lost", 9)]
    both = client.get("/v1/findings", params=[("kind", "lost"), ("kind", "duplicate")]).json()
    assert both["total"] == 5


def test_summary_counts_writes_and_pending(client):
    body = client.get("/v1/summary", params={"topic": "orders"}).json()
    assert body["writes"] == {"lost": 3, "confirmed": 10, "duplicate": 2}
    assert (body["lost"], body["pending"], body["unseen"]) == (3, 6, 2)
    parts = client.get("/v1/partitions").json()
    assert [(p["partition"], p["pending"], p["pass_id"]) for p in parts] == [(0, 5, 1), (1, 1, 1)]


def test_pagination(client):
    pages = [client.get("/v1/findings", params={"kind": "lost", "page": n, "page_size": 2}).json()
             for n in (1, 2, 3)]
    assert [len(p["items"]) for p in pages] == [2, 2, 0]
    assert {p["total"] for p in pages} == {4}


def test_time_range(client):
    assert client.get("/v1/findings", params={"since": "2026-01-01T12:00:00Z",
                                              "kind": "lost"}).json()["total"] == 4
    assert client.get("/v1/findings", params={"until": "2026-01-01T12:00:00Z"}).json()[
        "total"] == 0


@pytest.mark.parametrize("params,fragment", [
    ({"partition": -1}, "greater than or equal"),
    ({"kind": "bogus"}, "lost"),
    ({"page_size": 5000}, "at most"),
    ({"since": "yesterday"}, "datetime"),
    ({"since": "2026-01-02T00:00:00Z", "until": "2026-01-01T00:00:00Z"}, "before"),
    ({"since": "2026-01-02T00:00:00"}, "timezone"),
])
def test_bad_parameters_get_422_with_a_reason(client, params, fragment):
    r = client.get("/v1/findings", params=params)
    assert r.status_code == 422
    assert fragment in r.text


def test_missing_tables_are_empty_not_errors(tmp_path):
    app = create_app()
    app.dependency_overrides[get_settings] = lambda: Settings(home=tmp_path / "none")
    c = TestClient(app)
    assert c.get("/v1/findings").json()["total"] == 0
    assert c.get("/healthz").json()["tables"]["findings"] is False
    assert c.get("/v1/quality").json() == {"validations": 0, "failures": []}
