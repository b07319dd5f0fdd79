"""Health that tells the truth (issue 36, items 9, 13, 14, 15): what ``/healthz`` and
``/readyz`` say with and without a token, statuses of a process that no longer runs (or
of an earlier run) refused, liveness never a 500 over a corrupt table or status file,
the consume lag's arithmetic, and a broker outage logged once each way."""

import json
import logging
import os
import subprocess
import threading
from datetime import UTC, datetime, timedelta

import pytest
from fastapi.testclient import TestClient

from kafka_audit.auditor_api.auth import hash_token, new_token
from kafka_audit.auditor_api.main import create_app
from kafka_audit.jobs.consume.consume_job import _progress_detail
from kafka_audit.jobs.watcher.watcher import BrokerOutages
from kafka_audit.settings import Settings
from kafka_audit.status import (
    COMPONENTS,
    ComponentStatus,
    StatusWriter,
    Writer,
    consume_lag,
    current_statuses,
    read_service_record,
    remove_service_record,
    write_service_record,
)

TOKEN = new_token()
BEARER = {"Authorization": f"Bearer {TOKEN}"}
T = datetime(2026, 1, 1, 12, tzinfo=UTC)


def all_ok(home, **detail) -> None:
    for c in COMPONENTS:
        StatusWriter(home, c).ok(**detail)


def client(tmp_path, tokens: bool = True) -> TestClient:
    s = Settings(home=tmp_path, api={"tokens": [{"name": "ops", "hash": hash_token(TOKEN)}]
                                     if tokens else []})
    return TestClient(create_app(s))


def dead_writer() -> Writer:
    """A process of this host that ran and has exited (its pid and start time, as its
    status file would name them)."""
    p = subprocess.Popen(["sleep", "60"])
    me = Writer.this_process()
    ticks = open(f"/proc/{p.pid}/stat").read().rsplit(")", 1)[1].split()[19]
    p.kill()
    p.wait()
    return Writer(me.host, me.pidns, p.pid, ticks)


def write_as(home, component: str, writer: Writer, **detail) -> None:
    s = ComponentStatus(component, last_ok=datetime.now(UTC), detail=detail,
                        host=writer.host, pid=writer.pid, pidns=writer.pidns,
                        started=writer.started)
    (home / "status").mkdir(parents=True, exist_ok=True)
    (home / "status" / f"{component}.json").write_text(s.to_json())


# --- item 9: who sees what ----------------------------------------------------------------


def test_without_a_token_health_says_the_verdict_only(tmp_path):
    all_ok(tmp_path, partitions=3)
    StatusWriter(tmp_path, "audit").failing("OSError: /secret/path/x is gone")
    c = client(tmp_path)
    bare = c.get("/healthz")
    assert bare.status_code == 200 and bare.json() == {"status": "degraded"}
    ready = c.get("/readyz")
    assert ready.status_code == 503
    assert ready.json() == {"status": "degraded", "components": {
        "watcher": "ok", "consume": "ok", "audit": "failing"}}
    for r in (bare, ready, c.get("/healthz", headers={"Authorization": f"Bearer {TOKEN}x"})):
        text = r.text
        assert str(os.getpid()) not in text and "secret" not in text and "host" not in text


def test_a_token_or_an_open_api_sees_the_details(tmp_path):
    all_ok(tmp_path, partitions=3)
    for c, headers in ((client(tmp_path), BEARER), (client(tmp_path, tokens=False), {})):
        body = c.get("/healthz", headers=headers).json()
        assert body["status"] == "ok" and body["problems"] == []
        watcher = body["components"]["watcher"]
        assert watcher["pid"] == os.getpid() and watcher["detail"] == {"partitions": 3}
        assert "tables" in body
        ready = c.get("/readyz", headers=headers)
        assert ready.status_code == 200 and "behind" in ready.json()


def test_a_corrupt_table_or_status_file_is_named_never_a_500(tmp_path):
    all_ok(tmp_path)
    s = Settings(home=tmp_path)
    log = tmp_path / "warehouse" / "audit_hot" / "_delta_log"
    log.mkdir(parents=True)
    (log / "00000000000000000000.json").write_text("{ not json\n")
    (tmp_path / "status" / "consume.json").write_text('["not", "a status"]')
    c = TestClient(create_app(s), raise_server_exceptions=False)
    r = c.get("/healthz")
    assert r.status_code == 200, r.text
    body = r.json()
    assert body["status"] == "degraded"
    assert body["components"]["consume"]["state"] == "unreadable"
    assert any(p.startswith("audit_hot:") for p in body["problems"]), body["problems"]
    assert c.get("/readyz").status_code == 503


