"""A producer host: ``pip install 'kafka-audit[producer]'`` (confluent-kafka and the ground
floor: no pyspark, no FastAPI, no great-expectations) wraps a producer and records every
delivery report in the ack ledger.

The environment is built from the wheel with that extra and nothing else
(``tests/support/extras_env.py``); the producer runs in it against the test cluster, and
the test reads the ledger it wrote.
"""

from __future__ import annotations

import subprocess

from kafka_audit.scenarios.harness import expand_rows, settings_file
from kafka_audit.store import read_table

from ..support.extras_env import build_wheel, clean_env, importable, make_env

NOT_THERE = ("pyspark", "delta", "great_expectations", "fastapi", "uvicorn", "pandas",
             "matplotlib", "prometheus_client")
WRITES = 500

PRODUCE = """
import sys
from kafka_audit.producers.instrumented import AuditedProducer
from kafka_audit.settings import get_settings

bootstrap, topic, n = sys.argv[1], sys.argv[2], int(sys.argv[3])
p = AuditedProducer({"bootstrap.servers": bootstrap, "acks": "all"}, "slim", get_settings())
for i in range(n):
    p.produce(topic, b"slim %d" % i)
p.close()
print(p.run_id)
"""


def test_a_producer_only_install_records_every_ack(cluster, settings, topic, tmp_path):
    py, installed = make_env(tmp_path / "venv", build_wheel(tmp_path / "dist"), "producer")
    assert {"confluent-kafka", "deltalake", "pyarrow"} <= installed
    assert not installed & {"pyspark", "delta-spark", "great-expectations", "fastapi",
                            "uvicorn"}
    assert importable(py, NOT_THERE) == []

    env = clean_env(KAFKA_AUDIT_CONFIG=str(settings_file(settings, tmp_path / "config.yaml")))
    run = subprocess.run([str(py), "-c", PRODUCE, cluster.bootstrap, topic, str(WRITES)],
                         env=env, capture_output=True, text=True, timeout=300, cwd=tmp_path)
    assert run.returncode == 0, run.stderr[-3000:]
    run_id = run.stdout.split()[-1]
    acks = [r for r in read_table(settings.table_path("acks"), "acks").to_pylist()
            if r["run_id"] == run_id]
    assert acks and {r["producer_id"] for r in acks} == {"slim"}
    assert expand_rows(acks, "seq") == list(range(WRITES))  # each ack once, none missing
    assert {r["error_code"] for r in acks} == {None}

    serve = subprocess.run([str(py.with_name("kafka-audit")), "serve"], env=env,
                           capture_output=True, text=True, timeout=120)
    assert serve.returncode == 2 and "pip install 'kafka-audit[api]'" in serve.stderr
