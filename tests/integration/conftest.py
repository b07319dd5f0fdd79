"""One real 3-node Kafka cluster and one SparkSession per test session.

The cluster runs from the pinned jars on its own ports (19091-19093, 19191-19193,
19291-19293) under ``var/test-cluster`` so that it never collides with a demo
cluster; each test gets its own warehouse, checkpoints and spool in a temporary
folder. The ports sit below Linux's ephemeral range (32768-60999): a CI run once
lost a broker because an outgoing connection held 39292 as its local port.
"""

import socket
import uuid
from pathlib import Path

import pytest

from kafka_audit.deploy.cluster import LocalCluster
from kafka_audit.settings import Settings

ROOT = Path(__file__).resolve().parents[2]
CLUSTER = {"broker_base_port": 19091, "controller_base_port": 19191,
           "replication_base_port": 19291}


def pytest_collection_modifyitems(items):
    for item in items:
        if "tests/integration" in str(item.fspath):
            item.add_marker(pytest.mark.integration)


def free_port() -> int:
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        return s.getsockname()[1]


@pytest.fixture(scope="session")
def cluster():
    import shutil

    home = ROOT / "var" / "test-cluster"
    settings = Settings(home=home, cluster=CLUSTER)
    c = LocalCluster(settings)
    c.down()  # a cluster left by an interrupted run
    shutil.rmtree(home / "kafka", ignore_errors=True)
    c.up(print)
    yield c
    c.down()


@pytest.fixture
def settings(tmp_path):
    return Settings(home=tmp_path, cluster=CLUSTER,
                    audit={"settle_seconds": 1, "interval_seconds": 1},
                    api={"port": free_port()})


@pytest.fixture(scope="session")
def spark(tmp_path_factory):
    from kafka_audit.jobs.spark import get_spark

    s = get_spark(Settings(home=tmp_path_factory.mktemp("spark"), cluster=CLUSTER), "tests")
    yield s
    s.stop()


@pytest.fixture
def topic(cluster):
    name = f"t-{uuid.uuid4().hex[:8]}"
    cluster.create_topic(name, partitions=3, replication=3)
    return name
