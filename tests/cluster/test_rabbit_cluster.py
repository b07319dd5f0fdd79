"""The local RabbitMQ cluster (``scenarios/rabbit_cluster.py``): three real RabbitMQ nodes
(Debian's rabbitmq-server 3.10) on loopback form one cluster, each talking to the others
on an address of its own; a SIGKILLed node is seen down and rejoins; a node cut off from
the others by iptables pauses under ``pause_minority`` (its clients refused) while the
majority runs on, and rejoins when the cut heals."""

from __future__ import annotations

import socket
import subprocess

from kafka_audit.scenarios.cluster import wait_until
from kafka_audit.scenarios.faults import isolate_rabbit
from kafka_audit.scenarios.rabbit_cluster import LocalRabbitCluster


def amqp_answers(cluster: LocalRabbitCluster, node: int) -> bool:
    """Whether ``node`` answers an AMQP 0-9-1 protocol header with its Connection.Start
    (a method frame: type 1 on channel 0)."""
    try:
        with socket.create_connection((cluster.cfg.host, cluster.cfg.amqp_port(node)),
                                      timeout=2) as s:
            s.settimeout(5)
            s.sendall(b"AMQP\x00\x00\x09\x01")
            return s.recv(7)[:3] == b"\x01\x00\x00"
    except OSError:
        return False


def sees_running(cluster: LocalRabbitCluster, node: int) -> set[int] | None:
    seen = cluster.view(node)
    if seen is None:
        return None
    return {n for n in cluster.nodes if seen[cluster.cfg.node_name(n)]["running"]}


def test_three_nodes_form_one_cluster_each_on_its_own_address(rabbit):
    # the session's cluster formed once (the fixture waited for it), but the tests before
    # this one may have left a node rejoining, and a management API slow past its 5 s
    # timeout on a loaded machine reads as not clustered: wait for it, not a first look
    wait_until(rabbit.clustered, 120, "every rabbit node to run in one cluster", every=1)
    assert rabbit.running() == [1, 2, 3]
    assert all(amqp_answers(rabbit, n) for n in rabbit.nodes)
    # every connection between two nodes' VMs runs between their own addresses
    links = subprocess.run(["ss", "-Htn", "state", "established"], capture_output=True,
                           text=True, check=True).stdout
    dist = {str(rabbit.cfg.dist_port(n)): rabbit.cfg.node_address(n) for n in rabbit.nodes}
    between = [line.split()[-2:] for line in links.splitlines()
               if any(f":{p}" in line for p in dist)]
    assert between, links
    for local, peer in between:
        ends = {local.rpartition(":")[0], peer.rpartition(":")[0]}
        assert ends <= set(dist.values()), (local, peer)


def test_a_killed_node_is_seen_down_and_rejoins(rabbit):
    rabbit.kill(2)
    wait_until(lambda: sees_running(rabbit, 1) == {1, 3}, 60, "node 1 to see node 2 down")
    assert not amqp_answers(rabbit, 2)
    rabbit.start(2)
    wait_until(rabbit.clustered, 120, "node 2 back in the cluster")
    # its listener opens once its applications are up: seen running comes first
    wait_until(lambda: amqp_answers(rabbit, 2), 60, "node 2 to serve its clients again")


def test_a_node_cut_off_pauses_under_pause_minority_and_rejoins(rabbit):
    assert rabbit.cfg.partition_handling == "pause_minority"
    with isolate_rabbit(rabbit, 3):
        # the minority side stops serving its clients; the majority runs on without it
        wait_until(lambda: not amqp_answers(rabbit, 3)
                   and sees_running(rabbit, 1) == {1, 2}, 90,
                   "node 3 to pause and the majority to see it gone")
        assert amqp_answers(rabbit, 1) and amqp_answers(rabbit, 2)
        assert rabbit.pid(3) is not None  # paused, not stopped: its VM runs
    wait_until(rabbit.clustered, 120, "node 3 back in the cluster once the cut heals")
    # a paused node restarts its applications after the heal: the others see it running
    # before its listener opens (CI, 2026-12-03: not yet answering at that instant)
    wait_until(lambda: amqp_answers(rabbit, 3), 60, "node 3 to serve its clients again")
