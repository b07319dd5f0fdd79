"""The isolation fault is a real partition, checked connection by connection: from the
isolated broker's cgroup the other brokers' controller and replication ports time out
while a process outside it connects; its own controller and replication ports time out
to everyone while its client port answers; the cluster fences it and takes it back
once healed."""

import subprocess
import sys

import pytest

from kafka_audit.scenarios import cgroups
from kafka_audit.scenarios.cluster import wait_until
from kafka_audit.scenarios.faults import isolate

PROBE = """
import socket, sys
s = socket.socket(); s.settimeout(2)
try:
    s.connect(("127.0.0.1", int(sys.argv[1]))); print("open")
except TimeoutError:
    print("timeout")
except OSError as e:
    print(type(e).__name__)
"""


def connect(port: int, cgroup: str | None = None) -> str:
    """What a new connection to loopback ``port`` meets, from a process in ``cgroup``."""
    join = cgroups.join_fn(cgroups.cgroup2_root() / cgroup) if cgroup else None
    done = subprocess.run([sys.executable, "-c", PROBE, str(port)], capture_output=True,
                          text=True, timeout=30, preexec_fn=join)
    return done.stdout.strip()


def brokers_seen_by(port: int) -> set[int]:
    """The registered brokers in a metadata answer of the broker at ``port`` (a new client:
    its first request goes to its only bootstrap; the isolated broker's view is stale)."""
    from kafka_audit.clients import admin_client

    return set(admin_client(f"127.0.0.1:{port}").list_topics(timeout=5).brokers)


def test_an_isolated_broker_is_cut_from_the_others_and_reachable_by_clients(cluster):
    if cgroups.cgroup2_root() is None:
        pytest.fail("no writable cgroup v2 hierarchy: the partition faults cannot run here")
    node = cluster.leader_of("_kafka_audit_probe", 0)
    other = next(n for n in cluster.nodes if n != node)
    cfg = cluster.cfg
    assert all(cluster.in_cgroup(n) for n in cluster.nodes)
    mine = cluster.cgroup(node)
    assert connect(cfg.controller_port(other), mine) == "open"  # before: open
    with isolate(cluster, node):
        assert connect(cfg.controller_port(other), mine) == "timeout"
        assert connect(cfg.replication_port(other), mine) == "timeout"
        assert connect(cfg.controller_port(other)) == "open"  # another process: open
        assert connect(cfg.controller_port(other), cluster.cgroup(other)) == "open"
        assert connect(cfg.controller_port(node)) == "timeout"
        assert connect(cfg.replication_port(node), cluster.cgroup(other)) == "timeout"
        assert connect(cfg.broker_port(node)) == "open"  # clients still reach it
        # the cluster sees it gone: no heartbeat reaches the quorum
        wait_until(lambda: node not in brokers_seen_by(cfg.broker_port(other)), 60,
                   f"node {node} to be fenced")
    assert connect(cfg.controller_port(other), mine) == "open"
    wait_until(lambda: node in brokers_seen_by(cfg.broker_port(other)), 60,
               f"node {node} to return")