def test_liveness_answers_even_when_health_cannot_be_computed(tmp_path, monkeypatch):
    import kafka_audit.auditor_api.routes.health as health

    def broken(*_a, **_k):
        raise RuntimeError("boom")

    monkeypatch.setattr(health, "current_statuses", broken)
    c = TestClient(create_app(Settings(home=tmp_path)), raise_server_exceptions=False)
    r = c.get("/healthz")
    assert r.status_code == 200 and r.json()["status"] == "degraded"
    assert c.get("/readyz").status_code == 503


# --- item 13: only the running service's statuses -----------------------------------------


def test_a_status_left_by_a_process_that_exited_is_not_ready(tmp_path):
    all_ok(tmp_path)
    gone = dead_writer()
    write_as(tmp_path, "consume", gone)
    c = client(tmp_path, tokens=False)
    r = c.get("/readyz")
    assert r.status_code == 503
    consume = r.json()["components"]["consume"]
    assert consume["state"] == "not running" and consume["pid"] == gone.pid
    assert f"pid {gone.pid}, which is no longer running" in consume["reason"]
    assert r.json()["behind"]["consume_seconds_since_progress"] is None


def test_with_a_service_running_only_its_own_statuses_count(tmp_path):
    all_ok(tmp_path)  # written by this process: the service, once it records itself
    other = dead_writer()
    write_as(tmp_path, "audit", other)
    me = write_service_record(tmp_path)
    try:
        assert read_service_record(tmp_path) == me
        seen = current_statuses(tmp_path)
        assert set(seen.current) == {"watcher", "consume"}
        assert "left by an earlier run" in seen.not_running["audit"]
        # the earlier run's writer still alive (or a pid of the same host reused) changes
        # nothing: only the recorded service's statuses count
        seen = current_statuses(tmp_path, alive=lambda w: True)
        assert "left by an earlier run" in seen.not_running["audit"]
        StatusWriter(tmp_path, "audit").ok()
        assert client(tmp_path, tokens=False).get("/readyz").status_code == 200
    finally:
        remove_service_record(tmp_path)
    assert read_service_record(tmp_path) is None


def test_a_service_record_of_a_stopped_service_is_ignored(tmp_path):
    all_ok(tmp_path)
    gone = dead_writer()
    (tmp_path / "status" / "service.json").write_text(json.dumps(
        {"host": gone.host, "pidns": gone.pidns, "pid": gone.pid, "started": gone.started}))
    assert set(current_statuses(tmp_path).current) == set(COMPONENTS)


def test_a_writer_that_cannot_be_checked_from_here_counts_on_its_age(tmp_path):
    all_ok(tmp_path)
    elsewhere = Writer("another-host", "pid:[1]", 1, "1")
    write_as(tmp_path, "audit", elsewhere)
    seen = current_statuses(tmp_path)
    assert "audit" in seen.current and not seen.not_running


# --- item 14: the lag, measured -----------------------------------------------------------


def status(component: str, **detail) -> ComponentStatus:
    return ComponentStatus(component, last_ok=T, detail=detail)


def test_the_lag_is_log_end_less_committed_per_partition():
    consume = status("consume", committed={"a": {"0": 100, "1": 40}, "b": {"0": 7}},
                     progress_at="2026-01-01T12:00:00Z")
    watcher = status("watcher", log_ends={"a": {"0": 250, "1": 40, "2": 9}, "b": {"0": 5}},
                     log_ends_at="2026-01-01T12:00:01Z")
    lag = consume_lag(consume, watcher)
    # a:0 150 behind, a:1 caught up, b:0's end sampled before the commit: 0, not -2;
    # a:2 is not read by the job: not its lag
    assert lag == {"offsets": 150, "partitions": 3, "unmeasured": 0,
                   "log_ends_at": "2026-01-01T12:00:01Z",
                   "committed_at": "2026-01-01T12:00:00Z"}
    fewer = consume_lag(consume, status("watcher", log_ends={"a": {"0": 101}}))
    assert fewer["offsets"] == 1 and fewer["unmeasured"] == 2


