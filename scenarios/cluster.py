"""A real three-node Kafka cluster (KRaft, combined broker+controller; or ZooKeeper mode)
on loopback.

Started from the jars pinned in ``deploy/maven/kafka-broker.pom.xml``; data and
logs live under ``<home>/kafka/node<N>``. ``up`` formats storage once (static
quorum; classic leader election, ``eligible.leader.replicas.version=0``, unless
``cluster.eligible_leader_replicas`` is on) and
returns only when every broker is registered and a probe topic with RF=3
accepts an ``acks=all`` write. Single-node actions (``kill``, ``stop``,
``start``) exist for fault tests.

With ``cluster.secure`` on, each node also has a ``SECURE`` listener (SASL_SSL,
SCRAM-SHA-512, ACLs enforced) whose certificates, users and ACLs
``scenarios/security.py`` makes under ``<home>/kafka/security``; ``up`` then also
waits until the ``auditor`` user can list the topics over it. Every other
listener's principal (``User:ANONYMOUS``) is a super user, so with or without it
the PLAINTEXT, replication and controller listeners work alike.

The Kafka version (``cluster.kafka_version``) and the election rules are fixed at the
format, written beside the nodes (``format.json``): ``up`` refuses a cluster formatted
otherwise rather than run it under the wrong name; ``discard`` removes it.

ZooKeeper mode (``cluster.kafka_version: 3.9.2``, the ZooKeeper era's last line): no
KRaft, no format; ``up`` first starts one standalone ZooKeeper server (``<home>/kafka/
zookeeper``, its client port ``cluster.zookeeper_port``), then the brokers, which register
there and elect a controller among themselves. Each broker's controller port is its
control-plane listener (``control.plane.listener.name``), so the fault that cuts a
leader's replication leaves the controller's requests as they are, as in KRaft mode;
``isolate`` cuts a node from ZooKeeper too. ``down`` stops ZooKeeper last.

Command: ``kafka-audit cluster up|status|down|discard|kill N|stop N|start N``.
"""

from __future__ import annotations

import base64
import json
import os
import shutil
import signal
import subprocess
import time
import uuid
from collections.abc import Callable
from dataclasses import dataclass
from importlib import resources
from pathlib import Path

from kafka_audit.clients import admin_client, producer_config
from kafka_audit.errors import ClusterError
from kafka_audit.jars import KAFKA_VERSIONS, broker_classpath
from kafka_audit.scenarios import cgroups
from kafka_audit.scenarios.security import LISTENER, SCRAM_MECHANISM, ClusterSecurity
from kafka_audit.settings import ClusterSettings, Settings

__all__ = ["LocalCluster", "NodeProcesses", "PartitionInfo", "wait_until"]

PROBE_TOPIC = "_kafka_audit_probe"
#: what the nodes' storage was formatted with (``LocalCluster.formatted_as``), in the root
FORMAT_FILE = "format.json"
#: broker settings of KRaft alone, left out of a ZooKeeper-mode broker's properties
KRAFT_ONLY = frozenset({"broker.session.timeout.ms", "broker.heartbeat.interval.ms"})


def _said(form: dict) -> str:
    return (f"Kafka {form.get('kafka_version')} with eligible leader replicas "
            f"{'on' if form.get('eligible_leader_replicas') else 'off'}")


def wait_until(check: Callable[[], object], timeout: float, what: str, every: float = 0.25):
    """Poll ``check`` until it returns a truthy value; raise ClusterError after ``timeout``."""
    deadline = time.monotonic() + timeout
    last_error: Exception | None = None
    while time.monotonic() < deadline:
        try:
            value = check()
            if value:
                return value
        except Exception as exc:  # noqa: BLE001 - the condition is retried until the deadline
            last_error = exc
        time.sleep(every)
    raise ClusterError(f"timed out after {timeout:.0f}s waiting for {what}"
                       + (f" (last error: {last_error})" if last_error else ""))


