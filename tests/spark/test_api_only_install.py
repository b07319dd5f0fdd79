"""An API-only host: ``pip install 'kafka-audit[api]'`` (no pyspark, no great-expectations,
no Kafka client, no JVM) serves the REST API and the dashboard from the warehouse in a
bucket, with the same answers as the whole auditor gives from the same tables.

The environment is built from the wheel with that extra and nothing else
(``tests/support/extras_env.py``); the server is ``kafka-audit serve`` in it, a process of
its own reading the tables from the S3 server.
"""

from __future__ import annotations

import subprocess

import httpx
from fastapi.testclient import TestClient

from kafka_audit.auditor_api.main import create_app
from kafka_audit.scenarios.cluster import wait_until
from kafka_audit.scenarios.harness import settings_file

from ..support.extras_env import build_wheel, clean_env, importable, make_env
from ..unit import test_api

QUESTIONS = [
    ("/v1/findings", {"topic": "orders", "kind": "lost"}),
    ("/v1/findings", {"page_size": 2}),
    ("/v1/findings/counts", {}),
    ("/v1/summary", {}),
    ("/v1/summary", {"topic": "orders"}),
    ("/v1/topics", {}),
    ("/v1/topics/orders", {}),
    ("/v1/partitions", {}),
    ("/v1/producers", {}),
    ("/v1/windows", {}),
]
NOT_THERE = ("pyspark", "delta", "great_expectations", "confluent_kafka", "pandas",
             "matplotlib", "py4j")


def test_an_api_only_install_serves_the_buckets_findings(s3_settings, tmp_path):
    py, installed = make_env(tmp_path / "venv", build_wheel(tmp_path / "dist"), "api")
    assert {"fastapi", "uvicorn", "deltalake"} <= installed
    assert not installed & {"pyspark", "delta-spark", "great-expectations", "confluent-kafka"}
    assert importable(py, NOT_THERE) == []

    test_api.populate(s3_settings)
    env = clean_env(HOME=str(tmp_path), KAFKA_AUDIT_CONFIG=str(
        settings_file(s3_settings, tmp_path / "config.yaml")))
    exe = str(py.with_name("kafka-audit"))
    # what needs another part says which extra, in one line
    run = subprocess.run([exe, "consume", "--once"], env=env, capture_output=True, text=True,
                         timeout=120)
    assert run.returncode == 2 and run.stderr == (
        "kafka-audit: kafka-audit consume needs pyspark, which this install lacks: "
        "pip install 'kafka-audit[spark]' (or [all], the whole auditor)\n"), run.stderr

    base = f"http://{s3_settings.api.host}:{s3_settings.api.port}"
    with open(tmp_path / "serve.log", "wb") as log:
        server = subprocess.Popen([exe, "serve"], env=env, stdout=log, stderr=subprocess.STDOUT,
                                  cwd=tmp_path)
    try:
        wait_until(lambda: _up(base) or server.poll() is not None, 120, "the API to serve")
        assert server.poll() is None, (tmp_path / "serve.log").read_text()
        whole = TestClient(create_app(s3_settings), base_url="http://localhost")
        for path, params in QUESTIONS:
            mine = httpx.get(base + path, params=params, timeout=30)
            assert mine.status_code == 200, (path, mine.text)
            assert mine.json() == whole.get(path, params=params).json(), path
        assert httpx.get(base + "/v1/summary", timeout=30).json()["lost"] > 0
        page = httpx.get(base + "/dashboard", timeout=30)
        assert page.status_code == 200 and "<html" in page.text.lower()
        assert "plotly" in page.text.lower()
        metrics = httpx.get(base + "/metrics", timeout=30)
        assert metrics.status_code == 200 and "kafka_audit_" in metrics.text
    finally:
        server.terminate()
        server.wait(30)
    assert not (s3_settings.home_dir / "warehouse").exists()  # read from the bucket only


def _up(base: str) -> bool:
    try:
        return httpx.get(base + "/healthz", timeout=5).status_code in (200, 503)
    except httpx.HTTPError:
        return False
