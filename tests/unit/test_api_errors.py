"""The error contract over real HTTP: uvicorn on a free loopback port, one httpx client.

Every bad input gets its status with an ``application/problem+json`` body naming the
offending parameter, and the client's connection survives it; an unhandled error is a
problem 500 whose ``id`` is in the server's log line with the traceback, and the same
TCP connection then serves the next request.
"""

import logging
import socket
import threading
import time
from collections.abc import Iterator
from contextlib import contextmanager
from datetime import UTC, datetime

import httpx
import pytest
import uvicorn

from kafka_audit.auditor_api.deps import get_reader
from kafka_audit.auditor_api.main import create_app
from kafka_audit.settings import Settings
from kafka_audit.store import append_rows

T = datetime(2026, 1, 1, 12, tzinfo=UTC)
PROBLEM = "application/problem+json"


@contextmanager
def serving(app, root_path: str = "") -> Iterator[str]:
    """uvicorn in a thread on a socket bound here first (no race for the port); its URL."""
    sock = socket.socket()
    sock.bind(("127.0.0.1", 0))
    server = uvicorn.Server(uvicorn.Config(app, log_level="warning", root_path=root_path))
    thread = threading.Thread(target=server.run, kwargs={"sockets": [sock]}, daemon=True)
    thread.start()
    deadline = time.monotonic() + 30
    while not server.started:
        assert thread.is_alive() and time.monotonic() < deadline, "uvicorn did not start"
        time.sleep(0.02)
    try:
        yield f"http://127.0.0.1:{sock.getsockname()[1]}"
    finally:
        server.should_exit = True
        thread.join(10)
        sock.close()


@pytest.fixture(scope="module")
def settings(tmp_path_factory):
    s = Settings(home=tmp_path_factory.mktemp("warehouse"))
    append_rows(s.table_path("findings"), "findings", [
        {"finding_id": "f1", "kind": "lost", "subkind": "vanished", "topic": "orders",
         "partition": 0, "offset": 5, "producer_id": "p", "run_id": "r", "seq": 5, "count": 1,
         "ack_time": T, "evidence": "{}", "cause": "acks=1 fail-over", "detected_at": T,
         "pass_id": 1},
        {"finding_id": "f2", "kind": "lost", "subkind": "overwritten", "topic": "orders",
         "partition": 1, "offset": 7, "producer_id": "p", "run_id": "r", "seq": 7, "count": 2,
         "ack_time": T, "evidence": "{}", "cause": "unknown: watcher blind 11:59:00-12:00:05",
         "detected_at": T, "pass_id": 1}])
    append_rows(s.table_path("audit_hot"), "audit_hot", [
        {"kind": "progress", "topic": "", "partition": -1,
         "progress": '{"pass_id": 1, "acks_version": -1, "consumed_version": -1}'}])
    return s


@pytest.fixture(scope="module")
def http(settings) -> Iterator[httpx.Client]:
    """One client (one pooled connection) for every request of the module."""
    with serving(create_app(settings)) as url, httpx.Client(base_url=url, timeout=10) as c:
        yield c


def client_port(response: httpx.Response) -> int:
    """The local port of the TCP connection that carried ``response``."""
    return response.extensions["network_stream"].get_extra_info("client_addr")[1]


def assert_problem(r: httpx.Response, status: int) -> dict:
    assert r.status_code == status, r.text
    assert r.headers["content-type"] == PROBLEM
    body = r.json()
    assert body["status"] == status
    assert body["title"] and body["detail"] and body["type"]
    return body


