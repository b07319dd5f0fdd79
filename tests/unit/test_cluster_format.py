"""The local cluster keeps what its storage was formatted with (Kafka version, election
rules) and refuses to run under another, rather than report a cluster it is not."""

import json

import pytest

from kafka_audit.errors import ClusterError
from kafka_audit.scenarios.cluster import FORMAT_FILE, LocalCluster
from kafka_audit.settings import Settings


def formatted(tmp_path, **cluster) -> LocalCluster:
    """A cluster whose three nodes' storage exists (as after a format)."""
    c = LocalCluster(Settings(home=tmp_path, cluster=cluster))
    for n in c.nodes:
        c.meta_dir(n).mkdir(parents=True)
        (c.meta_dir(n) / "meta.properties").write_text("version=1\n")
    return c


def test_a_cluster_formatted_otherwise_is_refused_by_name(tmp_path):
    c = formatted(tmp_path)
    # formatted before the format was written down: the pinned version, classic rules
    assert c.formatted_as() == {"kafka_version": "4.1.1", "eligible_leader_replicas": False}
    c.format()  # the same: nothing to do
    (c.root / FORMAT_FILE).write_text(json.dumps({"kafka_version": "4.4.0",
                                                  "eligible_leader_replicas": True}))
    with pytest.raises(ClusterError, match="formatted as Kafka 4.4.0 with eligible leader "
                                           "replicas on.*asks for Kafka 4.1.1 with eligible "
                                           "leader replicas off.*cluster discard"):
        c.format()
    LocalCluster(Settings(home=tmp_path, cluster={"kafka_version": "4.4.0",
                                                  "eligible_leader_replicas": True})).format()


def test_discard_removes_the_cluster_and_its_format(tmp_path):
    c = formatted(tmp_path, eligible_leader_replicas=True)
    (c.root / FORMAT_FILE).write_text(json.dumps(c._form()))
    c.discard()  # no node runs: only the folder goes
    assert not c.root.exists()


def test_only_the_versions_the_cluster_runs_are_taken():
    with pytest.raises(ValueError, match="runs Kafka 4.1.1 or 4.4.0 or 3.9.2, not 3.8.0"):
        Settings(cluster={"kafka_version": "3.8.0"})


def test_zookeeper_mode_is_3_9_without_what_came_with_kraft(tmp_path):
    zk = Settings(cluster={"kafka_version": "3.9.2", "controller_base_port": 29191}).cluster
    assert zk.zookeeper and zk.zookeeper_port == 29194  # after the three nodes' ports
    assert not Settings().cluster.zookeeper
    with pytest.raises(ValueError, match="no eligible leader replicas"):
        Settings(cluster={"kafka_version": "3.9.2", "eligible_leader_replicas": True})
    with pytest.raises(ValueError, match="secured listener is KRaft's"):
        Settings(cluster={"kafka_version": "3.9.2", "secure": True})


def test_a_zookeeper_cluster_writes_what_it_is_and_refuses_kraft_storage(tmp_path):
    c = LocalCluster(Settings(home=tmp_path, cluster={"kafka_version": "3.9.2"}))
    c.format()  # nothing to format: what it is, written down
    assert c.formatted_as() == {"kafka_version": "3.9.2", "eligible_leader_replicas": False}
    props = c._properties(1)
    assert "zookeeper.connect=127.0.0.1:29194" in props and "process.roles" not in props
    assert "control.plane.listener.name=CONTROL" in props
    assert "broker.session.timeout.ms" not in props  # KRaft's alone
    kraft = formatted(tmp_path / "kraft")
    (kraft.root / FORMAT_FILE).write_text(json.dumps(kraft._form()))
    with pytest.raises(ClusterError, match="formatted as Kafka 4.1.1.*asks for Kafka 3.9.2"):
        LocalCluster(Settings(home=tmp_path / "kraft",
                              cluster={"kafka_version": "3.9.2"})).format()


def test_a_node_is_never_started_on_storage_formatted_otherwise(tmp_path):
    c = formatted(tmp_path)
    (c.root / FORMAT_FILE).write_text(json.dumps({"kafka_version": "4.4.0",
                                                  "eligible_leader_replicas": False}))
    with pytest.raises(ClusterError, match="formatted as Kafka 4.4.0"):
        c.start(2)  # no process is started: the pinned version's jars on 4.4.0's storage
    assert c.pid(2) is None


def test_a_format_cut_short_is_still_known_for_what_it_was(tmp_path, monkeypatch):
    import subprocess

    c = LocalCluster(Settings(home=tmp_path, cluster={"kafka_version": "4.4.0",
                                                      "eligible_leader_replicas": True}))
    monkeypatch.setattr(c, "_java", lambda *a, **k: ["false"])  # the storage tool fails
    monkeypatch.setattr(subprocess, "run", lambda *a, **k: subprocess.CompletedProcess(
        a[0], 1, "", "interrupted"))
    with pytest.raises(ClusterError, match="format of node 1 failed"):
        c.format()
    assert c.formatted_as() == {"kafka_version": "4.4.0", "eligible_leader_replicas": True}
