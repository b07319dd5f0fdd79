"""A real RabbitMQ cluster on loopback, beside the Kafka one: Debian's ``rabbitmq-server``
(3.10, with classic mirrored queues, quorum queues and streams), one Erlang VM a node.

Each node lives under ``<home>/rabbit/node<N>`` (its configuration, Mnesia database, logs
and the Erlang cookie in its own ``HOME``), listens for clients on ``rabbit.host`` (AMQP,
streams, the management API) and talks to the other nodes from and on an address of its
own, ``rabbit.node_address_base``.N (``-kernel inet_dist_use_interface`` and
``inet_dist_connect_options``): on loopback a port cannot tell one node's outgoing
connections from another's, an address can, so ``isolate`` cuts one node off from the
others with iptables while its clients still reach it (``scenarios/faults.py``). The nodes
form one cluster at their first start (peer discovery ``classic_config``);
``rabbit.partition_handling`` and ``rabbit.net_ticktime`` (8 s: a lost peer is noticed in
seconds) are set for every node. The node names use long names (``rabbit-N@127.0.1.N``).

``up`` returns once every node runs in one cluster, as each node's management API says.
Single-node actions (``kill``, ``stop``, ``start``) exist for fault tests.

Command: ``kafka-audit rabbit up|status|down|discard|kill N|stop N|start N``.
"""

from __future__ import annotations

import base64
import json
import os
import secrets
import shutil
import subprocess
import urllib.request
from collections.abc import Callable
from pathlib import Path

from kafka_audit.errors import ClusterError
from kafka_audit.producers.ledger import private_file
from kafka_audit.scenarios.cluster import NodeProcesses, _our_pid, wait_until
from kafka_audit.settings import RabbitSettings, Settings

__all__ = ["LocalRabbitCluster", "RABBITMQ_SERVER"]

#: Debian's server script itself (``/usr/sbin/rabbitmq-server`` is a wrapper that would
#: switch to the ``rabbitmq`` user): the nodes run as the user that starts them
RABBITMQ_SERVER = "/usr/lib/rabbitmq/bin/rabbitmq-server"
RABBITMQCTL = "/usr/lib/rabbitmq/bin/rabbitmqctl"
PLUGINS = ("rabbitmq_management", "rabbitmq_stream")
#: the default user, which RabbitMQ lets in from loopback only: the local cluster's
GUEST = "guest"


