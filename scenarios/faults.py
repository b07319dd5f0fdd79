"""Network faults on loopback with iptables: real packets dropped, not a simulation.

``drop_responses(port)`` silently drops every TCP segment a broker sends from
its client port, for as long as the context lasts: requests still arrive and
are applied (records appended), but no response gets back, so clients time
out and retry. That is the classic way a producer without idempotence writes
a record twice.

``cut_port(port)`` drops every segment to and from a port: a network
partition of that one listener. Both ways matter: a follower's fetch already
waiting at the leader would otherwise still bring back the next appends. On
a broker's replication port (``ClusterSettings.replication_port``) it cuts
the leader off from its followers while its clients still reach it: the
followers stop fetching and leave the ISR at the next append. On a client
port it makes a new client's writes to that broker time out unsent.

``isolate(cluster, node)`` cuts one broker off from every other broker, both ways,
on the paths brokers use among themselves (the controller quorum and replication),
while its clients still reach it on its client port: the isolated-leader and
partitioned-follower faults. Its own listeners are cut by port; its connections to
the others' listeners by its cgroup (``scenarios/cgroups.py``: on loopback, a port or an
address cannot tell one broker's outgoing connections from another's).

``isolate_rabbit(rabbit, node)`` cuts one RabbitMQ node of the local RabbitMQ cluster
(``scenarios/rabbit_cluster.py``) off from the others, both ways: each node talks to the
others from and on an address of its own on loopback, so the cut is by address: the
Erlang distribution links between the nodes (a node's lookups in the port mapper go from
127.0.0.1 and stay open; without its links a node is cut off all the same), while
clients still reach every node on the client address.

The rule is removed on exit, whatever happens inside.

Needs root and the ``iptables`` command (``bash dev.sh setup`` installs it).
Only loopback is touched: ``-o lo`` and the cluster's own port.
"""

from __future__ import annotations

import shutil
import subprocess
from collections.abc import Iterator
from contextlib import AbstractContextManager, contextmanager

from kafka_audit.errors import ClusterError

__all__ = ["drop_responses", "cut_port", "isolate", "isolate_rabbit"]


def _iptables(action: str, rule: list[str]) -> None:
    exe = shutil.which("iptables")
    if exe is None:
        raise ClusterError("iptables is not installed (bash dev.sh setup installs it)")
    done = subprocess.run([exe, "-w", action, *rule], capture_output=True, text=True)
    if done.returncode != 0:
        raise ClusterError(f"iptables {action} {' '.join(rule)} failed: {done.stderr.strip()}")


@contextmanager
def _dropping(*rules: list[str]) -> Iterator[None]:
    added: list[list[str]] = []
    try:
        for rule in rules:
            _iptables("-A", rule)
            added.append(rule)
        yield
    finally:
        for rule in added:
            _iptables("-D", rule)


def _drop(direction: str, port: int) -> list[str]:
    return ["OUTPUT", "-o", "lo", "-p", "tcp", direction, str(port), "-j", "DROP"]


def drop_responses(port: int) -> AbstractContextManager[None]:
    """Drop what the broker listening on loopback ``port`` sends, until the block ends."""
    return _dropping(_drop("--sport", port))


def cut_port(port: int) -> AbstractContextManager[None]:
    """Drop everything to and from loopback ``port``, until the block ends."""
    return _dropping(_drop("--dport", port), _drop("--sport", port))


def isolate(cluster, node: int) -> AbstractContextManager[None]:
    """Cut broker ``node`` of ``cluster`` (a ``LocalCluster``, started with cgroups) off
    from the other brokers on their controller and replication listeners, both ways,
    until the block ends; its client listener stays open. In ZooKeeper mode from the
    ZooKeeper server too (its session, and with it its registration, then ends)."""
    if not cluster.in_cgroup(node):
        raise ClusterError(f"node {node} does not run in its own cgroup (needs a writable "
                           f"cgroup v2 hierarchy, as root, when the cluster starts): its "
                           f"connections cannot be told from the other brokers'")
    cfg = cluster.cfg
    own = [cfg.controller_port(node), cfg.replication_port(node)]
    others = [p for m in cluster.nodes if m != node
              for p in (cfg.controller_port(m), cfg.replication_port(m))]
    if cfg.zookeeper:
        others.append(cfg.zookeeper_port)
    mine = ["-m", "cgroup", "--path", cluster.cgroup(node)]
    return _dropping(*(_drop(d, p) for p in own for d in ("--dport", "--sport")),
                     *(["OUTPUT", "-o", "lo", "-p", "tcp", *mine, "--dport", str(p), "-j",
                        "DROP"] for p in others))


def isolate_rabbit(rabbit, node: int) -> AbstractContextManager[None]:
    """Cut node ``node`` of ``rabbit`` (a ``LocalRabbitCluster``) off from its other nodes,
    both ways, until the block ends; its client listeners stay open."""
    cfg = rabbit.cfg
    me = cfg.node_address(node)
    others = [cfg.node_address(n) for n in rabbit.nodes if n != node]
    return _dropping(*(["OUTPUT", "-o", "lo", "-s", a, "-d", b, "-j", "DROP"]
                       for other in others for a, b in ((me, other), (other, me))))
