"""Test tiers, and one real 3-node Kafka cluster and one SparkSession per test session.

The tiers are folders, each with a marker of the same name, each runnable alone
(``pytest tests/unit`` or ``pytest -m unit``):

* ``unit``: pure logic, Delta tables with delta-rs, the API in process; no JVM, no broker;
* ``spark``: the JVM parts without a broker: real Spark and Delta, the local S3 server;
* ``cluster``: the real cluster, Spark and Delta, no fault;
* ``scenarios``: faults injected into the real cluster, judged against ground truth.

The cluster runs from the pinned jars on its own ports (19091-19093, 19191-19193,
19291-19293) under ``var/test-cluster`` so that it never collides with a demo
cluster; each test gets its own warehouse, checkpoints and spool in a temporary
folder. The ports sit below Linux's ephemeral range (32768-60999): a CI run once
lost a broker because an outgoing connection held 39292 as its local port.
"""

import os
import socket
import uuid
from pathlib import Path

import pytest

from kafka_audit.jars import KAFKA_VERSIONS
from kafka_audit.scenarios.cluster import LocalCluster
from kafka_audit.settings import Settings

from .support.full_disk import small_disk  # noqa: F401 - a fixture for every tier

ROOT = Path(__file__).resolve().parents[1]  # the checkout (this file is tests/conftest.py)
# AUDIT_TEST_PORT_OFFSET moves the test cluster (ports and folder), so that two test
# sessions can run side by side on one machine (e.g. 1000: ports 20091-20393)
OFFSET = int(os.environ.get("AUDIT_TEST_PORT_OFFSET", "0"))
# the brokers' JIT stops at its first tier: a broker restarted beside a producer and Spark
# on 2 cores rejoins its ISRs sooner (``bench/broker_restart.py --busy 1``), and the tests'
# loads are far below what the brokers' fully compiled code would carry
# (the pinned Kafka with the classic elections, whatever the environment says: the tests
# of other versions and election rules start clusters of their own)
CLUSTER = {"broker_base_port": 19091 + OFFSET, "controller_base_port": 19191 + OFFSET,
           "replication_base_port": 19291 + OFFSET, "secure_base_port": 19391 + OFFSET,
           "jvm_options": "-XX:TieredStopAtLevel=1", "kafka_version": KAFKA_VERSIONS[0],
           "eligible_leader_replicas": False}
CLUSTER_HOME = ROOT / "var" / ("test-cluster" if not OFFSET else f"test-cluster-{OFFSET}")
S3_PORT = 19491 + OFFSET  # the local S3-compatible server (scenarios/object_store.py)


TIERS = ("unit", "spark", "cluster", "scenarios")
# the cluster tier's modules that start clusters of their own (RabbitMQ, the other Kafka
# versions, ZooKeeper mode), never the session's: marked ``own_cluster``, they run in the
# other lane of ``bash dev.sh test``, after the Spark tier (the session's cluster lane
# took CI past its 45 minutes)
OWN_CLUSTER = ("test_rabbit_audit", "test_rabbit_cluster", "test_rabbit_publisher",
               "test_kafka_versions", "test_zookeeper")
# the scenario tier's modules that run in that other lane too, after the own_cluster
# tests, on a session's cluster of their own there (AUDIT_TEST_PORT_OFFSET moves it): marked
# ``second_lane``; the first lane still took CI past its 45 minutes with them
SECOND_LANE = ("test_catalog", "test_unclean_election", "test_paused_leader")


def pytest_collection_modifyitems(items):
    for item in items:
        path = Path(str(item.fspath))
        tier = path.relative_to(Path(__file__).parent).parts[0]
        if tier in TIERS:
            item.add_marker(getattr(pytest.mark, tier))
        if tier == "cluster" and path.stem in OWN_CLUSTER:
            if "cluster" in getattr(item, "fixturenames", ()):
                raise pytest.UsageError(f"{item.nodeid} uses the session's cluster: not an "
                                        "own_cluster module (tests/conftest.py)")
            item.add_marker(pytest.mark.own_cluster)
        if tier == "scenarios" and path.stem in SECOND_LANE:
            item.add_marker(pytest.mark.second_lane)


def free_port() -> int:
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        return s.getsockname()[1]


