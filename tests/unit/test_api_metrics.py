"""``/metrics``: Prometheus can parse it, per-topic counters and gauges equal the API's own
totals and name each topic's system, request latency by route template; the alert rule file
is well formed and names metrics the API exports (promtool is not installable here: the
structure is checked)."""

import re
from pathlib import Path

import yaml
from fastapi.testclient import TestClient
from prometheus_client.parser import text_string_to_metric_families

from kafka_audit.auditor_api.main import create_app
from kafka_audit.settings import Settings
from kafka_audit.status import COMPONENTS, StatusWriter
from tests.unit.test_api_schema import write_tables
from tests.unit.test_api_systems import QUEUE
from tests.unit.test_api_systems import app as two_systems

ALERTS = Path(__file__).resolve().parents[2] / "deploy" / "prometheus-alerts.yml"


def scrape(c) -> dict:
    r = c.get("/metrics")
    assert r.status_code == 200 and r.headers["content-type"].startswith("text/plain")
    out = {}
    for family in text_string_to_metric_families(r.text):
        for s in family.samples:
            out[(s.name, tuple(sorted(s.labels.items())))] = s.value
    return out


def test_metrics_per_topic_equal_the_topics_resource(tmp_path):
    s = Settings(home=tmp_path)
    write_tables(s)
    for component in COMPONENTS:
        StatusWriter(s.home_dir, component).ok()
    # the lag, measured: log ends the watcher sampled less the offsets the job committed
    StatusWriter(s.home_dir, "watcher").ok(log_ends={"orders": {"0": 110, "1": 50}})
    StatusWriter(s.home_dir, "consume").ok(committed={"orders": {"0": 100, "1": 48}})
    c = TestClient(create_app(s), base_url="http://localhost")
    topics = {t["topic"]: t for t in c.get("/v1/topics").json()}
    m = scrape(c)
    for name, t in topics.items():
        label = (("system", t["system"]), ("topic", name))
        assert m[("kafka_audit_lost_writes_total", label)] == t["lost"]
        assert m[("kafka_audit_acked_writes_total", label)] == t["acked"]
        assert m[("kafka_audit_confirmed_writes_total", label)] == t["confirmed"]
        assert m[("kafka_audit_pending_writes", label)] == t["pending"]
        assert m[("kafka_audit_unseen_writes", label)] == t["unseen"]
        assert m[("kafka_audit_duplicate_writes_total", label)] == t["duplicates"]
        assert ("kafka_audit_audit_lag_seconds", label) in m
        for reason, n in t["unjudged_records"].items():
            assert m[("kafka_audit_unjudged_records_total", (("reason", reason), *label))] == n
    assert m[("kafka_audit_committed_pass", ())] == 2
    assert m[("kafka_audit_consume_lag_offsets", ())] == 12
    assert 0 <= m[("kafka_audit_last_pass_age_seconds", ())] < 600
    assert m[("kafka_audit_component_failing", (("component", "audit"),))] == 0
    # latency by route template, never by raw path (no label per topic or id)
    c.get("/v1/topics/orders")
    c.get("/v1/topics/nope")
    c.get("/nowhere")
    m = scrape(c)
    routes = {dict(k[1]).get("route") for k in m if k[0].startswith("kafka_audit_api_request")}
    assert {"/v1/topics", "/v1/topics/{topic}", "unmatched"} <= routes
    assert m[("kafka_audit_api_request_seconds_count",
              (("method", "GET"), ("route", "/v1/topics/{topic}"), ("status", "404")))] == 1


def test_every_per_topic_series_names_its_system(tmp_path):
    """A RabbitMQ queue's key is labelled ``system="rabbitmq"``, a Kafka topic
    ``system="kafka"``, in every family that has a ``topic`` label."""
    c = TestClient(two_systems(tmp_path), base_url="http://localhost")
    m = scrape(c)
    per_topic = [(name, dict(labels)) for name, labels in m if "topic" in dict(labels)]
    assert {labels["topic"] for _, labels in per_topic} == {"orders", QUEUE}
    for name, labels in per_topic:
        assert labels["system"] == ("rabbitmq" if labels["topic"] == QUEUE else "kafka"), name
    assert m[("kafka_audit_lost_writes_total", (("system", "rabbitmq"), ("topic", QUEUE)))] == 4
    assert m[("kafka_audit_lost_writes_total", (("system", "kafka"), ("topic", "orders")))] == 0
    assert m[("kafka_audit_judged_writes_total",
              (("kind", "confirmed"), ("system", "kafka"), ("topic", "orders")))] == 10
    # in the text itself, the key as it is (its %2F not decoded): what a selector names
    text = c.get("/metrics").text
    assert f'kafka_audit_acked_writes_total{{system="rabbitmq",topic="{QUEUE}"}} 4.0' in text


def test_the_alert_rules_are_well_formed_and_name_exported_metrics(tmp_path):
    rules = yaml.safe_load(ALERTS.read_text())
    s = Settings(home=tmp_path)
    write_tables(s)
    exported = {name for name, _ in scrape(TestClient(create_app(s), base_url="http://localhost"))}
    alerts = {}
    for group in rules["groups"]:
        assert set(group) == {"name", "rules"}
        for rule in group["rules"]:
            assert set(rule) <= {"alert", "expr", "for", "labels", "annotations"}
            assert re.fullmatch(r"[A-Za-z_][A-Za-z0-9_]*", rule["alert"])
            assert rule["expr"].count("(") == rule["expr"].count(")")
            assert rule["annotations"]["summary"] and rule["labels"]["severity"]
            if "for" in rule:
                assert re.fullmatch(r"[0-9]+[smhd]", rule["for"])
            alerts[rule["alert"]] = rule
            for metric in re.findall(r"kafka_audit_[a-z_]+", rule["expr"]):
                assert metric in exported, metric
    lost = alerts["KafkaAcknowledgedWritesLost"]
    assert "kafka_audit_lost_writes_total" in lost["expr"]
    assert lost["labels"]["severity"] == "critical"
