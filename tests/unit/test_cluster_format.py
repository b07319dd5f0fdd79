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
    with pytest.raises(ValueError, match="runs Kafka 4.1.1 or 4.4.0, not 3.8.0"):
        Settings(cluster={"kafka_version": "3.8.0"})


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