@dataclass(frozen=True)
class PartitionInfo:
    topic: str
    partition: int
    leader: int
    replicas: tuple[int, ...]
    isr: tuple[int, ...]


class NodeProcesses:
    """What a local cluster does to its nodes' processes, given its ``nodes`` and each
    node's running ``pid`` (None when it does not run): the faults' signals."""

    NODE = "node"  # what a node is called in errors

    nodes: list[int]

    def pid(self, node: int) -> int | None:
        raise NotImplementedError

    def signal(self, node: int, sig: int) -> None:
        pid = self.pid(node)
        if pid is None:
            raise ClusterError(f"{self.NODE} {node} is not running")
        os.kill(pid, sig)

    def kill(self, node: int) -> None:
        """SIGKILL one node: no clean shutdown (a Kafka leader hands nothing off)."""
        pid = self.pid(node)
        self.signal(node, signal.SIGKILL)
        _wait_exit(pid, 30)

    def stop(self, node: int, timeout: float = 60) -> None:
        """Clean shutdown (SIGTERM: a Kafka leader moves its leadership away, RabbitMQ
        stops its applications, before the node exits); SIGKILL after ``timeout``."""
        _terminate(self.pid(node), timeout)

    def running(self) -> list[int]:
        return [n for n in self.nodes if self.pid(n) is not None]