@pytest.mark.parametrize("path,params,named,fragment", [
    ("/v1/findings", {"partition": 2**31}, ["partition"], "less than or equal to 2147483647"),
    ("/v1/findings", {"partition": 2**31 - 1}, None, None),  # the largest partition is fine
    ("/v1/findings", {"partition": 2**63}, ["partition"], "less than or equal to 2147483647"),
    ("/v1/findings", {"partition": 2**64}, ["partition"], "less than or equal to 2147483647"),
    ("/v1/findings", {"partition": -1}, ["partition"], "greater than or equal to 0"),
    ("/v1/findings", {"bogus": "1"}, ["bogus"], "unknown parameter"),
    ("/v1/findings", {"limit": "5", "topic": "orders"}, ["limit"], "unknown parameter"),
    ("/v1/summary", {"cause": "x"}, ["cause"], "unknown parameter"),
    ("/v1/partitions", {"subkind": "y"}, ["subkind"], "unknown parameter"),
    ("/v1/quality", {"kind": "lost"}, ["kind"], "unknown parameter"),
    ("/v1/findings", {"until": "0.5"}, ["until"], "a number is not a time"),
    ("/v1/findings", {"since": "1700000000"}, ["since"], "a number is not a time"),
    ("/v1/findings", {"since": "2026-01-02T00:00:00"}, ["since"], "needs a timezone"),
    ("/v1/findings", {"since": "2026-02-30T00:00:00Z"}, ["since"], "no such date"),
    ("/v1/findings", {"page_size": 1001}, ["page_size"], "less than or equal to 1000"),
    ("/v1/findings", {"page": 1}, ["page"], "unknown parameter"),  # cursors replaced pages
    ("/v1/findings", {"cursor": "bm90IGEgY3Vyc29y"}, ["cursor"], "not a cursor this API gave"),
    ("/v1/findings", {"cursor": "%%%"}, ["cursor"], "not a cursor this API gave"),
    ("/v1/findings", {"after_pass": -1}, ["after_pass"], "greater than or equal to 0"),
    ("/v1/partitions/orders/0/timeline", {"points": 5}, ["points"], "greater than or equal"),
    ("/v1/partitions/orders/0/timeline", {"since": "2026-01-02T00:00:00Z",
                                          "until": "2026-01-01T00:00:00Z"},
     ["since", "until"], "must be before until"),
    ("/v1/findings", {"since": "2026-01-02T00:00:00Z", "until": "2026-01-01T00:00:00+01:00"},
     ["since", "until"], "must be before until"),
    ("/v1/findings", {"kind": "bogus"}, ["kind"], "'lost_after_seen'"),
    ("/v1/findings", {"kind": "LOST"}, ["kind"], "'lost'"),
    ("/v1/findings", {"subkind": "gone"}, ["subkind"], "'vanished'"),
    ("/v1/findings", {"cause": "x"}, ["cause"], "'acks=1 fail-over'"),
])
def test_bad_input_is_a_422_problem_naming_it(http, path, params, named, fragment):
    r = http.get(path, params=params)
    if named is None:
        assert r.status_code == 200, r.text
        return
    body = assert_problem(r, 422)
    assert [(e["name"], e["in"]) for e in body["errors"]] == [(n, "query") for n in named]
    assert fragment in body["errors"][0]["reason"] and fragment in body["detail"]
    assert http.get("/v1/findings").status_code == 200  # the connection is still good


def test_good_filters_still_answer(http):
    body = http.get("/v1/findings", params=[("kind", "lost"), ("cause", "acks=1 fail-over"),
                                            ("since", "2026-01-01T13:00:00+01:00")]).json()
    assert [f["finding_id"] for f in body["items"]] == ["f1"]
    assert http.get("/v1/findings", params={"until": "2026-01-01T13:00:00+01:00"}).json()[
        "total"] == 0  # 12:00Z is not before 12:00Z
    unknown = http.get("/v1/findings", params={"cause": "unknown"}).json()  # a qualified cause
    assert [f["finding_id"] for f in unknown["items"]] == ["f2"]
    both = http.get("/v1/findings", params=[("cause", "unknown"), ("cause", "acks=1 fail-over")])
    assert both.json()["total"] == 2
    assert [f["finding_id"] for f in http.get("/v1/findings", params={
        "subkind": "overwritten"}).json()["items"]] == ["f2"]


def test_unknown_topic_unknown_path_and_method_are_problems(http):
    body = assert_problem(http.get("/v1/summary", params={"topic": "nope"}), 404)
    assert "nope" in body["detail"]
    assert http.get("/v1/summary", params={"topic": "orders"}).status_code == 200
    assert "/v2/none" in assert_problem(http.get("/v2/none"), 404)["detail"]
    r = http.post("/v1/findings")
    assert assert_problem(r, 405)["detail"].startswith("POST is not allowed")
    assert r.headers["allow"] == "GET"


def test_an_unhandled_error_is_a_problem_500_with_an_id_and_the_connection_stays(
        settings, caplog):
    app = create_app(settings)

    def broken_reader():
        raise RuntimeError("the warehouse fell over")

    app.dependency_overrides[get_reader] = broken_reader
    with serving(app) as url, httpx.Client(base_url=url, timeout=10) as c, \
            caplog.at_level(logging.ERROR, logger="kafka_audit.auditor_api"):
        failed = c.get("/v1/findings")
        body = assert_problem(failed, 500)
        assert len(body["id"]) == 32 and body["id"] in body["detail"]
        assert "warehouse fell over" not in failed.text  # internals stay in the log
        logged = [r for r in caplog.records if body["id"] in r.getMessage()]
        assert len(logged) == 1 and logged[0].exc_info is not None
        assert "the warehouse fell over" in caplog.text and "Traceback" in caplog.text
        del app.dependency_overrides[get_reader]
        good = c.get("/v1/findings")
        assert good.status_code == 200 and good.json()["total"] == 2
        assert client_port(good) == client_port(failed)  # the same TCP connection