@pytest.fixture(scope="session")
def cluster():
    import shutil

    home = CLUSTER_HOME
    # with the secured listener (SASL_SSL, ACLs: tests/cluster/test_security.py); every
    # other test keeps using PLAINTEXT, whose principal is a super user
    settings = Settings(home=home, cluster={**CLUSTER, "secure": True})
    c = LocalCluster(settings)
    c.down(discard=True)  # a cluster left by an interrupted run: its data goes next
    shutil.rmtree(home / "kafka", ignore_errors=True)
    c.up(print)
    yield c
    c.down(discard=True)  # the next session starts from an empty folder


def test_settings(home: Path, **more) -> Settings:
    """A test's settings: the test cluster, a quick audit, a free API port (``more``
    replaces any of these sections whole, or adds others)."""
    # the watcher tails the test cluster's KRaft metadata log, as it does beside the local
    # cluster (its folders are not under this test's home)
    meta = [str(CLUSTER_HOME / "kafka" / f"node{n}" / "meta") for n in (1, 2, 3)]
    return Settings(home=home, **{"cluster": CLUSTER,
                                  "audit": {"settle_seconds": 1, "interval_seconds": 1,
                                            # above the cluster's replica.lag.time.max.ms (4 s)
                                            "beyond_end_seconds": 15},
                                  "watch": {"metadata_log_dirs": meta},
                                  # no consume warm-up: a service that starts with nothing
                                  # to read waits for it (6.1-11.8 s in bench/sustained.py's
                                  # runs, its "warmed up in" log line) before its query
                                  # starts, to speed a load's first micro-batch; a test's is
                                  # a few thousand records. Its own test:
                                  # tests/spark/test_fold_streams.py
                                  "spark": {"warm_up": False},
                                  "api": {"port": free_port()}, **more})


test_settings.__test__ = False  # a helper, not a test


@pytest.fixture(scope="session")
def rabbit():
    """The local RabbitMQ cluster (three nodes), one per session, started by the first test
    that asks for it. A fixed home, as the Kafka test cluster's: a session interrupted
    before its teardown leaves nodes the next one finds there and stops first."""
    from kafka_audit.scenarios.rabbit_cluster import LocalRabbitCluster

    home = ROOT / "var" / ("test-rabbit" if not OFFSET else f"test-rabbit-{OFFSET}")
    settings = Settings(home=home, rabbit={
        "amqp_base_port": 19591 + OFFSET, "management_base_port": 19691 + OFFSET,
        "stream_base_port": 19791 + OFFSET, "dist_base_port": 19891 + OFFSET,
        "epmd_port": 19590 + OFFSET,
        # an address block of this session's own (a cut never reaches another's nodes)
        "node_address_base": f"127.0.{2 + OFFSET // 100 % 250}"})
    c = LocalRabbitCluster(settings)
    c.discard()
    try:
        c.up(print)
        yield c
    finally:
        c.discard()


@pytest.fixture
def settings(tmp_path):
    return test_settings(tmp_path)


@pytest.fixture(scope="session")
def spark(tmp_path_factory, s3):
    """One SparkSession: local mode, with the S3 server's S3A properties and Delta log
    store (as ``get_spark`` sets them for an object-store warehouse), so that a test may
    use a local warehouse or a bucket."""
    from kafka_audit.jobs.spark import get_spark, object_store_properties
    from kafka_audit.storage import StorageSettings

    props = object_store_properties(StorageSettings(**s3.storage()))
    s = get_spark(Settings(home=tmp_path_factory.mktemp("spark"), cluster=CLUSTER,
                           spark={"properties": props}), "tests")
    yield s
    s.stop()


@pytest.fixture(scope="session")
def s3(tmp_path_factory):
    """The S3-compatible server (s3proxy over a temporary folder), one per session."""
    from kafka_audit.scenarios.object_store import S3Server

    server = S3Server(tmp_path_factory.mktemp("s3"), S3_PORT).start()
    yield server
    server.stop(discard=True)


@pytest.fixture
def s3_settings(s3, tmp_path):
    """A test's settings with its warehouse in a bucket of its own on the S3 server (spools,
    status files and checkpoints stay in its temporary folder)."""
    bucket = s3.bucket(f"t-{uuid.uuid4().hex[:12]}")
    return test_settings(tmp_path, warehouse=f"{bucket}/warehouse", storage=s3.storage())


@pytest.fixture
def topic(cluster):
    name = f"t-{uuid.uuid4().hex[:8]}"
    cluster.create_topic(name, partitions=3, replication=3)
    return name