class LocalCluster(NodeProcesses):
    """The local cluster described by ``Settings.cluster`` under ``Settings.home``."""

    def __init__(self, settings: Settings) -> None:
        self.cfg: ClusterSettings = settings.cluster
        self.root = settings.home_dir / "kafka"
        #: the secured listener's files and users (made only while ``cfg.secure`` is on)
        self.security = ClusterSecurity(
            self.root / "security", {"auditor": self.cfg.secure_auditor_user,
                                     "noread": self.cfg.secure_noread_user}, self.cfg.host)

    # ---- layout -------------------------------------------------------------------
    def node_dir(self, node: int) -> Path:
        return self.root / f"node{node}"

    def meta_dir(self, node: int) -> Path:
        """The node's metadata log dir (``metadata.log.dir``: the quorum's log and state)."""
        return self.node_dir(node) / "meta"

    def _pid_file(self, node: int) -> Path:
        return self.node_dir(node) / "broker.pid"

    @property
    def nodes(self) -> list[int]:
        return list(range(1, self.cfg.nodes + 1))

    @property
    def bootstrap(self) -> str:
        return self.cfg.bootstrap

    @property
    def secure_bootstrap(self) -> str:
        """The SECURE listeners (SASL_SSL); they exist only while ``cfg.secure`` is on."""
        if not self.cfg.secure:
            raise ClusterError("the local cluster has no secured listener (cluster.secure "
                               "is off)")
        return self.cfg.secure_bootstrap

    def secure_profile(self, role: str = "auditor"):
        """A connection profile for the SECURE listener as the user of ``role`` (``auditor``
        or ``noread``): SASL_SSL, SCRAM-SHA-512, the password from its file, the CA file."""
        from kafka_audit.profile import ProfileSettings

        user = self.security.user(role)
        return ProfileSettings(
            name=f"local-secure-{role}", bootstrap=self.secure_bootstrap,
            security_protocol="SASL_SSL",
            sasl={"mechanism": SCRAM_MECHANISM, "username": user,
                  "password_file": self.security.password_file(user)},
            tls={"ca_file": self.security.ca_file})

    def _properties(self, node: int) -> str:
        if self.cfg.zookeeper:
            return self._zookeeper_broker_properties(node)
        c = self.cfg
        voters = ",".join(f"{n}@{c.host}:{c.controller_port(n)}" for n in self.nodes)
        # clients use PLAINTEXT, followers fetch over REPLICATION: a fault can cut a
        # leader's replication while its clients still reach it (scenarios 2, 3, 5)
        listeners = {"PLAINTEXT": (c.broker_port(node), "PLAINTEXT"),
                     "REPLICATION": (c.replication_port(node), "PLAINTEXT")}
        if c.secure:  # SASL_SSL with ACLs, for tests of a secured cluster
            listeners[LISTENER] = (c.secure_port(node), "SASL_SSL")
        advertised = ",".join(f"{name}://{c.host}:{port}"
                              for name, (port, _) in listeners.items())
        protocols = {name: protocol for name, (_, protocol) in listeners.items()}
        props: dict[str, object] = {
            "process.roles": "broker,controller",
            "node.id": node,
            "controller.quorum.voters": voters,
            "listeners": f"{advertised},CONTROLLER://{c.host}:{c.controller_port(node)}",
            "advertised.listeners": advertised,
            "listener.security.protocol.map":
                ",".join(f"{k}:{v}" for k, v in {**protocols, "CONTROLLER": "PLAINTEXT"}.items()),
            "controller.listener.names": "CONTROLLER",
            "inter.broker.listener.name": "REPLICATION",
            "log.dirs": str(self.node_dir(node) / "data"),
            "metadata.log.dir": str(self.meta_dir(node)),
            **(self.security.broker_properties() if c.secure else {}),
            **c.broker_overrides,
        }
        return "".join(f"{k}={str(v).lower() if isinstance(v, bool) else v}\n"
                       for k, v in props.items())

    def _zookeeper_broker_properties(self, node: int) -> str:
        """A ZooKeeper-mode broker (Kafka 3.9): registered in the ZooKeeper server, one of
        them elected controller there. Clients use PLAINTEXT, followers fetch over
        REPLICATION, and the controller's requests (LeaderAndIsr, UpdateMetadata,
        StopReplica) go over CONTROL (``control.plane.listener.name``), each on its own
        port as in KRaft mode: a fault that cuts a leader's replication leaves the
        controller's reach as it is (by default they share the inter-broker listener)."""
        c = self.cfg
        listeners = {"PLAINTEXT": c.broker_port(node), "REPLICATION": c.replication_port(node),
                     "CONTROL": c.controller_port(node)}
        advertised = ",".join(f"{name}://{c.host}:{port}" for name, port in listeners.items())
        props: dict[str, object] = {
            "broker.id": node,
            "zookeeper.connect": f"{c.host}:{c.zookeeper_port}",
            # a broker cut off from ZooKeeper loses its session, and its registration, in
            # seconds (the KRaft nodes' broker.session.timeout.ms in conf/defaults.yaml)
            "zookeeper.session.timeout.ms": 4000,
            "listeners": advertised,
            "advertised.listeners": advertised,
            "listener.security.protocol.map":
                ",".join(f"{k}:PLAINTEXT" for k in listeners),
            "inter.broker.listener.name": "REPLICATION",
            "control.plane.listener.name": "CONTROL",
            "log.dirs": str(self.node_dir(node) / "data"),
            **{k: v for k, v in c.broker_overrides.items() if k not in KRAFT_ONLY},
        }
        return "".join(f"{k}={str(v).lower() if isinstance(v, bool) else v}\n"
                       for k, v in props.items())

    # ---- the ZooKeeper server (ZooKeeper mode) --------------------------------------
    def zookeeper_dir(self) -> Path:
        return self.root / "zookeeper"

    def zookeeper_pid(self) -> int | None:
        return _our_pid(self.zookeeper_dir() / "zookeeper.pid", b"ZooKeeperServerMain",
                        str(self.zookeeper_dir()))

    def start_zookeeper(self) -> int:
        """The ZooKeeper server of a ZooKeeper-mode cluster (one, standalone), started if
        it is not running; its data under ``<home>/kafka/zookeeper``."""
        if (pid := self.zookeeper_pid()) is not None:
            return pid
        d = self.zookeeper_dir()
        (d / "logs").mkdir(parents=True, exist_ok=True)
        conf = d / "zoo.cfg"
        conf.write_text("".join(f"{k}={v}\n" for k, v in {
            # sessions of 1 to 10 s (2 and 20 ticks): the brokers' 4 s fits
            "tickTime": 500, "dataDir": d / "data",
            "clientPort": self.cfg.zookeeper_port, "clientPortAddress": self.cfg.host,
            "admin.enableServer": "false", "maxClientCnxns": 0,
            "4lw.commands.whitelist": "ruok,srvr"}.items()))
        out = open(d / "logs" / "stdout.log", "ab")
        proc = subprocess.Popen(
            self._java("org.apache.zookeeper.server.ZooKeeperServerMain", str(conf),
                       logs=d / "logs"),
            stdout=out, stderr=subprocess.STDOUT, start_new_session=True)
        (d / "zookeeper.pid").write_text(str(proc.pid))
        return proc.pid

    def _zookeeper_serves(self) -> bool:
        import socket

        try:
            with socket.create_connection((self.cfg.host, self.cfg.zookeeper_port), 2) as sock:
                sock.sendall(b"ruok")
                return sock.recv(4) == b"imok"
        except OSError:
            return False

    def stop_zookeeper(self, kill: bool = False) -> None:
        _terminate(self.zookeeper_pid(), 30, kill)

    def _write_config(self, node: int) -> Path:
        if self.cfg.secure:
            self.security.ensure()  # the key and trust stores the properties name
        d = self.node_dir(node)
        (d / "logs").mkdir(parents=True, exist_ok=True)
        path = d / "server.properties"
        path.write_text(self._properties(node))
        return path

    def _java(self, main: str, *args: str, node: int | None = None,
              logs: Path | None = None) -> list[str]:
        logs = logs or (self.node_dir(node) / "logs" if node else self.root)
        conf = resources.files("kafka_audit.conf")
        logging = [f"-Dlog4j.configuration=file:{conf.joinpath('broker-log4j.properties')}"] \
            if self.cfg.zookeeper else \
            [f"-Dlog4j2.configurationFile={conf.joinpath('broker-log4j2.xml')}"]
        return ["java", *self.cfg.heap.split(), *self.cfg.jvm_options.split(), "-XX:+UseG1GC",
                "-Djava.awt.headless=true", *logging, f"-Dkafka.logs.dir={logs}",
                "-cp", broker_classpath(self.cfg.kafka_version), main, *args]

    # ---- storage ------------------------------------------------------------------
    def format(self) -> None:
        """Format every node's storage once, with one cluster id (ZooKeeper mode: nothing
        to format, the brokers register in ZooKeeper; what the cluster is still written)."""
        self.root.mkdir(parents=True, exist_ok=True)
        if self.cfg.zookeeper:
            if (self.root / FORMAT_FILE).exists() or any(
                    self._formatted(n) for n in self.nodes):
                self._refuse_another_format()
            else:
                (self.root / FORMAT_FILE).write_text(json.dumps(self._form()))
            return
        id_file = self.root / "cluster.id"
        if not id_file.exists():
            # Kafka's cluster id: a random 16-byte UUID, base64url without padding
            id_file.write_text(base64.urlsafe_b64encode(uuid.uuid4().bytes).decode().rstrip("="))
        cluster_id = id_file.read_text().strip()
        todo = [n for n in self.nodes if not self._formatted(n)]
        if len(todo) < len(self.nodes):
            self._refuse_another_format()
        else:  # written first: a format interrupted halfway is still known for what it was
            (self.root / FORMAT_FILE).write_text(json.dumps(self._form()))
        scram: list[str] = []
        if todo and self.cfg.secure:
            # the SCRAM users exist from the first moment the SECURE listener serves
            self.security.ensure()
            scram = self.security.scram_arguments()
        for node in todo:
            conf = self._write_config(node)
            # "--cluster-id=ID": base64url ids may start with "-", which a separate argument
            # would hand to the tool's argument parser as an option (1 id in 64 starts so)
            cmd = self._java("kafka.tools.StorageTool", "format", f"--cluster-id={cluster_id}",
                             "-c", str(conf),
                             "--feature", "eligible.leader.replicas.version="
                             f"{int(self.cfg.eligible_leader_replicas)}", *scram,
                             node=node)
            proc = subprocess.run(cmd, capture_output=True, text=True)
            if proc.returncode != 0:
                output = proc.stdout + proc.stderr
                for arg in scram[1::2]:  # a salted password is a credential too
                    output = output.replace(arg, "SCRAM-SHA-512=[***]")
                raise ClusterError(f"format of node {node} failed: {output}")

    def _formatted(self, node: int) -> bool:
        """Whether the node's storage was formatted (ZooKeeper mode: its log dir written
        by a broker that ran)."""
        return (self.meta_dir(node) / "meta.properties").exists() or \
            (self.node_dir(node) / "data" / "meta.properties").exists()

    def _refuse_another_format(self) -> None:
        formed = self.formatted_as()
        if formed != self._form():
            raise ClusterError(
                f"the local cluster under {self.root} was formatted as {_said(formed)}, and "
                f"this asks for {_said(self._form())}: `kafka-audit cluster discard` "
                f"removes it (its data), or give this run another home")

    def _form(self) -> dict:
        return {"kafka_version": self.cfg.kafka_version,
                "eligible_leader_replicas": self.cfg.eligible_leader_replicas}

    def formatted_as(self) -> dict:
        """The Kafka version and election rules the nodes' storage was formatted with (a
        cluster formatted before this was written: the pinned version, classic rules)."""
        try:
            return json.loads((self.root / FORMAT_FILE).read_text())
        except (OSError, ValueError):
            return {"kafka_version": KAFKA_VERSIONS[0], "eligible_leader_replicas": False}

    def discard(self) -> None:
        """Stop every node and remove the cluster's folder: its data, its format."""
        self.down(discard=True)
        shutil.rmtree(self.root, ignore_errors=True)

    # ---- processes ----------------------------------------------------------------
    def pid(self, node: int) -> int | None:
        return _our_pid(self._pid_file(node), b"kafka.Kafka", str(self.node_dir(node)))

    def start(self, node: int) -> int:
        if (pid := self.pid(node)) is not None:
            return pid
        if self._formatted(node):
            self._refuse_another_format()  # another version's jars on its storage: never
        conf = self._write_config(node)
        out = open(self.node_dir(node) / "logs" / "stdout.log", "ab")
        group = cgroups.prepare(self.cgroup(node))  # None: no cgroup v2 to write here
        proc = subprocess.Popen(self._java("kafka.Kafka", str(conf), node=node),
                                stdout=out, stderr=subprocess.STDOUT, start_new_session=True,
                                preexec_fn=cgroups.join_fn(group) if group else None)
        self._pid_file(node).write_text(str(proc.pid))
        return proc.pid

    def cgroup(self, node: int) -> str:
        """The node's cgroup relative to the cgroup v2 root (``scenarios/cgroups.py``)."""
        return cgroups.node_cgroup(str(self.cfg.broker_port(1)), node)

    def in_cgroup(self, node: int) -> bool:
        """Whether the running broker ``node`` lives in its own cgroup (then a fault can
        match its traffic: ``scenarios/faults.py``, ``isolate``)."""
        pid = self.pid(node)
        if pid is None:
            return False
        try:
            lines = Path(f"/proc/{pid}/cgroup").read_text().splitlines()
        except OSError:
            return False
        return f"0::/{self.cgroup(node)}" in lines

    # ---- cluster lifecycle ------------------------------------------------------------
    def up(self, progress: Callable[[str], None] = lambda _m: None) -> None:
        self.format()
        if self.cfg.zookeeper:
            self.start_zookeeper()
            wait_until(self._zookeeper_serves, self.cfg.ready_timeout_seconds,
                       f"ZooKeeper to serve at {self.cfg.host}:{self.cfg.zookeeper_port}")
            progress(f"ZooKeeper serving at {self.cfg.host}:{self.cfg.zookeeper_port}")
        for node in self.nodes:
            self.start(node)
        progress(f"started nodes {self.nodes}; waiting for registration")
        self.wait_ready(self.cfg.ready_timeout_seconds)
        if self.cfg.secure:
            self.secure_setup(self.cfg.ready_timeout_seconds)
            progress(f"secured listener (SASL_SSL, SCRAM-SHA-512, ACLs) ready at "
                     f"{self.secure_bootstrap}")
        progress(f"cluster ready at {self.bootstrap}")

    def secure_setup(self, timeout: float) -> None:
        """Through the PLAINTEXT listener (a super user): set every SCRAM user's credential
        from its password file (a cluster formatted before ``secure`` was on has none),
        create the ACLs; then wait until ``auditor`` lists the topics over SECURE."""
        admin = self.admin()
        self.security.upsert_users(admin, timeout)
        self.security.apply_acls(admin, timeout)
        wait_until(self._secure_probe, timeout,
                   f"user {self.security.user('auditor')} to see {PROBE_TOPIC} over "
                   f"the SECURE listener")

    def _secure_probe(self) -> bool:
        from kafka_audit.profile import librdkafka_config

        conf = librdkafka_config(self.secure_profile("auditor"), self.bootstrap)
        md = admin_client(conf, **{"socket.timeout.ms": 5000}).list_topics(timeout=5)
        # the topic is listed only to a user allowed to describe it: the ACLs are in force
        return PROBE_TOPIC in md.topics and set(md.brokers) >= set(self.nodes)

    def down(self, discard: bool = False) -> None:
        """Stop every node. ``discard``: their data is thrown away next, so SIGKILL at
        once (all three combined nodes sent SIGTERM together wait for a controlled shutdown
        that the quorum, going down with them, never answers: 45 s, then SIGKILL anyway)."""
        # stop in parallel: a clean shutdown waits for controlled shutdown, so send all first
        pids = {n: self.pid(n) for n in self.nodes}
        for pid in pids.values():
            if pid is not None:
                os.kill(pid, signal.SIGKILL if discard else signal.SIGTERM)
        for pid in pids.values():
            if pid is not None and not _wait_exit(pid, 45, raise_on_timeout=False):
                os.kill(pid, signal.SIGKILL)
                _wait_exit(pid, 30)
        for n in self.nodes:
            cgroups.remove(self.cgroup(n))
        self.stop_zookeeper(kill=discard)  # last: the brokers' controlled shutdown needs it

    def admin(self):
        return admin_client(self.bootstrap, **{"socket.timeout.ms": 5000})

    def _ports_open(self) -> bool:
        import socket

        for n in self.nodes:
            with socket.socket() as sock:
                sock.settimeout(1)
                if sock.connect_ex((self.cfg.host, self.cfg.broker_port(n))) != 0:
                    return False
        return True

    def registered_brokers(self) -> set[int]:
        md = self.admin().list_topics(timeout=5)
        return set(md.brokers)

    def wait_ready(self, timeout: float) -> None:
        want = set(self.nodes)
        wait_until(self._ports_open, timeout, "every broker port to accept connections")
        wait_until(lambda: self.registered_brokers() >= want, timeout,
                   f"brokers {sorted(want)} to register")
        self.create_topic(PROBE_TOPIC, partitions=1, replication=len(self.nodes))
        wait_until(self._probe_write, timeout, "an acks=all write to the RF=3 probe topic")

    def _probe_write(self) -> bool:
        from confluent_kafka import Producer

        p = Producer(producer_config(self.bootstrap, acks="all",
                                     **{"message.timeout.ms": 5000}))
        result: list[object] = []
        p.produce(PROBE_TOPIC, b"probe", on_delivery=lambda err, _m: result.append(err))
        p.flush(10)
        return bool(result) and result[0] is None

    def create_topic(self, topic: str, partitions: int = 1, replication: int = 3,
                     config: dict[str, str] | None = None, timeout: float = 30) -> None:
        from confluent_kafka import KafkaException
        from confluent_kafka.admin import NewTopic

        admin = self.admin()
        existing = admin.list_topics(timeout=10).topics
        if topic not in existing:
            fut = admin.create_topics([NewTopic(topic, partitions, replication,
                                                config=config or {})])[topic]
            try:
                fut.result(timeout)
            except KafkaException as exc:
                if "TOPIC_ALREADY_EXISTS" not in str(exc):
                    raise
        wait_until(lambda: self._all_led(topic, partitions), timeout,
                   f"every partition of {topic} to have a leader")

    def _all_led(self, topic: str, partitions: int) -> bool:
        infos = self.partitions(topic)
        return len(infos) == partitions and all(i.leader >= 0 for i in infos)

    def partitions(self, topic: str | None = None, seen_by: int | None = None
                   ) -> list[PartitionInfo]:
        """The partitions as the cluster's metadata says, or as broker ``seen_by`` alone says
        (a new client whose only bootstrap it is: an isolated broker's view is its own)."""
        admin = self.admin() if seen_by is None else admin_client(
            f"{self.cfg.host}:{self.cfg.broker_port(seen_by)}", **{"socket.timeout.ms": 5000})
        md = admin.list_topics(topic=topic, timeout=5)
        out = []
        for name, t in sorted(md.topics.items()):
            if t.error is not None:
                continue
            for pid, p in sorted(t.partitions.items()):
                out.append(PartitionInfo(name, pid, p.leader, tuple(p.replicas), tuple(p.isrs)))
        return out

    def elect_preferred(self, topic: str, partition: int, timeout: float = 60) -> None:
        """Give the partition's leadership back to its preferred replica now (the broker
        would do it at its next imbalance check, at a moment a test cannot choose)."""
        from confluent_kafka import ElectionType, KafkaException, TopicPartition

        admin = self.admin()

        def preferred() -> bool:
            info = next(i for i in self.partitions(topic) if i.partition == partition)
            if info.leader == info.replicas[0]:
                return True
            try:
                admin.elect_leaders(ElectionType.PREFERRED,
                                    [TopicPartition(topic, partition)]).result(10)
            except KafkaException as exc:  # not yet eligible: asked again
                if "ELECTION_NOT_NEEDED" not in str(exc):
                    raise
            return False

        wait_until(preferred, timeout, f"the preferred replica to lead {topic}-{partition}",
                   every=1)

    def log_end(self, topic: str, partition: int) -> int:
        """The partition's log end (high watermark) as its leader answers now."""
        from confluent_kafka import TopicPartition
        from confluent_kafka.admin import OffsetSpec

        admin = self.admin()  # referenced until its future resolves
        futures = admin.list_offsets({TopicPartition(topic, partition): OffsetSpec.latest()},
                                     request_timeout=5)
        return int(next(iter(futures.values())).result(timeout=10).offset)

    def active_controller(self, nodes: list[int] | None = None) -> int | None:
        """The KRaft quorum's leader (the active controller) as the running nodes' own
        election state files say: the newest epoch's leader, None if none knows one. In
        combined mode a kill of that node is two fail-overs: the quorum elects another
        controller, which then waits a whole broker session before it fences the dead
        broker and moves its partitions (a leader kill alone: one session). ``nodes``:
        the nodes to ask (the running ones by default). ZooKeeper mode: the broker the
        cluster names controller (elected in ZooKeeper; ``nodes`` is not asked)."""
        if self.cfg.zookeeper:
            admin = self.admin()  # referenced until its future resolves
            try:
                node = admin.describe_cluster(request_timeout=5).result(10).controller
            except Exception:  # noqa: BLE001 - no answer: none known
                return None
            return None if node is None or node.id < 0 else node.id
        best: tuple[int, int] | None = None
        for node in self.running() if nodes is None else nodes:
            path = self.meta_dir(node) / "__cluster_metadata-0" / "quorum-state"
            try:
                state = json.loads(path.read_text())
            except (OSError, ValueError):
                continue  # being rewritten, or not written yet
            leader, epoch = state.get("leaderId", -1), state.get("leaderEpoch", -1)
            if leader is not None and leader >= 0 and (best is None or epoch > best[0]):
                best = (epoch, leader)
        return None if best is None else best[1]

    def leader_of(self, topic: str, partition: int, seen_by: int | None = None) -> int:
        for info in self.partitions(topic, seen_by):
            if info.partition == partition:
                return info.leader
        raise ClusterError(f"no such partition {topic}-{partition}")

    def status(self) -> str:
        lines = ["node  pid      state"]
        for n in self.nodes:
            pid = self.pid(n)
            lines.append(f"{n:<5} {pid or '-':<8} {'running' if pid else 'stopped'}")
        if self.cfg.zookeeper:
            pid = self.zookeeper_pid()
            lines.append(f"{'zk':<5} {pid or '-':<8} {'running' if pid else 'stopped'} "
                         f"(ZooKeeper at {self.cfg.host}:{self.cfg.zookeeper_port})")
        try:
            parts = self.partitions()
        except Exception as exc:  # noqa: BLE001 - status must print what it can
            lines.append(f"metadata unavailable: {exc}")
            return "\n".join(lines)
        lines.append("")
        lines.append(f"{'topic':<28} {'part':>4} {'leader':>6}  replicas  isr")
        for p in parts:
            lines.append(f"{p.topic:<28} {p.partition:>4} {p.leader:>6}  "
                         f"{','.join(map(str, p.replicas)):<9} {','.join(map(str, p.isr))}")
        return "\n".join(lines)