@pytest.mark.parametrize("consume,watcher,why", [
    (None, status("watcher", log_ends={"a": {"0": 1}}), "no current status of the consume"),
    (status("consume"), status("watcher", log_ends={"a": {"0": 1}}), "committed no"),
    (status("consume", committed={"a": {"0": 1}}), None, "no current status of the watcher"),
    (status("consume", committed={"a": {"0": 1}}), status("watcher", log_ends={}),
     "sampled no log end"),
    (status("consume", committed={"a": {"0": "x"}}), status("watcher"), "committed no"),
])
def test_a_lag_that_cannot_be_measured_is_absent_with_why(consume, watcher, why):
    lag = consume_lag(consume, watcher)
    assert lag["offsets"] is None and why in lag["reason"]


def test_the_consume_job_reports_the_offsets_it_committed():
    from pyspark.sql.streaming.listener import StreamingQueryProgress

    # as Spark's JSON says it, and as pyspark 4 hands it over (each source's offsets as
    # str(dict), not JSON: the lag read from that was always 0)
    spark_json = {
        "id": "6a4f5e0c-2f8b-4a8e-9a63-0c3a8f1d2b11", "runId": "0d3b0f4e-59a2-4c42-8a31-"
        "3c5d4a9c7e21", "name": "kafka_audit_consume", "timestamp": "2026-01-01T12:00:00.000Z",
        "batchId": 4, "batchDuration": 812, "numInputRows": 140, "inputRowsPerSecond": 70.0,
        "processedRowsPerSecond": 172.4, "durationMs": {"triggerExecution": 812, "addBatch": 700},
        "stateOperators": [],
        "sources": [{"description": "KafkaV2[SubscribePattern[^(?:a|b)$]]",
                     "startOffset": {"a": {"0": 60, "1": 40}, "b": {"2": 7}},
                     "endOffset": {"a": {"0": 100, "1": 40}, "b": {"2": 7}},
                     # more than maxOffsetsPerTrigger waited: 150 left for the next batch
                     "latestOffset": {"a": {"0": 250, "1": 40}, "b": {"2": 7}},
                     "numInputRows": 40, "inputRowsPerSecond": 20.0,
                     "processedRowsPerSecond": 49.3, "metrics": {}}],
        "sink": {"description": "ForeachBatchSink", "numOutputRows": -1}}
    progress = StreamingQueryProgress.fromJson(spark_json)
    assert progress["sources"][0]["endOffset"].startswith("{'a'")  # a repr, not JSON
    want = {"batch": 4, "progress_at": "2026-01-01T12:00:00.000Z",
            "committed": {"a": {"0": 100, "1": 40}, "b": {"2": 7}},
            "records": 140, "seconds": 0.812, "sink_seconds": 0.7, "behind": 150}
    assert _progress_detail(progress) == want
    assert _progress_detail(spark_json) == want  # a plain dict (older pyspark)
    reprs = {**spark_json, "sources": [{"endOffset": str(spark_json["sources"][0]["endOffset"])},
                                       {"endOffset": None}, {"endOffset": "not offsets"}]}
    # no latest offsets (a batch planned before a restart, run again after it): not known
    assert _progress_detail(reprs) == {**want, "behind": None}


def test_readyz_reports_the_measured_lag_while_the_last_progress_said_0(tmp_path):
    StatusWriter(tmp_path, "audit").ok()
    StatusWriter(tmp_path, "consume").ok(lag_offsets=0, committed={"t": {"0": 10, "1": 10}})
    StatusWriter(tmp_path, "watcher").ok(log_ends={"t": {"0": 60_010, "1": 40_010}})
    behind = client(tmp_path, tokens=False).get("/readyz").json()["behind"]
    assert behind["consume_lag_offsets"] == 100_000
    assert behind["consume_lag"]["partitions"] == 2


# --- item 15: brokers down, said once each way --------------------------------------------


