"""schemathesis against the API's own OpenAPI schema, every check enabled.

Over real Delta tables written with delta-rs (findings of every kind, the ack ledger,
consumed stream and re-read runs, partition states, the audit's progress row, quality
results), so the answers it checks are not empty ones: each operation gets at least
500 generated requests, valid and invalid, and every response must match the schema
(status, content type, body, headers), refuse what the schema refuses and accept what
it admits.
"""

import json
import tempfile
from datetime import UTC, datetime, timedelta
from pathlib import Path

import pytest
import schemathesis
from hypothesis import HealthCheck, settings

from kafka_audit.auditor_api.auth import hash_token, new_token
from kafka_audit.auditor_api.main import create_app
from kafka_audit.auditor_api.params import parse_instant
from kafka_audit.settings import Settings
from kafka_audit.status import COMPONENTS, StatusWriter
from kafka_audit.store import append_rows

from ..support.sizes import examples

T = datetime(2026, 1, 1, 12, tzinfo=UTC)
EXAMPLES = examples(500)


def write_tables(s: Settings) -> None:
    """A small warehouse: two topics, every verdict kind, a committed pass 2 (pass 3 died),
    writes still pending on both topics (the ledger holds more than was judged)."""
    def ack(topic, partition, seq, count, offset, run="r1", error=None, minutes=0):
        t = T + timedelta(minutes=minutes)
        return {"run_id": run, "producer_id": "p", "seq": seq, "count": count, "topic": topic,
                "partition": partition, "offset": offset, "send_time": t, "ack_time": t,
                "last_ack_time": t + timedelta(seconds=1), "error_code": 1 if error else None,
                "error_name": error, "acks": "1", "idempotence": False, "retries": 2,
                "max_in_flight": 5, "leader_epoch": None}

    append_rows(s.table_path("acks"), "acks", [
        ack("orders", 0, 0, 150, 0), ack("orders", 1, 150, 50, 0),
        ack("orders", -1, 200, 5, None, error="NOT_ENOUGH_REPLICAS")])
    append_rows(s.table_path("acks"), "acks", [ack("orders", 0, 205, 20, 150, minutes=5),
                                               ack("events", 0, 0, 120, 0, run="r2")])

    kinds = [("confirmed", None, None, 90), ("lost", "overwritten", "acks=1 fail-over", 5),
             ("lost_after_seen", None, "unclean election (watcher blind 11:00:00-11:00:05)", 3),
             ("duplicate", None, None, 2), ("reordered", None, None, 1),
             ("indeterminate", "absent", None, 2), ("rejected", None, None, 3),
             ("unverified", "retention", None, 2)]
    rows = []
    for i, (kind, subkind, cause, count) in enumerate(kinds):
        for topic, pass_id in (("orders", 1), ("orders", 2), ("events", 2), ("orders", 3)):
            rows.append({
                "finding_id": f"{kind}:{topic}:{pass_id}", "kind": kind, "subkind": subkind,
                "topic": topic, "partition": i % 2, "offset": None if kind == "rejected" else i,
                "producer_id": "p", "run_id": "r1", "seq": i, "count": count,
                "ack_time": None if kind == "rejected" else T + timedelta(minutes=i),
                "evidence": json.dumps({"acked_offset": i, "read": [1, 2]}), "cause": cause,
                "detected_at": T, "pass_id": pass_id})
    append_rows(s.table_path("findings"), "findings", rows)

    def run(topic, count, stamped=True, error=None, ok=True, producer="p", run_id="r1"):
        return {"topic": topic, "partition": 0, "offset": 0, "count": count,
                "kafka_timestamp": T, "stamped": stamped, "stamp_error": error,
                "producer_id": producer if stamped else None,
                "run_id": run_id if stamped else None, "seq": 0 if stamped else None,
                "checksum_ok": ok if stamped else None, "read_time": T, "batch_id": 1,
                "source": "stream", "status": "record", "leader_epoch": None}

    append_rows(s.table_path("consumed"), "consumed", [
        run("orders", 150), run("orders", 4, False, "no kaudit header"),
        run("orders", 3, False, "malformed stamp"), run("orders", 2, ok=False),
        run("orders", 6, producer="stranger"), run("events", 30, run_id="r2"),
        {**run("orders", 1), "source": "reread", "status": "absent"}])
    append_rows(s.table_path("partition_state"), "partition_state", [
        {"topic": topic, "partition": p, "frontier": 100, "settled_frontier": 90,
         "observed_at": T, "pending": 4, "unseen": u, "oldest_unseen": T if u else None,
         "pass_id": pid}
        for topic, p, u, pid in [("orders", 0, 2, 2), ("orders", 1, 0, 2), ("events", 0, 1, 2),
                                 ("orders", 0, 9, 3)]])
    append_rows(s.table_path("audit_hot"), "audit_hot", [
        {"kind": "progress", "topic": "", "partition": -1, "pass_id": 2,
         "progress": '{"pass_id": 2, "acks_version": 0, "consumed_version": 0}'}])
    append_rows(s.table_path("dq_results"), "dq_results", [
        {"validated_at": T, "table_name": "acks", "table_version": 0, "expectation": e,
         "success": ok, "element_count": 3, "unexpected_count": 0 if ok else 1,
         "details": None if ok else '{"why": "x"}'}
        for e, ok in [("count >= 1", True), ("offset not null when acked", False)]])
    append_rows(s.table_path("suspicions"), "suspicions", [
        {"topic": topic, "partition": p, "producer_id": "p", "run_id": run_id, "seq": seq,
         "count": 10, "offset": seq, "ack_time": T, "last_ack_time": T, "broker": broker,
         "basis": "ack_time" if broker is None else "broker", "old_leader": 1,
         "leader_epoch": 4, "end_offset": seq, "new_leader": 2, "new_epoch": 5,
         "changed_at": T + timedelta(seconds=1), "suspected_at": T + timedelta(seconds=2)}
        for topic, p, run_id, seq, broker in [("orders", 1, "r1", 0, 1),
                                              ("events", 0, "r2", 100, None)]])
    for component in COMPONENTS:  # every component reported a good step: /readyz answers 200
        StatusWriter(s.home_dir, component).ok(lag_offsets=0)