def _our_pid(pid_file: Path, main: bytes, folder: str) -> int | None:
    """The pid in ``pid_file`` if that process runs and is still ours: its command line
    names ``main`` and ``folder`` (a recycled pid is another process)."""
    try:
        pid = int(pid_file.read_text())
    except (FileNotFoundError, ValueError):
        return None
    try:
        os.kill(pid, 0)
        cmdline = Path(f"/proc/{pid}/cmdline").read_bytes()
    except (ProcessLookupError, OSError):
        return None
    return pid if main in cmdline and folder.encode() in cmdline else None


def _terminate(pid: int | None, timeout: float, kill: bool = False) -> None:
    """SIGTERM ``pid`` (SIGKILL with ``kill``) and wait for it; SIGKILL after ``timeout``."""
    if pid is None:
        return
    os.kill(pid, signal.SIGKILL if kill else signal.SIGTERM)
    if not _wait_exit(pid, timeout, raise_on_timeout=False):
        os.kill(pid, signal.SIGKILL)
        _wait_exit(pid, 30)


def _wait_exit(pid: int | None, timeout: float, raise_on_timeout: bool = True) -> bool:
    if pid is None:
        return True
    deadline = time.monotonic() + timeout
    while time.monotonic() < deadline:
        try:
            waited, _ = os.waitpid(pid, os.WNOHANG)  # reap our own child if it is one
            if waited == pid:
                return True
        except ChildProcessError:
            pass
        try:
            os.kill(pid, 0)
        except ProcessLookupError:
            return True
        time.sleep(0.05)
    if raise_on_timeout:
        raise ClusterError(f"process {pid} did not exit within {timeout}s")
    return False