def test_a_broker_outage_is_logged_once_each_way(caplog):
    outages = BrokerOutages(logging.getLogger("t"), unreachable_after=2)
    t = [T + timedelta(seconds=i) for i in range(10)]
    with caplog.at_level(logging.WARNING):
        assert outages.update({1, 2, 3}, {1, 2, 3}, {1, 2, 3}, t[0]) == []
        assert outages.update({1, 2, 3}, {1, 2, 3}, {1, 3}, t[1]) == []  # one slow answer
        assert outages.update({1, 2, 3}, {1, 2, 3}, {1, 2, 3}, t[2]) == []
        assert outages.update({1, 2, 3}, {1, 2, 3}, {1, 3}, t[3]) == []
        down = outages.update({1, 2, 3}, {1, 2, 3}, {1, 3}, t[4])
        assert down == ["watcher: broker 2 is down: unreachable"]
        assert outages.update({1, 2, 3}, {1, 3}, {1, 3}, t[5]) == []  # fenced too: no line
        assert outages.detail() == [{"broker": 2, "since": t[4].isoformat(), "fenced": True,
                                     "unreachable": True}]
        assert outages.update({1, 2, 3}, {1, 3}, None, t[6]) == []  # not asked: still down
        assert outages.update({1, 2, 3}, {1, 2, 3}, {1, 2, 3}, t[7]) == \
            ["watcher: broker 2 is back after 3.0s"]
        assert outages.update({1, 2, 3}, None, {1, 2, 3}, t[8]) == []
    assert [r.getMessage() for r in caplog.records] == [
        "watcher: broker 2 is down: unreachable", "watcher: broker 2 is back after 3.0s"]
    assert outages.outages == 1 and outages.detail() == []


def test_a_fenced_broker_is_down_at_once_and_named_in_health(tmp_path):
    outages = BrokerOutages(logging.getLogger("t"))
    assert outages.update({1, 2, 3}, {1, 2}, {1, 2, 3}, T) == [
        "watcher: broker 3 is down: fenced (the cluster no longer lists it)"]
    all_ok(tmp_path)
    StatusWriter(tmp_path, "watcher").ok(brokers={"known": [1, 2, 3], "registered": [1, 2],
                                                  "down": outages.detail()})
    c = client(tmp_path)
    r = c.get("/readyz", headers=BEARER)
    assert r.status_code == 200  # the auditor is ready: the cluster's state is its subject
    assert r.json()["brokers_down"] == [{"broker": 3, "since": T.isoformat(), "fenced": True,
                                         "unreachable": False}]
    assert "brokers_down" not in c.get("/readyz").json()  # not without the token


def test_the_watcher_status_carries_log_ends_and_brokers(tmp_path):
    from kafka_audit.jobs.watcher.watcher import ClusterWatcher

    w = ClusterWatcher(Settings(home=tmp_path))
    w.log_end = {("a", 0): 5, ("a", 1): 7, ("b", 0): 1}
    w.known_brokers = {1: ("h", 1), 2: ("h", 2)}
    w.brokers = {1}
    w.log_ends_at = T
    w.broker_outages.update(w.known_brokers, w.brokers, None, T)
    d = w.status_detail()
    assert d["log_ends"] == {"a": {"0": 5, "1": 7}, "b": {"0": 1}}
    assert d["log_ends_at"] == T.isoformat()
    assert d["brokers"]["down"][0]["broker"] == 2 and d["brokers"]["registered"] == [1]


# --- item 16: an interrupted micro-batch, said short ---------------------------------------

#: Spark's own test of a batch function's failure (``StreamExecution.PROXY_ERROR``, Spark
#: 4.1): an interruption if it matches
SPARK_PROXY_ERROR = (r"py4j.protocol.Py4JJavaError: An error occurred while calling"
                     r"((.|\r\n|\r|\n)*)(java.lang.InterruptedException|"
                     r"java.io.InterruptedIOException|"
                     r"java.nio.channels.ClosedByInterruptException)")