class LocalRabbitCluster(NodeProcesses):
    """The local RabbitMQ cluster of ``settings.rabbit`` under ``<home>/rabbit``."""

    NODE = "rabbit node"

    def __init__(self, settings: Settings) -> None:
        self.settings = settings
        self.cfg: RabbitSettings = settings.rabbit
        self.root = settings.home_dir / "rabbit"

    @property
    def nodes(self) -> list[int]:
        return list(range(1, self.cfg.nodes + 1))

    def node_dir(self, node: int) -> Path:
        if node not in self.nodes:
            raise ClusterError(f"the local rabbit cluster has nodes {self.nodes}, not {node}")
        return self.root / f"node{node}"

    # ---- one node -----------------------------------------------------------------------
    def _cookie(self) -> str:
        """The cluster's Erlang cookie, made once (the nodes and ``rabbitmqctl`` share it)."""
        path = self.root / "cookie"
        if not path.exists():
            self.root.mkdir(parents=True, exist_ok=True)
            _secret_file(path, secrets.token_hex(20))
        return path.read_text()

    def _env(self, node: int) -> dict[str, str]:
        """The environment ``rabbitmq-server`` (and ``rabbitmqctl``) run in for ``node``."""
        c, home = self.cfg, self.node_dir(node)
        address = ",".join(c.node_address(node).split("."))
        # the port mapper on loopback alone: the client address, where tools ask, and the
        # nodes' own, where the other nodes ask (never every interface)
        epmd_on = ",".join([c.host, *(c.node_address(n) for n in self.nodes)])
        return {**{k: v for k, v in os.environ.items() if not k.startswith("RABBITMQ_")},
                "HOME": str(home), "ERL_EPMD_PORT": str(c.epmd_port),
                "ERL_EPMD_ADDRESS": epmd_on,
                "RABBITMQ_USE_LONGNAME": "true",
                "RABBITMQ_NODENAME": c.node_name(node),
                "RABBITMQ_DIST_PORT": str(c.dist_port(node)),
                "RABBITMQ_CONFIG_FILE": str(home / "rabbitmq"),
                "RABBITMQ_ENABLED_PLUGINS_FILE": str(home / "enabled_plugins"),
                "RABBITMQ_MNESIA_BASE": str(home / "mnesia"),
                "RABBITMQ_LOG_BASE": str(home / "log"),
                "RABBITMQ_PID_FILE": str(home / "pid"),
                "RABBITMQ_SERVER_ADDITIONAL_ERL_ARGS":
                    f"-kernel inet_dist_use_interface {{{address}}} "
                    f"-kernel inet_dist_connect_options [{{ip,{{{address}}}}}] "
                    f"-kernel net_ticktime {c.net_ticktime}"}

    def _write_config(self, node: int) -> None:
        c, home = self.cfg, self.node_dir(node)
        home.mkdir(parents=True, exist_ok=True)
        lines = [f"listeners.tcp.1 = {c.host}:{c.amqp_port(node)}",
                 f"management.tcp.ip = {c.host}",
                 f"management.tcp.port = {c.management_port(node)}",
                 f"stream.listeners.tcp.1 = {c.host}:{c.stream_port(node)}",
                 f"stream.advertised_host = {c.host}",
                 f"stream.advertised_port = {c.stream_port(node)}",
                 "cluster_formation.peer_discovery_backend = classic_config",
                 *(f"cluster_formation.classic_config.nodes.{n} = {c.node_name(n)}"
                   for n in self.nodes),
                 f"cluster_partition_handling = {c.partition_handling}",
                 "log.console = false", "log.file.level = info"]
        (home / "rabbitmq.conf").write_text("\n".join(lines) + "\n")
        (home / "enabled_plugins").write_text(f"[{','.join(PLUGINS)}].\n")
        if not (cookie := home / ".erlang.cookie").exists():
            _secret_file(cookie, self._cookie())

    def pid(self, node: int) -> int | None:
        """The node's Erlang VM, if it runs (``beam.smp`` with the node's folder as its
        home: the node name is not on its command line)."""
        return _our_pid(self.node_dir(node) / "pid", b"beam.smp", str(self.node_dir(node)))

    def start(self, node: int) -> int:
        """Start ``node`` (unless its VM runs); the pid of the script that runs it."""
        if (pid := self.pid(node)) is not None:
            return pid
        if shutil.which("erl") is None or not Path(RABBITMQ_SERVER).exists():
            raise ClusterError("rabbitmq-server is not installed (Debian: rabbitmq-server; "
                               "bash dev.sh setup installs it)")
        self._write_config(node)
        with open(self.node_dir(node) / "stdout.log", "ab") as out:  # the child keeps it
            proc = subprocess.Popen([RABBITMQ_SERVER], env=self._env(node), stdout=out,
                                    stderr=subprocess.STDOUT, stdin=subprocess.DEVNULL,
                                    cwd=self.node_dir(node), start_new_session=True)
        # the script runs the VM as its child, which writes its own pid to the pid file
        # once it boots (``pid`` reads it); the script exits with it
        return proc.pid

    def ctl(self, node: int, *args: str, timeout: float = 60) -> str:
        """``rabbitmqctl`` against ``node`` (its environment, the cluster's cookie): its
        output; :class:`ClusterError` with what it said when it fails."""
        out = subprocess.run([RABBITMQCTL, "-n", self.cfg.node_name(node), *args],
                             env=self._env(node), capture_output=True, text=True,
                             timeout=timeout)
        if out.returncode != 0:
            raise ClusterError(f"rabbitmqctl {' '.join(args)} on node {node} failed: "
                               f"{(out.stderr or out.stdout).strip()[:500]}")
        return out.stdout

    def set_partition_handling(self, mode: str) -> None:
        """``cluster_partition_handling`` of every running node, now (the node monitor reads
        it when it sees a partition; a restart goes back to the configured one)."""
        if mode not in ("pause_minority", "autoheal", "ignore"):
            raise ValueError(f"not a partition handling mode: {mode!r}")
        for n in self.running():
            self.ctl(n, "eval", f"application:set_env(rabbit, cluster_partition_handling, "
                                f"{mode}).")

    # ---- the management API -------------------------------------------------------------
    def api(self, node: int, path: str, timeout: float = 5, put: dict | None = None):
        """``GET /api/<path>`` of ``node``'s management API as the local guest user (``PUT``
        of ``put`` as JSON if given); the decoded JSON (None for an empty answer). Raises
        OSError (URLError) when the node does not answer."""
        url = f"http://{self.cfg.host}:{self.cfg.management_port(node)}/api/{path}"
        auth = base64.b64encode(f"{GUEST}:{GUEST}".encode()).decode()
        req = urllib.request.Request(
            url, headers={"Authorization": f"Basic {auth}", "Content-Type": "application/json"},
            data=None if put is None else json.dumps(put).encode(),
            method="GET" if put is None else "PUT")
        with urllib.request.urlopen(req, timeout=timeout) as r:
            body = r.read()
            return json.loads(body) if body else None

    def set_policy(self, name: str, pattern: str, definition: dict, node: int = 1) -> None:
        """The policy ``name`` of vhost ``/`` on the queues whose names match ``pattern``
        (e.g. classic mirroring: ``{"ha-mode": "all", "ha-sync-mode": "manual"}``)."""
        self.api(node, f"policies/%2F/{name}", put={
            "pattern": pattern, "definition": definition, "apply-to": "queues"})

    def management_urls(self) -> dict[int, str]:
        """Each node's management API base URL, by node number (the RabbitMQ watcher's)."""
        return {n: f"http://{self.cfg.host}:{self.cfg.management_port(n)}" for n in self.nodes}

    def node_numbers(self) -> dict[str, int]:
        return {self.cfg.node_name(n): n for n in self.nodes}

    def view(self, node: int) -> dict[str, dict] | None:
        """What ``node`` knows of every node: name -> its ``/api/nodes`` row (``running``,
        ``partitions``...); None when it does not answer (down, paused, booting)."""
        try:
            return {row["name"]: row for row in self.api(node, "nodes")}
        except (OSError, ValueError):
            return None

    def clustered(self) -> bool:
        """Whether every node answers and sees all of them running, with no partition."""
        names = {self.cfg.node_name(n) for n in self.nodes}
        for n in self.nodes:
            seen = self.view(n)
            if seen is None or not names <= {k for k, row in seen.items() if row["running"]}:
                return False
            if any(seen[k].get("partitions") for k in names):
                return False
        return True

    def parameters(self, node: int, heartbeat: int = 5):
        """pika's connection parameters for ``node``'s AMQP listener, as the guest user (a
        lost node noticed within ``heartbeat`` seconds, twice over)."""
        import pika

        return pika.ConnectionParameters(
            self.cfg.host, self.cfg.amqp_port(node),
            credentials=pika.PlainCredentials(GUEST, GUEST), heartbeat=heartbeat,
            connection_attempts=1, socket_timeout=5, blocked_connection_timeout=30)

    # ---- the cluster --------------------------------------------------------------------
    def up(self, progress: Callable[[str], None] = lambda _m: None) -> None:
        for n in self.nodes:
            self.start(n)
        progress(f"started rabbit nodes {self.nodes}; waiting for one cluster")
        wait_until(self.clustered, self.cfg.ready_timeout_seconds,
                   f"every rabbit node to run in one cluster (logs: {self.root}/node*/log)",
                   every=1)
        progress(f"rabbit cluster ready: AMQP at {self.cfg.host}:{self.cfg.amqp_port(1)}"
                 f"-{self.cfg.amqp_port(self.cfg.nodes)}")

    def down(self, discard: bool = False) -> None:
        for n in self.nodes:
            self.stop(n)
        self._stop_epmd()
        if discard:
            shutil.rmtree(self.root, ignore_errors=True)

    def discard(self) -> None:
        self.down(discard=True)

    def _stop_epmd(self) -> None:
        """The port mapper the first node started for this cluster's port, if it runs."""
        epmd = shutil.which("epmd") or "/usr/lib/erlang/bin/epmd"
        if Path(epmd).exists():
            subprocess.run([epmd, "-port", str(self.cfg.epmd_port), "-kill"],
                           capture_output=True, timeout=30)

    def status(self) -> str:
        lines = []
        for n in self.nodes:
            up = self.pid(n) is not None
            seen = self.view(n) if up else None
            state = "down" if not up else "not answering" if seen is None else "running"
            lines.append(f"node {n} {self.cfg.node_name(n)}: {state} (AMQP "
                         f"{self.cfg.host}:{self.cfg.amqp_port(n)})")
            if seen:
                others = sorted(k for k, row in seen.items() if row["running"])
                parts = sorted({p for row in seen.values() for p in row.get("partitions")
                                or ()})
                lines.append(f"  sees running: {', '.join(others)}"
                             + (f"; partitioned from: {', '.join(parts)}" if parts else ""))
        return "\n".join(lines)


def _secret_file(path: Path, text: str) -> None:
    """``text`` in a new file of ``path`` that its owner alone reads (0600: Erlang refuses
    a cookie others may read)."""
    with open(private_file(path, os.O_WRONLY | os.O_EXCL), "w") as f:
        f.write(text)