# schemathesis's lazy loader (schemathesis.pytest.from_fixture) fails under pytest 9
# ('Function' object has no attribute '_nodeid'): the schema is loaded at import, from an
# app over a temporary warehouse that the module fixture fills before the first request
WAREHOUSE = tempfile.TemporaryDirectory(prefix="kafka-audit-api-schema-")
TOKEN = new_token()
SETTINGS = Settings(home=Path(WAREHOUSE.name),  # statuses stay fresh however long it runs
                    health={f"{c}_stale_seconds": 3600 for c in COMPONENTS},
                    api={"tokens": [{"name": "schemathesis", "hash": hash_token(TOKEN)}],
                         # the host name schemathesis's in-process client sends
                         "allowed_hosts": ["testserver"]})
schema = schemathesis.openapi.from_asgi("/openapi.json", create_app(SETTINGS))


@schema.auth()
class Bearer:
    """The right token on every request: schemathesis's ``ignored_auth`` check then sends
    each operation once without it and once with a wrong one, and wants a 401 or 403."""

    def get(self, case, context):
        return TOKEN

    def set(self, case, data, context):
        case.headers = {**(case.headers or {}), "Authorization": f"Bearer {data}"}


@schema.hook
def filter_case(context, case):
    """One rule an OpenAPI schema cannot say: ``since`` before ``until`` (the API answers a
    422 naming both otherwise: test_api_errors.py). Such pairs are not sent here."""
    try:
        return parse_instant(case.query["since"]) < parse_instant(case.query["until"])
    except (KeyError, TypeError, ValueError):  # not both, or one invalid: nothing to hide
        return True


@schema.hook
def map_case(context, case):
    """Another: a ``cursor`` is valid only if this API gave it (for the same filters), which
    no schema can say; a valid request generated with an arbitrary one would be refused
    with a 422 (test_api_errors.py). Valid cases go without it (the cursor's own paging is
    tested in test_api_cursor.py); invalid ones keep it."""
    meta = case.meta
    if meta is not None and meta.generation.mode.is_positive and case.query:
        case.query.pop("cursor", None)
    return case


@pytest.fixture(scope="module", autouse=True)
def tables():
    write_tables(SETTINGS)
    yield
    WAREHOUSE.cleanup()


@schema.parametrize()
@settings(max_examples=EXAMPLES, deadline=None,
          suppress_health_check=[HealthCheck.too_slow, HealthCheck.filter_too_much])
def test_api_conforms_to_its_schema(case):
    response = case.call_and_validate()  # no checks named: every check, all enabled
    if case.path == "/v1/summary" and response.status_code == 200:
        body = response.json()
        assert sum(body["verdicts"].values()) + body["pending"] == body["acked"]
        assert body["pending"] >= 0 and body["lost"] <= sum(body["verdicts"].values())


def test_every_check_schemathesis_has_is_enabled():
    """``call_and_validate()`` without ``checks=`` runs the enabled ones: that is all of them."""
    from schemathesis.checks import CHECKS, load_all_checks

    load_all_checks()
    operation = next(iter(schema.get_all_operations())).ok()
    config = schema.config.checks_config_for(operation=operation, phase=None)
    names = [c.__name__ for c in CHECKS.get_all()]
    assert {"not_a_server_error", "response_schema_conformance", "negative_data_rejection",
            "positive_data_acceptance", "unsupported_method"} <= set(names)
    assert [n for n in names if not config.get_by_name(name=n).enabled] == []