def test_an_interrupted_batch_fails_short_and_unlogged(caplog):
    import re
    import traceback

    from py4j.protocol import Py4JJavaError

    from kafka_audit.jobs.consume.consume_job import (
        BatchInterrupted,
        _ExpectedInterruption,
        _interruption,
        _quiet_expected_interruptions,
    )

    class Interrupted(Py4JJavaError):  # as py4j raises it, without a JVM to ask
        def __str__(self):
            return "An error occurred while calling o125.count.\n: java.lang.Interrupted" \
                   "Exception\n" + "\tat java.base/Some.frame(Some.java:1)\n" * 1000

    try:
        try:
            raise Interrupted("An error occurred while calling o125.count.\n",
                              type("JavaObject", (), {"_target_id": "o126"})())
        except Exception as exc:
            halting = threading.Event()
            assert _interruption(exc, halting) is exc  # not stopping: the error itself
            halting.set()
            raise _interruption(exc, halting) from None
    except BatchInterrupted:
        sent = traceback.format_exc()  # what py4j hands the JVM
    assert len(sent) < 2000 and re.search(SPARK_PROXY_ERROR, sent), sent
    _quiet_expected_interruptions()
    _quiet_expected_interruptions()  # once is enough
    py4j = logging.getLogger("py4j.clientserver")
    assert sum(isinstance(f, _ExpectedInterruption) for f in py4j.filters) == 1
    with caplog.at_level(logging.ERROR):
        for exc in (BatchInterrupted("x"), ValueError("a real one")):
            try:
                raise exc
            except Exception:
                py4j.exception("There was an exception while executing the Python Proxy")
    assert [r.exc_info[0] for r in caplog.records] == [ValueError]


def test_a_stop_waits_for_the_running_micro_batch_within_its_wait():
    from kafka_audit.jobs.consume.consume_job import _batch_ended

    class Query:  # a query's flags as Spark's StreamingQuery shows them, over time
        def __init__(self, active_polls, ends=False):
            self.polls, self.active_polls, self.ends = 0, active_polls, ends

        @property
        def isActive(self):  # noqa: N802 - pyspark's name
            return not (self.ends and self.polls >= self.active_polls)

        @property
        def status(self):
            self.polls += 1
            return {"isTriggerActive": self.polls <= self.active_polls}

    assert _batch_ended(Query(3), wait=5)  # the batch ended on the fourth look
    assert _batch_ended(Query(3, ends=True), wait=5)  # the query ended (next batch refused)
    slow = Query(10 ** 9)
    assert not _batch_ended(slow, wait=0.2)  # still running when the wait ran out
    assert 2 <= slow.polls < 50
    once = Query(10 ** 9)
    assert not _batch_ended(once, wait=0) and once.polls == 1  # no halting: one look
    assert _batch_ended(Query(0), wait=0)  # between batches


# --- issue 43: the RabbitMQ reader and watcher, when the rabbitmq section names queues -----


def test_the_rabbitmq_components_are_in_health_when_queues_are_audited(tmp_path):
    rabbitmq = {"queues": ["rabbitmq:queue:%2F:orders"],
                "nodes": [{"amqp": "rmq-1:5672", "management": "http://rmq-1:15672"}]}
    s = Settings(home=tmp_path, rabbitmq=rabbitmq)
    all_ok(tmp_path)
    c = TestClient(create_app(s), base_url="http://localhost")
    ready = c.get("/readyz")  # an open API: the whole answer
    assert ready.status_code == 503
    body = ready.json()
    assert {k: v["state"] for k, v in body["components"].items()} == {
        "watcher": "ok", "consume": "ok", "audit": "ok", "rabbit-reader": "never ran",
        "rabbit-watcher": "never ran"}
    StatusWriter(tmp_path, "rabbit-watcher").ok(polls=1)
    StatusWriter(tmp_path, "rabbit-reader").failing("RabbitMQ: StreamLostError: gone")
    body = c.get("/readyz").json()
    assert body["components"]["rabbit-reader"]["state"] == "failing"
    assert body["components"]["rabbit-watcher"]["state"] == "ok"
    assert any(p.startswith("rabbit-reader: failing since") for p in body["problems"])
    metrics = c.get("/metrics").text
    assert 'kafka_audit_component_failing{component="rabbit-reader"} 1.0' in metrics
    assert 'kafka_audit_component_failing{component="rabbit-watcher"} 0.0' in metrics
    # without queues they are not components: an earlier run's file is not read as one
    plain = TestClient(create_app(Settings(home=tmp_path))).get("/readyz").json()
    assert set(plain["components"]) == set(COMPONENTS)
