"""The REST API over a real Delta findings table (written with delta-rs)."""

from datetime import UTC, datetime

import pytest
from fastapi.testclient import TestClient

from kafka_audit.auditor_api.main import create_app
from kafka_audit.jobs.io import append_rows
from kafka_audit.settings import Settings, get_settings

T = datetime(2026, 1, 1, 12, tzinfo=UTC)


def finding(kind, partition, offset=None, count=1, topic="orders"):
    return {"finding_id": f"{kind}:{topic}:{partition}:{offset}", "kind": kind,
            "subkind": "vanished" if kind == "lost" else None, "topic": topic,
            "partition": partition, "offset": offset, "producer_id": "p", "run_id": "r",
            "seq": offset, "count": count, "ack_time": T if offset is not None else None,
            "evidence": "{\"acked_offset\": 1}", "cause": None, "detected_at": T}


@pytest.fixture
def client(tmp_path):
    settings = Settings(home=tmp_path)
    append_rows(settings.table_path("findings"), "findings", [
        finding("lost", 0, 5), finding("lost", 0, 3), finding("lost", 1, 9),
        finding("confirmed", 0, count=10), finding("lost", 0, 1, topic="other")])
    app = create_app()
    app.dependency_overrides[get_settings] = lambda: settings
    return TestClient(app)


def test_filters_and_order(client):
    body = client.get("/v1/findings", params={"topic": "orders", "kind": "lost"}).json()
    assert body["total"] == 3
    assert [(i["partition"], i["offset"]) for i in body["items"]] == [(0, 3), (0, 5), (1, 9)]
    assert body["items"][0]["evidence"] == {"acked_offset": 1}
    one = client.get("/v1/findings", params={"topic": "orders", "partition": 1}).json()
    assert [i["offset"] for i in one["items"]] == [9]


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
