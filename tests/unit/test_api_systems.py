"""RabbitMQ's queues beside Kafka's topics in the REST API: each topic names its system, and
``system`` filters the topics and the findings (real Delta tables, the app in process)."""

from urllib.parse import quote

import httpx
import pytest
from fastapi.testclient import TestClient

from kafka_audit.auditor_api.main import create_app
from kafka_audit.schemas.systems import rabbit_key
from kafka_audit.settings import Settings
from kafka_audit.store import append_rows

from .test_api_errors import serving
from .test_api_summary import ack, finding, progress, stream

QUEUE = rabbit_key("queue", "/", "orders")


def app(tmp_path):
    s = Settings(home=tmp_path)
    append_rows(s.table_path("acks"), "acks", [
        ack("orders", 0, 10), {**ack(QUEUE, 0, 4), "offset": None, "acks": "persistent",
                               "system": "rabbitmq"}])
    append_rows(s.table_path("findings"), "findings", [
        finding("confirmed", 10), finding("lost", 4, topic=QUEUE)])
    progress(s, 1, 0)
    return create_app(s)


@pytest.fixture
def client(tmp_path):
    return TestClient(app(tmp_path), base_url="http://localhost")


def test_each_topic_names_its_system_and_the_filter_keeps_one(client):
    every = {t["topic"]: t["system"] for t in client.get("/v1/topics").json()}
    assert every == {"orders": "kafka", QUEUE: "rabbitmq"}
    assert [t["topic"] for t in client.get("/v1/topics?system=rabbitmq").json()] == [QUEUE]
    assert [t["topic"] for t in client.get("/v1/topics?system=kafka").json()] == ["orders"]
    assert client.get("/v1/topics?system=activemq").status_code == 422


def test_a_queues_key_is_a_topic_of_its_own_through_a_real_server(tmp_path):
    """Its ``%`` travels as ``%25`` in the path (uvicorn decodes a path once; the in-process
    test client twice, so a real server answers here)."""
    with serving(app(tmp_path)) as url:
        one = httpx.get(f"{url}/v1/topics/{quote(QUEUE, safe=':')}",
                        headers={"Host": "localhost"})
    assert one.status_code == 200, one.text
    assert (one.json()["topic"], one.json()["system"], one.json()["lost"]) == (
        QUEUE, "rabbitmq", 4)


def test_the_findings_filter_by_system(client):
    def kinds(query: str) -> list[tuple[str, str]]:
        return sorted((f["topic"], f["kind"]) for f in
                      client.get(f"/v1/findings{query}").json()["items"])

    assert kinds("?system=rabbitmq") == [(QUEUE, "lost")]
    assert kinds("?system=kafka") == [("orders", "confirmed")]
    assert len(kinds("")) == 2


def test_barriers_and_redeliveries_are_no_unjudged_records(tmp_path):
    """A queue's reads: its records, a redelivery of one (read again) and a barrier (no
    record of a producer): neither is counted as a record the audit cannot judge."""
    s = Settings(home=tmp_path)
    append_rows(s.table_path("acks"), "acks", [{**ack(QUEUE, 0, 4), "offset": None}])
    append_rows(s.table_path("consumed"), "consumed", [
        stream(QUEUE, 4), {**stream(QUEUE, 1), "status": "redelivered"},
        {**stream(QUEUE, 1, stamped=False), "status": "barrier", "seq": 1},
        stream(QUEUE, 1, stamped=False, error="no kaudit header")])
    progress(s, 1, 0)
    c = TestClient(create_app(s), base_url="http://localhost")
    got = c.get("/v1/summary").json()["unjudged_records"][QUEUE]
    assert got == {"no_stamp": 1, "malformed_stamp": 0, "forged_stamp": 0, "bad_checksum": 0,
                   "unknown_producer": 0}
