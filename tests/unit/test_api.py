"""The REST API over a real Delta findings table (written with delta-rs)."""

from datetime import UTC, datetime

import pytest
from fastapi.testclient import TestClient

from kafka_audit.auditor_api.main import create_app
from kafka_audit.settings import Settings, get_settings
from kafka_audit.store import append_rows

T = datetime(2026, 1, 1, 12, tzinfo=UTC)


def finding(kind, partition, offset=None, count=1, topic="orders", pass_id=1):
    return {"finding_id": f"{kind}:{topic}:{partition}:{offset}", "kind": kind,
            "subkind": "vanished" if kind == "lost" else None, "topic": topic,
            "partition": partition, "offset": offset, "producer_id": "p", "run_id": "r",
            "seq": offset, "count": count, "ack_time": T if offset is not None else None,
            "evidence": "{\"acked_offset\": 1}", "cause": None, "detected_at": T,
            "pass_id": pass_id}


def ack(topic, seq, count, partition=0):
    return {"run_id": "r", "producer_id": "p", "seq": seq, "count": count, "topic": topic,
            "partition": partition, "offset": seq, "send_time": T, "ack_time": T,
            "last_ack_time": T, "error_code": None, "error_name": None, "acks": "1",
            "idempotence": False, "retries": 0, "max_in_flight": 5, "leader_epoch": None}


def populate(settings: Settings) -> None:
    """The tables these tests read (tests/spark/test_object_store.py writes them to an
    object store and asks the same questions)."""
    append_rows(settings.table_path("findings"), "findings", [
        finding("lost", 0, 5), finding("lost", 0, 3), finding("lost", 1, 9),
        finding("confirmed", 0, 0, count=10), finding("lost", 0, 1, topic="other"),
        finding("duplicate", 1, 4, count=2),
        finding("lost", 0, 8, pass_id=2)])  # an uncommitted pass: never served
    append_rows(settings.table_path("acks"), "acks", [
        ack(topic, seq, count) for topic, seq, count in [("orders", 0, 16), ("orders", 16, 4),
                                                         ("other", 0, 1)]])
    append_rows(settings.table_path("audit_hot"), "audit_hot", [
        {"kind": "progress", "topic": "", "partition": -1,
         "progress": '{"pass_id": 1, "acks_version": 0, "consumed_version": 0}'}])
    append_rows(settings.table_path("partition_state"), "partition_state", [
        {"topic": "orders", "partition": p, "frontier": 20, "settled_frontier": 15,
         "observed_at": T, "pending": n, "unseen": u, "oldest_unseen": T if u else None,
         "pass_id": pid} for p, n, u, pid in [(0, 9, 9, 0), (0, 5, 2, 1), (1, 1, 0, 1),
                                              (1, 7, 0, 2)]])


@pytest.fixture
def client(tmp_path):
    settings = Settings(home=tmp_path)
    populate(settings)
    return TestClient(create_app(settings), base_url="http://localhost")


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
    assert body["acked"] == 20
    assert body["verdicts"] == {"confirmed": 10, "lost": 3, "lost_after_seen": 0,
                                "indeterminate": 0, "rejected": 0, "unverified": 0}
    assert body["annotations"] == {"duplicate": 2, "reordered": 0}  # counted apart
    assert (body["lost"], body["pending"], body["unseen"]) == (3, 7, 2)
    assert body["judged_through"] == {"pass_id": 1, "ack_time": "2026-01-01T12:00:00Z"}
    parts = client.get("/v1/partitions").json()
    assert [(p["partition"], p["pending"], p["pass_id"]) for p in parts] == [(0, 5, 1), (1, 1, 1)]


def test_pagination_by_cursor(client):
    first = client.get("/v1/findings", params={"kind": "lost", "page_size": 2}).json()
    assert (len(first["items"]), first["total"], first["as_of_pass"]) == (2, 4, 1)
    second = client.get("/v1/findings", params={"kind": "lost", "page_size": 2,
                                                "cursor": first["next_cursor"]}).json()
    assert len(second["items"]) == 2 and second["next_cursor"] is None
    ids = [i["finding_id"] for p in (first, second) for i in p["items"]]
    assert len(set(ids)) == 4
    other = client.get("/v1/findings", params={"kind": "confirmed",
                                               "cursor": first["next_cursor"]})
    assert other.status_code == 422 and "other filters" in other.json()["detail"]


def test_time_range(client):
    assert client.get("/v1/findings", params={"since": "2026-01-01T12:00:00Z",
                                              "kind": "lost"}).json()["total"] == 4
    assert client.get("/v1/findings", params={"until": "2026-01-01T12:00:00Z"}).json()[
        "total"] == 0


@pytest.mark.parametrize("params,fragment", [
    ({"partition": -1}, "greater than or equal"),
    ({"kind": "bogus"}, "lost"),
    ({"page_size": 5000}, "less than or equal to 1000"),
    ({"since": "yesterday"}, "not an ISO 8601 date-time"),
    ({"since": "2026-01-02T00:00:00Z", "until": "2026-01-01T00:00:00Z"}, "before"),
    ({"since": "2026-01-02T00:00:00"}, "timezone"),
])
def test_bad_parameters_get_422_with_a_reason(client, params, fragment):
    r = client.get("/v1/findings", params=params)
    assert r.status_code == 422
    assert r.headers["content-type"] == "application/problem+json"
    assert fragment in r.text


def test_missing_tables_are_empty_not_errors(tmp_path):
    app = create_app()
    app.dependency_overrides[get_settings] = lambda: Settings(home=tmp_path / "none")
    c = TestClient(app, base_url="http://localhost")
    assert c.get("/v1/findings").json()["total"] == 0
    assert c.get("/healthz").json()["tables"]["findings"] is False
    assert c.get("/v1/quality").json() == {"validations": 0, "failures": []}


def test_openapi_declares_problem_bodies_and_bounds(tmp_path):
    app = create_app(Settings(home=tmp_path, api={"page_size_max": 50}))
    spec = TestClient(app, base_url="http://localhost").get("/openapi.json").json()
    assert spec["components"]["schemas"]["Problem"]["required"] == ["title", "status", "detail"]
    problem = {"application/problem+json": {"schema": {"$ref": "#/components/schemas/Problem"}}}
    for path, ops in spec["paths"].items():
        if path.startswith("/v1/"):
            assert ops["get"]["responses"]["422"]["content"] == problem, path
            assert ops["get"]["responses"]["500"]["content"] == problem, path
    assert spec["paths"]["/v1/summary"]["get"]["responses"]["404"]["content"] == problem
    params = {p["name"]: p["schema"] for p in spec["paths"]["/v1/findings"]["get"]["parameters"]}
    assert (params["page_size"]["maximum"], params["page_size"]["default"]) == (50, 50)
    assert params["partition"]["anyOf"][0]["maximum"] == 2**31 - 1
    assert params["since"]["anyOf"][0]["format"] == "date-time"
    r = TestClient(app, base_url="http://localhost").get("/v1/findings", params={"page_size": 51})
    assert r.status_code == 422 and r.json()["errors"][0]["name"] == "page_size"
