"""Bearer tokens over real HTTP (uvicorn): none, a wrong one, a right one, health open,
a read-only token refused on a write, and no token in any log line."""

import logging
from datetime import UTC, datetime

import httpx
import pytest
from pydantic import ValidationError

from kafka_audit.auditor_api.auth import hash_token, new_token
from kafka_audit.auditor_api.main import create_app
from kafka_audit.settings import Settings, describe_validation_error, redacted
from kafka_audit.store import append_rows
from tests.unit.test_api_errors import serving

T = datetime(2026, 1, 1, 12, tzinfo=UTC)
TOKEN, ADMIN = new_token(), new_token()
PROBLEM = "application/problem+json"


@pytest.fixture(scope="module")
def url(tmp_path_factory):
    s = Settings(home=tmp_path_factory.mktemp("auth"), api={"tokens": [
        {"name": "grafana", "hash": hash_token(TOKEN)},
        {"name": "ops", "hash": hash_token(ADMIN), "role": "admin"}]})
    append_rows(s.table_path("acks"), "acks", [{
        "run_id": "r", "producer_id": "p", "seq": 0, "count": 5, "topic": "orders",
        "partition": 0, "offset": 0, "send_time": T, "ack_time": T, "last_ack_time": T,
        "error_code": None, "error_name": None, "acks": "all", "idempotence": True,
        "retries": 5, "max_in_flight": 5, "leader_epoch": None}])
    with serving(create_app(s)) as base:
        yield base


@pytest.mark.parametrize("path", ["/v1/topics", "/v1/findings", "/v1/summary", "/metrics",
                                  "/v1/partitions/orders/0/timeline", "/v2/nothing"])
def test_no_token_is_a_401_a_wrong_one_a_403(url, path, caplog):
    with caplog.at_level(logging.DEBUG):
        none = httpx.get(url + path)
        assert none.status_code == 401 and none.headers["content-type"] == PROBLEM
        assert none.headers["www-authenticate"].startswith("Bearer")
        assert "bearer token" in none.json()["detail"]
        basic = httpx.get(url + path, headers={"Authorization": "Basic dTpw"})
        assert basic.status_code == 401
        wrong = httpx.get(url + path, headers={"Authorization": f"Bearer {TOKEN}x"})
        assert wrong.status_code == 403 and wrong.headers["content-type"] == PROBLEM
        assert wrong.json()["type"].endswith(":forbidden")
    assert TOKEN not in caplog.text


def test_a_right_token_reads_and_health_stays_open(url, caplog):
    with caplog.at_level(logging.DEBUG):
        for token in (TOKEN, ADMIN):
            r = httpx.get(f"{url}/v1/topics", headers={"Authorization": f"Bearer {token}"})
            assert r.status_code == 200 and r.json()[0]["acked"] == 5
        for path in ("/healthz", "/readyz", "/dashboard", "/dashboard/static/dashboard.js",
                     "/openapi.json"):
            assert httpx.get(url + path).status_code in (200, 503), path
    assert TOKEN not in caplog.text and ADMIN not in caplog.text


def test_a_read_only_token_may_not_write(url):
    read = httpx.post(f"{url}/v1/findings", headers={"Authorization": f"Bearer {TOKEN}"})
    assert read.status_code == 403 and "admin" in read.json()["detail"]
    admin = httpx.post(f"{url}/v1/findings", headers={"Authorization": f"Bearer {ADMIN}"})
    assert admin.status_code == 405  # allowed through; no endpoint writes


def test_the_schema_declares_the_bearer_scheme(url):
    spec = httpx.get(f"{url}/openapi.json").json()
    assert spec["components"]["securitySchemes"]["bearer"]["scheme"] == "bearer"
    findings = spec["paths"]["/v1/findings"]["get"]
    assert findings["security"] == [{"bearer": []}]
    assert {"401", "403"} <= set(findings["responses"])
    assert "security" not in spec["paths"]["/healthz"]["get"]


def test_settings_hold_hashes_never_tokens():
    with pytest.raises(ValidationError) as e:
        Settings(api={"tokens": [{"name": "x", "hash": TOKEN}]})
    text = describe_validation_error(e.value)
    assert "kafka-audit token hash" in text and TOKEN not in text
    s = Settings(api={"tokens": [{"name": "x", "hash": hash_token(TOKEN)}]})
    assert redacted(s)["api"]["tokens"] == "***"  # config show prints no hash either
    with pytest.raises(ValidationError):
        Settings(api={"tokens": [{"name": "x", "hash": hash_token(TOKEN)},
                                 {"name": "x", "hash": hash_token(ADMIN)}]})


def test_an_open_api_says_so_when_it_starts(tmp_path, caplog):
    with caplog.at_level(logging.WARNING, logger="kafka_audit.auditor_api"), \
            serving(create_app(Settings(home=tmp_path))) as base:
        assert httpx.get(f"{base}/v1/topics").status_code == 200
    assert "API is OPEN" in caplog.text
