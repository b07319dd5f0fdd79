"""Typed settings: the models below, conf/defaults.yaml, an overlay file, KAFKA_AUDIT_* variables.

Lowest to highest priority: the defaults in the models; ``conf/defaults.yaml`` (the
local cluster's broker properties); the YAML file named by ``KAFKA_AUDIT_CONFIG``;
``KAFKA_AUDIT_<SECTION>__<KEY>`` environment variables; keyword arguments to
:class:`Settings`. Every layer is merged key by key at every depth. An unknown key,
in a file or in the environment, is an error naming it and the nearest valid key.

Reach them through :func:`get_settings`, which raises :class:`ConfigError` with a
one-line message; tests call ``get_settings.cache_clear()`` after changing the
environment. There is no module-level settings instance.
"""

from __future__ import annotations

import difflib
import functools
import json
import os
import re
import types
import typing
from importlib import resources
from pathlib import Path
from typing import Any

import yaml
from pydantic import (
    BaseModel,
    ConfigDict,
    Field,
    SecretBytes,
    SecretStr,
    ValidationError,
    field_validator,
    model_validator,
)
from pydantic_settings import (
    BaseSettings,
    PydanticBaseSettingsSource,
    SettingsConfigDict,
    SettingsError,
)

from kafka_audit.errors import ConfigError
from kafka_audit.jars import KAFKA_VERSIONS, LOCAL_VERSIONS, ZOOKEEPER_VERSIONS
from kafka_audit.profile import ProfileSettings

# the one secret rule: what config show, errors and logs hide (re-exported for them)
from kafka_audit.redact import REDACTED, is_secret_name, redacted, remember_secret  # noqa: F401
from kafka_audit.storage import StorageSettings, is_remote, register, spark_uri

ENV_PREFIX = "KAFKA_AUDIT_"
ENV_DELIMITER = "__"
#: KAFKA_AUDIT_* variables that are not settings, accepted as they are:
#: the overlay file, the JVM jar cache (kafka_audit/jars.py) and a test knob
#: (tests/spark/test_spark_engine.py).
NON_SETTINGS_ENV = ("KAFKA_AUDIT_CONFIG", "KAFKA_AUDIT_JAR_CACHE", "KAFKA_AUDIT_SPARK_HISTORIES")


def default_home() -> Path:
    """Working data's default place: ``$XDG_DATA_HOME/kafka-audit`` (``~/.local/share``)."""
    base = os.environ.get("XDG_DATA_HOME") or str(Path.home() / ".local" / "share")
    return Path(base) / "kafka-audit"


class _Section(BaseModel):
    """A settings section: an unknown key is an error, never silently ignored."""

    model_config = ConfigDict(extra="forbid")


class ClusterSettings(_Section):
    """The local KRaft cluster that `kafka-audit cluster`, the demo, the scenarios and the
    tests start on this machine; another cluster is a ``profile``."""

    nodes: int = Field(3, ge=1, le=9, description="how many nodes the local cluster starts, "
                       "each a broker and a KRaft controller")
    host: str = Field("127.0.0.1", description="the address every local listener binds to: "
                      "loopback only (127.0.0.0/8 or localhost)")
    broker_base_port: int = Field(29091, description="node N listens on this + N - 1")
    controller_base_port: int = Field(29191, description="KRaft controller listener of node N")
    replication_base_port: int = Field(
        29291, description="followers fetch from node N here: a fault can cut replication alone")
    heap: str = Field("-Xms256m -Xmx512m",
                      description="three brokers plus a Spark driver fit in 24 GiB on 2 cores")
    jvm_options: str = Field(
        "", description="more options for each broker's JVM (the test suite's cluster: "
                        "-XX:TieredStopAtLevel=1; bench/broker_restart.py --busy 1: a "
                        "restarted broker back in every ISR in 5.6 s against 9.1)")
    broker_overrides: dict[str, Any] = Field(
        default_factory=dict, description="broker properties (conf/defaults.yaml sets the "
                                          "local cluster's: failures noticed in seconds)")
    kafka_version: str = Field(
        KAFKA_VERSIONS[0], description="the Kafka version the local cluster runs: "
        + " or ".join(LOCAL_VERSIONS) + " (the first pinned in "
        "deploy/maven/kafka-broker.pom.xml; another fetched once by Maven into the jar "
        "cache); the watcher's metadata-log tail and `check` run on the newest's jars, "
        "whose serde reads every older version's records. "
        + " and ".join(ZOOKEEPER_VERSIONS) + " run in ZooKeeper mode: a ZooKeeper server "
        "beside the brokers (its client port: the controller port of node nodes + 1), each "
        "broker's controller port its control-plane listener; no eligible leader replicas, "
        "no secured listener")
    eligible_leader_replicas: bool = Field(
        False, description="format the cluster with KIP-966's eligible leader replicas on "
        "(eligible.leader.replicas.version=1: a partition whose ISR emptied elects a clean "
        "leader from them); off: the classic elections, as clusters formatted before 4.1")
    ready_timeout_seconds: float = Field(
        90, description="`cluster up` waits this long for each step of readiness (ports open, "
        "brokers registered, an acks=all write to the probe topic; the secured listener's "
        "users and ACLs) before it fails")
    # the secured listener (scenarios/security.py makes its certificates, users and ACLs);
    # the users' passwords are generated into <home>/kafka/security/<user>.password, never here
    secure: bool = Field(False, description="give each node a fourth listener, SECURE "
                         "(SASL_SSL, SCRAM-SHA-512, ACLs enforced); PLAINTEXT stays a super user")
    secure_base_port: int = Field(29391, description="node N's SECURE listener is this + N - 1")
    secure_auditor_user: str = Field(
        "auditor", pattern=r"^[A-Za-z0-9][A-Za-z0-9._-]*$",
        description="SCRAM user with every permission the auditor needs")
    secure_noread_user: str = Field(
        "noread", pattern=r"^[A-Za-z0-9][A-Za-z0-9._-]*$",
        description="SCRAM user that may describe the cluster and topics, never read them")

    @field_validator("secure_noread_user")
    @classmethod
    def _two_users(cls, v: str, info: Any) -> str:
        if v == info.data.get("secure_auditor_user"):
            raise ValueError("secure_noread_user must differ from secure_auditor_user")
        return v

    @field_validator("kafka_version")
    @classmethod
    def _a_version_we_run(cls, v: str) -> str:
        if v not in LOCAL_VERSIONS:
            raise ValueError(f"the local cluster runs Kafka {' or '.join(LOCAL_VERSIONS)}, "
                             f"not {v}")
        return v

    @model_validator(mode="after")
    def _zookeeper_mode_as_it_was(self) -> ClusterSettings:
        if self.zookeeper:
            if self.eligible_leader_replicas:
                raise ValueError(f"Kafka {self.kafka_version} (ZooKeeper) has no eligible "
                                 f"leader replicas: they came with KRaft in 4.0")
            if self.secure:
                raise ValueError(f"the local cluster's secured listener is KRaft's: not "
                                 f"with Kafka {self.kafka_version} (ZooKeeper)")
        return self

    @property
    def zookeeper(self) -> bool:
        """Whether the local cluster runs in ZooKeeper mode (Kafka 3.9)."""
        return self.kafka_version in ZOOKEEPER_VERSIONS

    @property
    def zookeeper_port(self) -> int:
        """The ZooKeeper server's client port (ZooKeeper mode): the controller port of the
        node after the last."""
        return self.controller_port(self.nodes + 1)

    @field_validator("host")
    @classmethod
    def _loopback_only(cls, v: str) -> str:
        # the local launcher only ever binds to this machine
        if not (v.startswith("127.") or v == "localhost"):
            raise ValueError("the local cluster binds to loopback only (127.0.0.0/8)")
        return v

    def broker_port(self, node: int) -> int:
        return self.broker_base_port + node - 1

    def controller_port(self, node: int) -> int:
        return self.controller_base_port + node - 1

    def replication_port(self, node: int) -> int:
        return self.replication_base_port + node - 1

    def secure_port(self, node: int) -> int:
        return self.secure_base_port + node - 1

    @property
    def bootstrap(self) -> str:
        return ",".join(f"{self.host}:{self.broker_port(n)}" for n in range(1, self.nodes + 1))

    @property
    def secure_bootstrap(self) -> str:
        """The SECURE listeners (they exist only while ``secure`` is on)."""
        return ",".join(f"{self.host}:{self.secure_port(n)}" for n in range(1, self.nodes + 1))


class RabbitSettings(_Section):
    """The local RabbitMQ cluster that `kafka-audit rabbit` starts on this machine beside the
    Kafka one: Debian's rabbitmq-server, each node an Erlang VM on loopback, clustered at
    its first start (scenarios/rabbit_cluster.py)."""

    nodes: int = Field(3, ge=1, le=9, description="how many nodes the local cluster starts")
    host: str = Field("127.0.0.1", description="the address the nodes' client listeners "
                      "(AMQP, streams, management) bind to")
    node_address_base: str = Field(
        "127.0.1", pattern=r"^127\.(25[0-5]|2[0-4]\d|1?\d?\d)\.(25[0-5]|2[0-4]\d|1\d\d|[1-9]\d?)$",
        description="node N talks to the other nodes from and on <base>.N (Erlang "
        "distribution), an address of its own on loopback: a fault cuts one node off from "
        "the others by address while clients still reach it")
    amqp_base_port: int = Field(29591, description="node N's AMQP 0-9-1 listener is this + N - 1")
    management_base_port: int = Field(29691, description="node N's management HTTP API")
    stream_base_port: int = Field(29791, description="node N's stream protocol listener")
    dist_base_port: int = Field(29891, description="node N's Erlang distribution listener")
    epmd_port: int = Field(29590, description="the Erlang port mapper the nodes register with")
    partition_handling: typing.Literal["pause_minority", "autoheal", "ignore"] = Field(
        "pause_minority", description="cluster_partition_handling: what a node does when it "
        "loses the others (the scenarios set each)")
    net_ticktime: int = Field(
        8, ge=2, description="seconds before a node that stopped answering is taken for "
        "lost (Erlang's net_ticktime; its default, 60, would make every fault a minute)")
    ready_timeout_seconds: float = Field(
        120, description="`rabbit up` waits this long for every node to run in one cluster")

    def amqp_port(self, node: int) -> int:
        return self.amqp_base_port + node - 1

    def management_port(self, node: int) -> int:
        return self.management_base_port + node - 1

    def stream_port(self, node: int) -> int:
        return self.stream_base_port + node - 1

    def dist_port(self, node: int) -> int:
        return self.dist_base_port + node - 1

    def node_address(self, node: int) -> str:
        return f"{self.node_address_base}.{node}"

    def node_name(self, node: int) -> str:
        return f"rabbit-{node}@{self.node_address(node)}"


class RabbitNode(_Section):
    """One node of the audited RabbitMQ cluster: where its AMQP listener and its management
    API are. Nodes are numbered by their place in ``rabbitmq.nodes`` (from 1): give the
    audited publishers the same list in the same order, so that a write's node and the
    watcher's agree."""

    amqp: str = Field(description="host:port of the node's AMQP 0-9-1 listener")
    management: str = Field(description="the base URL of the node's management API "
                            "(http://host:15672)")

    @field_validator("amqp")
    @classmethod
    def _host_port(cls, v: str) -> str:
        host, _, port = v.rpartition(":")
        if not host or not port.isdigit() or not 0 < int(port) < 65536:
            raise ValueError(f"{v!r} is not host:port")
        return v

    @field_validator("management")
    @classmethod
    def _url(cls, v: str) -> str:
        from urllib.parse import urlsplit

        v = v.rstrip("/")
        try:
            u = urlsplit(v)
            port_ok = u.port is None or 0 < u.port < 65536
        except ValueError:
            port_ok = False
        if not port_ok or u.scheme not in ("http", "https") or not u.hostname:
            raise ValueError(f"{v!r} is not a management API base URL (http://host:15672)")
        if u.username is not None or u.password is not None:
            raise ValueError("a management API URL without user or password: they are "
                             "rabbitmq.username and rabbitmq.password")
        if u.path or u.query or u.fragment:
            raise ValueError(f"{v!r}: the management API's base URL, no path, query or "
                             "fragment (http://host:15672)")
        return v


class RabbitmqSettings(_Section):
    """A RabbitMQ cluster audited beside Kafka (docs/rabbitmq.md): with queues named here,
    `kafka-audit run` also runs the RabbitMQ reader (what is in the queues, into
    ``consumed``) and the RabbitMQ watcher (nodes, partitions, each queue's leader and
    synchronised mirrors, into ``cluster_events``). Not the local test cluster: that is
    the ``rabbit`` section."""

    queues: list[str] = Field(
        default_factory=list, description="the ledger keys of the queues and streams to "
        "read (rabbitmq:queue:<vhost>:<name>, percent-encoded: %2F for the vhost /), all of "
        "one vhost; for a classic or quorum queue, the audit queue beside the audited one "
        "(docs/rabbitmq.md). Empty: no RabbitMQ component runs")
    nodes: list[RabbitNode] = Field(default_factory=list, description="the cluster's nodes")
    username: str = Field("guest", description="the user the reader and the watcher log in "
                          "as (it reads the queues, publishes the barriers, and may see "
                          "the management API's nodes and queues: the monitoring tag)")
    password: SecretStr = Field(SecretStr("guest"), description="its password (e.g. from "
                                "KAFKA_AUDIT_RABBITMQ__PASSWORD)")
    heartbeat_seconds: int = Field(30, gt=0, description="AMQP heartbeat of the reader's "
                                   "connection: a reader gone is noticed by the broker after "
                                   "two (barrier_holdoff_seconds rests on it)")
    reader_name: str = Field("reader", pattern=r"^[A-Za-z0-9._-]+$", description="the "
                             "reader's name in its transactions on consumed (one reader per "
                             "name)")
    barrier_seconds: float = Field(2.0, gt=0, description="how often the reader publishes a "
                                   "barrier into each queue")
    flush_seconds: float = Field(1.0, gt=0, description="how often the reader commits what "
                                 "it read")
    barrier_holdoff_seconds: float = Field(
        90.0, ge=0, description="after the reader's connection was lost uncleanly, barriers "
        "read this long are not recorded (deliveries checked out to the dead consumer come "
        "back later)")
    watch_interval_seconds: float = Field(1.0, gt=0, description="how often the watcher asks "
                                          "the management API")

    @field_validator("queues")
    @classmethod
    def _keys(cls, v: list[str]) -> list[str]:
        from kafka_audit.schemas.systems import parse_rabbit_key

        vhosts = {parse_rabbit_key(k).vhost for k in v}  # ValueError names a bad key
        if len(vhosts) > 1:
            raise ValueError(f"the queues name vhosts {sorted(vhosts)}: one vhost")
        if len(set(v)) != len(v):
            raise ValueError("a queue named twice")
        return v

    @model_validator(mode="after")
    def _nodes_for_queues(self) -> RabbitmqSettings:
        if self.queues and not self.nodes:
            raise ValueError("rabbitmq.queues without rabbitmq.nodes: name the cluster's "
                             "nodes")
        # deliveries checked out to a reader that is gone come back once the broker
        # notices: two heartbeats, or a cut node's net_ticktime (60 s by default); a
        # barrier recorded before then could pass them, and they would look lost
        least = max(2 * self.heartbeat_seconds, 60) + 30
        if self.barrier_holdoff_seconds < least:
            raise ValueError(f"rabbitmq.barrier_holdoff_seconds must be at least {least} "
                             f"with heartbeat_seconds {self.heartbeat_seconds} (two "
                             "heartbeats or net_ticktime, 60 s, and 30 s more): a barrier "
                             "read sooner could pass messages the broker has not given back")
        return self

    def secret(self) -> str:
        """The password, remembered so that every log line and status file hides it."""
        return remember_secret(self.password.get_secret_value()) or ""

    def parameters(self) -> dict:
        """pika's connection parameters per node number (from 1), to the queues' vhost."""
        import pika

        from kafka_audit.schemas.systems import parse_rabbit_key

        vhost = parse_rabbit_key(self.queues[0]).vhost if self.queues else "/"
        out = {}
        for i, node in enumerate(self.nodes, 1):
            host, _, port = node.amqp.rpartition(":")
            out[i] = pika.ConnectionParameters(
                host.strip("[]"), int(port), vhost, pika.PlainCredentials(
                    self.username, self.secret()),
                heartbeat=self.heartbeat_seconds, connection_attempts=1, socket_timeout=10,
                blocked_connection_timeout=60)
        return out


class ProducerSettings(_Section):
    """The project's own instrumented producers: the ack ledger's commits, the load
    generator's librdkafka settings."""

    acks: str = Field("all", description="read by no command today: `kafka-audit produce "
                      "--acks` sets the load generator's (default all)")
    idempotence: bool = Field(False, description="read by no command today: `kafka-audit "
                              "produce --idempotence` sets the load generator's")
    retries: int = Field(2, description="read by no command today: `kafka-audit produce "
                         "--retries` sets the load generator's (default 2)")
    linger_ms: int = Field(5, description="the load generator's linger.ms (kafka-audit "
                           "produce, the demo, the benchmarks)")
    message_timeout_ms: int = Field(30000, description="the load generator's "
                                    "message.timeout.ms: a write not acknowledged by then "
                                    "fails (keep audit.read_retention_seconds above it)")
    ledger_flush_seconds: float = Field(1.0, gt=0, description="the ack ledger commits this "
                                        "often, and within a quarter second of the first "
                                        "report of a topic new to it (the audit reads a "
                                        "topic from when the ledger first names it)")
    ledger_flush_rows: int = Field(50000, gt=0, description="... or once this many reports "
                                   "wait (the Python path; the plugin's spool waits on disk)")
    ledger_commits: typing.Literal["direct", "staged"] = Field(
        "direct", description="direct: each producer (and shipper) commits its own segments "
        "to `acks`, one commit a flush each; staged: it hands them over to the service, "
        "which commits every host's in one commit (`producer.staged_commit_seconds`): for "
        "more than a handful of producer hosts (docs/operate/storage.md)")
    staged_commit_seconds: float = Field(
        1.0, gt=0, description="the service commits the segments producers handed over "
        "(ledger_commits: staged) this often")

    @property
    def staged(self) -> bool:
        """Whether ledgers hand their segments over to the service's committer."""
        return self.ledger_commits == "staged"

    @field_validator("acks", mode="before")
    @classmethod
    def _acks(cls, v: object) -> str:  # YAML reads `acks: 1` as a number
        if str(v) not in {"0", "1", "all", "-1"}:
            raise ValueError("acks must be 0, 1, all or -1")
        return str(v)


class StampSettings(_Section):
    """The stamp every audited record carries (schemas/stamp.py)."""

    key_file: Path | None = Field(
        None, description="a file holding the stamp key (16-4096 bytes, not readable by "
        "others; the same file for producers and auditor): producers add a MAC to every "
        "stamp, and the auditor counts a stamp without a valid one as forged (it confirms no "
        "write). Unset: no MACs (schemas/stamp.py, The stamp MAC)")


class SparkSettings(_Section):
    """The Spark session of the consume and audit jobs (jobs/spark.py)."""

    master: str = Field("local[2]", description="Spark's master: local[N] runs in the "
                        "service's own JVM; spark://host:port a standalone cluster")
    local_task_attempts: int = Field(
        6, ge=1, description="in local mode, a failed task is tried this many times before "
        "its job fails (Spark's local[N] tries once: a Kafka read that times out while a "
        "partition's leader fails over then failed the whole micro-batch and restarted the "
        "stream); a master given as local[N,F] keeps its own F")
    driver_memory: str = Field("2g", description="spark.driver.memory")
    shuffle_partitions: int = Field(4, description="spark.sql.shuffle.partitions: few, "
                                    "since the audit's data per pass is small")
    consume_trigger_seconds: float = Field(2, description="the consume job starts a "
                                           "micro-batch this often (its processingTime "
                                           "trigger)")
    topic_refresh_seconds: float = Field(
        0.5, gt=0, description="how often the consume job looks for newly audited topics "
        "(the ack ledger's: a look asks whether the ledger has a new commit, a few file "
        "lookups, and reads only the topic column of its new files); a new one restarts the "
        "stream between two micro-batches. Each second of it is up to 40,000 records behind "
        "at the start of a new topic written at 40,000 msg/s")
    warm_up: bool = Field(True, description="a service that starts with no audited topic "
                          "yet folds 100,000 made-up records while it waits (decoded as the "
                          "Kafka client decodes a fetch, in twenty rounds inside the one "
                          "micro-batch of a query of their own: 10-14 s on 2 cores, 4-5 s "
                          "for one round; no round begins once a topic has come), so that the "
                          "JVM's first real micro-batch (a new topic's, with its backlog "
                          "growing meanwhile) is not also its slowest (bench/sustained.py); "
                          "with topics to read, their first batch is the warm-up")
    log_level: str = Field("ERROR", description="Spark's log level (WARN with --verbose)")
    properties: dict[str, str] = Field(
        default_factory=dict, description="further Spark properties (spark.executor.memory, "
        "...), set last: they win over the project's")
    max_offsets_per_trigger: int = Field(
        1_000_000, gt=0, description="most offsets one consume micro-batch takes when "
        "catching up: a backlog is read in steps of this many (the passes wait for it: "
        "steady.backlog_pass_seconds); a batch's rows are written as they are folded, "
        "with no stored copy first (streamed to delta-rs up to spark.stream_rows); each "
        "batch costs some fixed work, about a second (bench/catchup.py)")
    driver_rows: int = Field(
        200_000, ge=0, description="Delta data of at most this many rows moves through the "
        "driver as Arrow and is committed with delta-rs (tens of ms, against about half a "
        "second for Spark's Delta writer); more goes through Spark (a consume micro-batch: "
        "spark.stream_rows). 0: always Spark (a consume micro-batch: streamed up to "
        "spark.stream_rows)")
    stream_rows: int = Field(
        2_000_000, ge=0, description="a consume micro-batch of more than spark.driver_rows "
        "offsets and at most this many is handed from Spark's tasks to delta-rs as Arrow, "
        "as the tasks end, and committed with delta-rs: the driver's Python holds what "
        "delta-rs has not written yet (a few record batches and the file it fills), its "
        "JVM the tasks' results not yet handed "
        "(149 bytes a row as Arrow in a catch-up's table, a row a record: well under "
        "spark.driver.maxResultSize, 1 GiB by default; a batch that outgrows it is written "
        "through Spark); a larger one goes through Spark's Delta writer")


class AuditSettings(_Section):
    """The audit passes and the verdict rules' time limits (docs/concepts.md)."""

    settle_seconds: float = Field(30, ge=0, description="a write is judged lost only once the "
                                  "consumed frontier has stayed past its offset this long")
    interval_seconds: float = Field(5, gt=0, description="a pass starts this often (in "
                                    "`kafka-audit run` also at once when the consume job "
                                    "commits: steady.wake_on_commit)")
    lookback_seconds: float = Field(30, ge=0, description="writes acked this close to a leader "
                                    "change are judged only from a read made after it")
    unseen_after_seconds: float = Field(120, gt=0, description="a pending write still unread "
                                        "this long after its ack is reported as unseen")
    read_retention_seconds: float = Field(
        600, gt=0, description="read runs stay in the hot state this long (longer if a pending "
        "write needs them); keep it above the producers' message.timeout.ms")
    beyond_end_seconds: float = Field(
        60, gt=0, description="a write acked this long ago at an offset the partition's log "
        "no longer reaches (its high watermark at or below it, the log read whole, no leader "
        "change since) is judged, not left waiting for the log to grow past it: a truncation "
        "on a partition no longer written. Keep it above the brokers' "
        "replica.lag.time.max.ms (Kafka's default 30 s): a write on the leader is under the "
        "high watermark by then")
    rabbit_margin_seconds: float = Field(
        1, ge=0, description="RabbitMQ's barrier rule (docs/rabbitmq.md): a barrier settles a "
        "write once its publish began this long after the write's confirm: keep it above "
        "how far the publishers' and the reader's clocks may differ")
    reread_timeout_seconds: float = Field(30, gt=0, description="a direct re-read of a suspect "
                                          "range gives up after this long")
    hot_rewrite_passes: int = Field(10, gt=0, description="each pass appends its state as a "
                                    "generation; every this many passes it rewrites the table")
    suspect_seconds: float = Field(
        0.5, gt=0, description="`kafka-audit run` looks this often for the writes a leader "
        "change truncated (the watcher's epoch_end rows), to mark them suspected")
    suspect_follow_seconds: float = Field(
        60, ge=0, description="a leader change's suspected writes are looked for this long "
        "after it: the ledger commits a report up to a flush after it, and an old leader "
        "paused past its session may go on acknowledging when it resumes")
    suspect_lookback_seconds: float = Field(
        300, gt=0, description="writes acknowledged longer than this before a leader change "
        "are not suspected by it (the read after settle judges them as always)")


class WatchSettings(_Section):
    """The watcher: the cluster's leaders, ISRs and settings into cluster_events."""

    interval_seconds: float = Field(0.5, gt=0, description="the watcher polls every "
                                    "broker's view of the partitions this often")
    blind_after_seconds: float = Field(
        3, gt=0, description="two successful polls further apart than this (an outage, a "
        "paused process) leave a gap in cluster_events: what happened then was not seen; "
        "not while the KRaft metadata log is tailed, current at both polls (it hands over "
        "the time between whole)")
    startup_timeout_seconds: float = Field(
        30, gt=0, description="a watcher that has never reached the cluster gives up after "
        "this long, with one line")
    config_seconds: float = Field(30, gt=0, description="topic durability settings "
                                  "(min.insync.replicas, unclean election, ...) asked this "
                                  "often")
    log_end_seconds: float = Field(2, gt=0, description="every partition's log end asked this "
                                   "often (a drop is a log_end_drop event)")
    metadata_log_dirs: list[str] | None = Field(
        None, description="the nodes' KRaft metadata log folders on this machine (each a "
        "metadata.log.dir or its __cluster_metadata-0): the exact timeline "
        "(jobs/watcher/metadata_log.py); a record counts once a majority of them hold it, so "
        "list every controller's. None: the local cluster's, for the local profile; []: off")
    zookeeper_connect: str | None = Field(
        None, description="a ZooKeeper-era cluster's (Kafka 3.x) ZooKeeper, "
        "host:port[,host:port...][/chroot] as the brokers' zookeeper.connect: the watcher "
        "reads the partitions' leaders, epochs and ISRs, the brokers and the controller "
        "from its state, read-only (jobs/watcher/zookeeper.py), as exact as ZooKeeper keeps "
        "them. None: the local cluster's in ZooKeeper mode (cluster.kafka_version 3.9.2); "
        "\"\": off")
    metadata_log_stale_seconds: float = Field(
        3, gt=0, description="the metadata log counts as current while its newest record is "
        "younger than this (the active controller writes one every 500 ms); else the "
        "watcher's polls give the partition events")


class OutageSettings(_Section):
    """How every long-running component (watcher, consume, audit) rides out an outage."""

    retry_seconds: float = Field(0.5, gt=0, description="first wait after a failed step")
    max_backoff_seconds: float = Field(10, gt=0, description="the wait doubles up to this")
    healthy_seconds: float = Field(
        60, gt=0, description="a component of `kafka-audit run` that ran this long before "
        "it died restarts after the first wait again, not the doubled one")


class ServiceSettings(_Section):
    """``kafka-audit run``: the supervised service."""

    stop_timeout_seconds: float = Field(30, gt=0, description="SIGTERM stops every component "
                                        "within this long")
    memory_log_seconds: float = Field(0, ge=0, description="log where the service's memory is "
                                      "(RSS, C heap, Arrow pool, Python objects) this often; "
                                      "0: never")


class HealthSettings(_Section):
    """``/healthz`` says ``degraded`` once a component's last good step is older than this."""

    watcher_stale_seconds: float = Field(15, gt=0, description="the watcher's last good "
                                         "poll may be this old")
    consume_stale_seconds: float = Field(120, gt=0, description="the consume job reports "
                                         "progress at least every 10 s while it is alive")
    audit_stale_seconds: float = Field(120, gt=0, description="the audit loop's last "
                                       "successful pass may be this old")


class ApiToken(_Section):
    """One bearer token of the REST API, stored hashed: the settings never hold a token."""

    name: str = Field(pattern=r"^[A-Za-z0-9][A-Za-z0-9._-]*$",
                      description="who holds it (e.g. grafana, prometheus): for people, never "
                                  "logged with the token")
    hash: str = Field(description="sha256:<64 hex digits> of the token, as `kafka-audit token "
                                  "hash` prints it; never the token itself")
    role: typing.Literal["read", "admin"] = Field(
        "read", description="read: every GET; admin: also what writes (no endpoint writes today)")

    @field_validator("hash")
    @classmethod
    def _hashed(cls, v: str) -> str:
        if not re.fullmatch(r"sha256:[0-9a-f]{64}", v):
            # the value is never echoed: it may be a token pasted by mistake
            raise ValueError("not a token hash: store sha256:<64 lowercase hex digits> as "
                             "`kafka-audit token hash` prints it, never the token itself")
        return v


def bracketed(host: str) -> str:
    """An IPv6 address as a Host header carries it: in brackets."""
    import ipaddress

    try:
        return f"[{host}]" if ipaddress.ip_address(host).version == 6 else host
    except ValueError:
        return host


class ApiSettings(_Section):
    """The REST API (`kafka-audit serve`, and the API process of `kafka-audit run`)."""

    host: str = Field("127.0.0.1", description="the address the API binds to (serve --host); "
                      "beyond loopback it needs api.tokens or api.allow_open")
    port: int = Field(8088, description="the API's port (serve --port)")
    root_path: str = Field("", pattern=r"^(/[^/?#\s]+)*$", description="the path prefix a "
                           "reverse proxy serves the API under (/audit), stripped by the "
                           "proxy before it forwards: the links of /docs and /redoc carry "
                           "it (the dashboard's paths are relative and need none)")
    page_size_max: int = Field(1000, gt=0, description="the largest page_size of "
                               "/v1/findings")
    tokens: list[ApiToken] = Field(
        default_factory=list, description="bearer tokens, hashed; when any is set every "
        "endpoint but /healthz, /readyz and the dashboard's static page needs one (401 "
        "without, 403 with a wrong one). Empty: the API is open (the local demo), and says so "
        "when it starts")
    timeline_points_max: int = Field(
        2000, gt=0, le=100_000, description="a partition timeline holds at most this many "
        "points per series; longer ranges are downsampled into time buckets")
    response_cache: bool = Field(
        True, description="keep each /v1 answer with the table versions it was computed "
        "from; the same request is answered from memory while none changed")
    version_check_seconds: float | None = Field(
        None, ge=0, description="how long a table's newest version, once asked of the "
        "warehouse, answers the requests after it (each request asks for the versions of "
        "the tables it reads); none: 0 on local disk (a check is two stat calls), 1 on an "
        "object store (a check is a request to the store, and 50 clients asking one each "
        "made every answer wait on the store)")
    response_cache_max_mb: float = Field(
        64, gt=0, description="the response cache holds answers of at most this many MB in "
        "all (the least recently used go first); an answer larger than a quarter of it is "
        "sent, not kept")
    max_concurrent_requests: int = Field(
        64, ge=1, description="requests served at once (health's excepted); one more is "
        "answered 503 with Retry-After at once rather than queued behind them (the load "
        "benchmark's 50 clients stay below it)")
    allow_open: bool = Field(
        False, description="serve without api.tokens on an address beyond loopback. "
        "Without it the API refuses to start there: anyone who reaches the address would "
        "read the audit")
    allowed_hosts: list[str] | None = Field(
        None, description="Host header names the API answers to (a wrong one is a 400): a "
        "page on another site that renames itself to this address (DNS rebinding) cannot "
        "read the API. '*.example.com' matches its subdomains, '*' any name. Unset: "
        "localhost, 127.0.0.1, [::1] and the bind address (the machine's host name too "
        "when bound to every interface). /healthz and /readyz answer any name "
        "(orchestrators probe by IP)")
    tls_cert_file: Path | None = Field(
        None, description="serve HTTPS with this PEM certificate (chain), and "
        "api.tls_key_file its private key (unset: the certificate file holds the key too)")
    tls_key_file: Path | None = Field(
        None, description="the PEM private key of api.tls_cert_file")
    tls_key_password: SecretStr | None = Field(
        None, description="the password of an encrypted api.tls_key_file (e.g. from "
        "KAFKA_AUDIT_API__TLS_KEY_PASSWORD)")

    @field_validator("allowed_hosts")
    @classmethod
    def _host_patterns(cls, v: list[str] | None) -> list[str] | None:
        if v is None:
            return v
        for pattern in v:
            if not pattern or "*" in pattern[1:] or (
                    pattern.startswith("*") and pattern != "*" and not pattern.startswith("*.")):
                raise ValueError(f"{pattern!r} is not a host name pattern: a name, an "
                                 f"address ([::1] for IPv6), '*.example.com' or '*'")
        return [bracketed(p.lower()) for p in v]

    @field_validator("tls_key_file")
    @classmethod
    def _key_of_a_cert(cls, v: Path | None, info) -> Path | None:
        if v is not None and info.data.get("tls_cert_file") is None:
            raise ValueError("a key without api.tls_cert_file: set the certificate too")
        return v

    @field_validator("tokens")
    @classmethod
    def _distinct(cls, v: list[ApiToken]) -> list[ApiToken]:
        names = [t.name for t in v]
        if len(set(names)) != len(names):
            raise ValueError("two tokens share a name")
        if len({t.hash for t in v}) != len(v):
            raise ValueError("two tokens share a hash (the same token twice)")
        return v


#: the least ``steady.tombstone_retention_hours`` (5 minutes): below an hour both vacuums
#: keep a removed or unnamed file this long, longer than any pass reads it or any writer
#: holds it uncommitted (a catch-up's pass: under a minute, bench/catchup.py)
MIN_TOMBSTONE_HOURS = 5 / 60


class SteadySettings(_Section):
    """Steady state: how soon a loss is answered, and the upkeep that keeps a long run's
    cost flat (compaction, vacuum, checkpoints; ``jobs/upkeep/maintenance.py``)."""

    wake_on_commit: bool = Field(True, description="in `kafka-audit run`, a consume "
                                 "micro-batch committed starts the next audit pass at once "
                                 "(else after audit.interval_seconds)")
    min_pass_gap_seconds: float = Field(0.5, ge=0, description="a pass woken by a commit "
                                        "starts at least this long after the previous one")
    backlog_pass_seconds: float = Field(
        60, ge=0, description="in `kafka-audit run`, while the consume job reads a backlog "
        "(its last micro-batch left records it knew of: spark.max_offsets_per_trigger "
        "reached) passes wait: the reading comes first (what the topics' retention deletes "
        "before it is read can only be judged unreadable) and has the machine. While each "
        "micro-batch leaves fewer records (a catch-up after an outage) they wait until it "
        "is read, however long; a backlog growing or not shrinking gets a pass at most this "
        "long after the previous one. A consume query that starts (with the service, after "
        "an error, on new topics) does not know what it has to read until its first "
        "micro-batch ends: passes wait for that batch while the query runs it, however "
        "long (a 30-minute outage's first batch ran 2 minutes), and at most this long "
        "otherwise. Writes that look lost are still judged when they settle. 0: passes "
        "never wait for the reading")
    rejudge_timeout_seconds: float = Field(
        10, gt=0, description="a pass re-reads the ranges it suspects and judges them in the "
        "same pass, spending at most this long on the re-reads; ranges not answered by then "
        "are asked again by the next pass")
    quality_every_seconds: float = Field(
        30, ge=0, description="in the audit loop, great-expectations checks the new acks at "
        "most this often, beside the passes rather than inside them")
    windows_every_seconds: float = Field(
        10, ge=0, description="in the audit loop, the windows table (when writes were at "
        "risk) is recomputed at most this often, when its sources changed")
    compact_every_seconds: float = Field(600, gt=0, description="how often the tables are "
                                         "compacted (OPTIMIZE), checkpointed and vacuumed")
    ledger_compact_every_seconds: float = Field(
        60, gt=0, description="the ack ledger (`acks`) is compacted this often too, between "
        "those rounds: a producer committing its own reports (producer.ledger_commits: "
        "direct) pays at each commit about 0.3 ms of CPU per live file of the table "
        "(delta-rs takes up its whole file list anew: bench/commit_cost.py), and each such "
        "producer adds a file a second: 600 files and 199 ms a commit by the end of a "
        "10-minute round (`bench/commit_cost.py --commits 600`), 20-30 ms at this default")
    compact_min_files: int = Field(10, ge=2, description="a table is compacted once it "
                                   "holds at least this many live files")
    compact_target_mb: float = Field(
        16, gt=0, description="a compaction writes files of about this size and leaves "
        "files this large alone, so each round rewrites what was appended since the last "
        "one (Delta's default, 100 MB, had every round rewrite the whole of a table "
        "smaller than that: the ledger, a few MB an hour, all of it every 10 minutes)")
    vacuum_retention_hours: int = Field(
        1, ge=1, description="files a compaction replaced are deleted this long after: "
        "longer than any reader holds an older version (an audit pass: seconds)")
    tombstone_retention_hours: float = Field(
        2, gt=0, description="each table names the files a compaction or a drop removed "
        "in its checkpoints this long (delta.deletedFileRetentionDuration, set on every "
        "table by the upkeep; Delta's default, a week, made every load of a table "
        "appended every second read half a million names): at least vacuum_retention_hours "
        "plus a compaction round, or the vacuum misses files (left to the unnamed one). "
        "Below an hour (soaks, tests, small disks; at least 5 minutes) both vacuums keep "
        "files this long instead of vacuum_retention_hours and unnamed_retention_hours, "
        "which delta-rs takes in whole hours: no pass may then read a replaced file, nor "
        "a writer hold one uncommitted, for longer")
    unnamed_retention_hours: int = Field(
        24, ge=1, description="a table's files that no live commit names (a writer's that "
        "failed between writing a file and committing it; a replaced file whose name left "
        "the checkpoints, tombstone_retention_hours, before its vacuum: a service "
        "stopped that long) are deleted this long after they were written: longer than "
        "any writer takes from writing a file to committing it")
    log_retention_hours: float = Field(
        24, gt=0, description="each table's Delta log (its commit history) is kept this long "
        "past its last checkpoint, then deleted at the next compaction round: time travel and "
        "a stopped audit's catch-up reach back this far (a table committing every second "
        "otherwise gains ~25 MB of log an hour for Delta's default 30 days)")
    hot_log_retention_hours: float = Field(
        1, gt=0, description="audit_hot's Delta log is kept this long (its readers load the "
        "latest generation only)")
    hot_keep_versions: int = Field(5, ge=1, description="audit_hot's vacuum (half-way between "
                                   "two rewrites) keeps the files of this many latest versions")
    trim_every_seconds: float = Field(
        60, ge=0, description="in `kafka-audit run` (its service and API processes), the C "
        "heap's free memory is given back to the system this often (glibc's malloc_trim: "
        "freed memory otherwise stays in the process's arenas); 0: never")
    malloc_arenas: int = Field(
        2, ge=0, description="in `kafka-audit run` (its service and API processes), glibc "
        "keeps at most this many malloc arenas (M_ARENA_MAX, set before any thread starts; "
        "by default up to 8 per core, and free memory held across many arenas is not given "
        "back); 0: glibc's default")
    malloc_mmap_threshold_kb: int = Field(
        256, ge=0, description="in `kafka-audit run` (its service and API processes), glibc "
        "gives blocks of at least this many KB a mapping of their own, unmapped when freed "
        "(M_MMAP_THRESHOLD; glibc's own threshold climbs to 32 MB as mapped blocks are "
        "freed, and a pass's Arrow buffers then stay resident until the next trim); 0: "
        "glibc's default")
    deltalake_malloc_conf: str = Field(
        "narenas:2,dirty_decay_ms:1000,muzzy_decay_ms:0,background_thread:true",
        description="in `kafka-audit run` (its service and API processes), the options of the "
        "jemalloc that deltalake's extension carries (its _RJEM_MALLOC_CONF; one already in "
        "the environment wins): fewer arenas, and freed pages given back within a second by "
        "a thread of its own (bench/delta_memory.py); empty: jemalloc's defaults")
    arrow_memory_pool: typing.Literal["", "system", "jemalloc", "mimalloc"] = Field(
        "system", description="in `kafka-audit run` (its service and API processes), the pool "
        "pyarrow allocates from (its ARROW_DEFAULT_MEMORY_POOL; one already in the environment "
        "wins): system is glibc's malloc, capped by malloc_arenas and trimmed every "
        "trim_every_seconds; pyarrow's default, mimalloc, kept 96-158 MB resident for 2-52 MB "
        "allocated in an hour soak (bench/HISTORY.md); empty: pyarrow's default")
    python_allocator: typing.Literal["", "malloc", "pymalloc"] = Field(
        "malloc", description="in `kafka-audit run` (its service and API processes), the "
        "allocator of Python's objects (PYTHONMALLOC; one already in the environment wins; "
        "the service starts itself again in the same process to apply it): malloc is "
        "glibc's, capped by malloc_arenas and trimmed every trim_every_seconds; pymalloc, "
        "Python's default, keeps each 1 MB arena while one object in it lives (bench/HISTORY.md); "
        "empty: Python's default")

    @model_validator(mode="after")
    def _tombstones_outlive_the_vacuum(self) -> SteadySettings:
        if self.tombstone_retention_hours < MIN_TOMBSTONE_HOURS:
            raise ValueError(
                f"tombstone_retention_hours ({self.tombstone_retention_hours:g}) must be at "
                f"least {MIN_TOMBSTONE_HOURS:g} (5 minutes): below an hour the vacuums keep "
                f"files this long, and a file must outlive any audit pass reading it and any "
                f"writer between writing it and committing it")
        least = self.vacuum_retention_hours + self.compact_every_seconds / 3600
        if 1 <= self.tombstone_retention_hours < least:
            raise ValueError(
                f"tombstone_retention_hours ({self.tombstone_retention_hours:g}) must be at "
                f"least vacuum_retention_hours plus a compaction round ({least:g}), or below "
                f"1 (then both vacuums follow it): a removed file whose name leaves the "
                f"checkpoints before its vacuum stays on disk for unnamed_retention_hours")
        return self


class RetentionSettings(_Section):
    """How long the tables keep their rows; what is dropped is summed into ``rollups`` first,
    so every total stays exact (``jobs/upkeep/retention.py``)."""

    enabled: bool = Field(True, description="drop rows older than the retention; false: "
                          "every table keeps everything")
    days: float = Field(
        30, gt=0, description="acks, consumed, partition_state, cluster_events, windows, "
        "dq_results, fault_events and confirmed findings older than this are dropped (a "
        "fraction is a part of a day: 0.01 is 14.4 minutes)")
    findings_days: float = Field(
        365, gt=0, description="findings other than confirmed (losses, duplicates, every "
        "other anomaly) are kept this long")
    every_seconds: float = Field(3600, gt=0, description="how often the upkeep drops what "
                                 "has aged out (beside the passes, never inside one)")

    @model_validator(mode="after")
    def _anomalies_kept_longer(self) -> RetentionSettings:
        if self.findings_days < self.days:
            raise ValueError(f"findings_days ({self.findings_days}) must be at least days "
                             f"({self.days}): a loss is kept at least as long as a "
                             f"confirmation")
        return self

def _section_model(annotation: Any) -> type[BaseModel] | None:
    """The model of a field that is a section of settings (an optional one too, such as
    ``profile.sasl``); None for values and free dicts."""
    if isinstance(annotation, type) and issubclass(annotation, BaseModel):
        return annotation
    members = [a for a in typing.get_args(annotation) if a is not type(None)]
    if len(members) == 1 and typing.get_origin(annotation) in (typing.Union, types.UnionType):
        return _section_model(members[0])
    return None


def _model_at(path: tuple[str, ...]) -> type[BaseModel] | None:
    """The section model at ``path`` (``()`` is :class:`Settings`), or None if there is none."""
    model: type[BaseModel] | None = Settings
    for part in path:
        field = model.model_fields.get(part) if model is not None else None
        model = _section_model(field.annotation) if field is not None else None
    return model


def _setting_paths(model: type[BaseModel], prefix: tuple[str, ...] = ()) -> list[tuple[str, ...]]:
    """Every section and key of ``model`` as a path, each section before its keys."""
    paths = []
    for name, field in model.model_fields.items():
        paths.append(prefix + (name,))
        sub = _section_model(field.annotation)
        if sub is not None:
            paths.extend(_setting_paths(sub, prefix + (name,)))
    return paths


def _env_name(path: tuple[str, ...]) -> str:
    return ENV_PREFIX + ENV_DELIMITER.join(path).upper()


def _dotted(path: tuple[str, ...]) -> str:
    return ".".join(path)


def _nearest_key(path: tuple[str, ...]) -> str | None:
    """The valid dotted key nearest to an unknown one: a sibling first, then any key."""
    parent = _model_at(path[:-1])
    if parent is not None:
        match = difflib.get_close_matches(path[-1], list(parent.model_fields), n=1)
        if match:
            return _dotted(path[:-1] + (match[0],))
    every = [_dotted(p) for p in _setting_paths(Settings)]
    match = difflib.get_close_matches(_dotted(path), every, n=1)
    if match:
        return match[0]
    # the right key in the wrong section
    same = [p for p in every if p.rsplit(".", 1)[-1] == path[-1]]
    return same[0] if len(same) == 1 else None


def _unknown_key(path: tuple[str, ...], where: str = "") -> str:
    nearest = _nearest_key(path)
    hint = f" (did you mean {nearest}?)" if nearest else ""
    return f"{_dotted(path)}{where}: unknown setting{hint}"


def _without_empty_sections(data: dict[str, Any], model: type[BaseModel]) -> dict[str, Any]:
    """Drop sections left empty (``audit:`` with every key commented out): they change nothing."""
    out = {}
    for key, value in data.items():
        field = model.model_fields.get(key)
        sub = _section_model(field.annotation) if field is not None else None
        if sub is not None and value is None:
            continue
        out[key] = _without_empty_sections(value, sub) if sub and isinstance(value, dict) else value
    return out


def deep_merge(base: dict[str, Any], over: dict[str, Any]) -> dict[str, Any]:
    """``base`` overlaid by ``over`` key by key at every depth (neither is modified)."""
    out = dict(base)
    for key, value in over.items():
        if isinstance(value, dict) and isinstance(out.get(key), dict):
            out[key] = deep_merge(out[key], value)
        else:
            out[key] = value
    return out


def _one_line(text: str) -> str:
    return " ".join(text.split())


def _parse_yaml(text: str, where: str) -> dict[str, Any]:
    try:
        data = yaml.safe_load(text)
    except yaml.MarkedYAMLError as exc:
        mark = exc.problem_mark
        at = f" line {mark.line + 1} column {mark.column + 1}" if mark else ""
        raise ConfigError(_one_line(f"{where}{at}: invalid YAML, {exc.problem or exc}")) from exc
    except yaml.YAMLError as exc:
        raise ConfigError(_one_line(f"{where}: invalid YAML, {exc}")) from exc
    if data is None:
        return {}
    if not isinstance(data, dict):
        raise ConfigError(f"{where}: expected a mapping of sections (cluster:, audit:, ...), "
                          f"got a {type(data).__name__}")
    return _without_empty_sections(data, Settings)  # unknown keys: extra="forbid"


def _overlay() -> tuple[str, dict[str, Any]] | None:
    """The file named by KAFKA_AUDIT_CONFIG and what it holds, or None if it is not set."""
    name = os.environ.get("KAFKA_AUDIT_CONFIG")
    if not name:
        return None
    where = f"KAFKA_AUDIT_CONFIG={name}"
    try:
        text = Path(name).read_text(encoding="utf-8")
    except FileNotFoundError as exc:
        raise ConfigError(f"{where}: no such file") from exc
    except UnicodeDecodeError as exc:
        raise ConfigError(f"{where}: not UTF-8 text") from exc
    except OSError as exc:
        raise ConfigError(f"{where}: cannot read it ({exc.strerror or exc})") from exc
    return name, _parse_yaml(text, name)


class _YamlSource(PydanticBaseSettingsSource):
    """Lowest-priority source: conf/defaults.yaml, overlaid by the file in KAFKA_AUDIT_CONFIG."""

    def get_field_value(self, field: Any, field_name: str) -> tuple[Any, str, bool]:
        return None, field_name, False

    def __call__(self) -> dict[str, Any]:
        data = _parse_yaml(resources.files("kafka_audit.conf").joinpath("defaults.yaml")
                           .read_text(encoding="utf-8"), "conf/defaults.yaml")
        overlay = _overlay()
        return deep_merge(data, overlay[1]) if overlay else data


def _unknown_environment(environ: typing.Mapping[str, str]) -> list[str]:
    """A problem for each KAFKA_AUDIT_* variable that names no setting."""
    known = [_env_name(p) for p in _setting_paths(Settings)] + list(NON_SETTINGS_ENV)
    problems = []
    for name in sorted(environ):
        upper = name.upper()
        if not upper.startswith(ENV_PREFIX) or upper in NON_SETTINGS_ENV:
            continue
        path = tuple(upper[len(ENV_PREFIX):].lower().split(ENV_DELIMITER))
        model: type[BaseModel] | None = Settings
        for i, part in enumerate(path):
            field = model.model_fields.get(part) if model is not None else None
            if field is None:
                break
            model = _section_model(field.annotation)
            if model is None:
                # a value: the name must end here, unless it is a free dict (broker_overrides)
                free = typing.get_origin(field.annotation) is dict
                if free or i == len(path) - 1:
                    path = ()
                break
        else:
            path = ()  # a whole section, given as JSON
        if not path:
            continue
        nearest = difflib.get_close_matches(upper, known, n=1)
        hint = f" (did you mean {nearest[0]}?)" if nearest else ""
        problems.append(f"{name}: unknown setting {_dotted(path)}{hint}")
    return problems


class _EnvironmentCheck(PydanticBaseSettingsSource):
    """Contributes nothing: refuses KAFKA_AUDIT_* variables that name no setting.

    pydantic-settings ignores them silently, so a typo would leave a default in force.
    """

    def get_field_value(self, field: Any, field_name: str) -> tuple[Any, str, bool]:
        return None, field_name, False

    def __call__(self) -> dict[str, Any]:
        problems = _unknown_environment(os.environ)
        if problems:
            raise ConfigError("; ".join(problems))
        return {}


class Settings(BaseSettings):
    model_config = SettingsConfigDict(env_prefix=ENV_PREFIX, env_nested_delimiter=ENV_DELIMITER,
                                      extra="forbid")

    home: Path = Field(default_factory=lambda: default_home(), description=(
        "working data: the warehouse, checkpoints, spools, status files, the local cluster; "
        "$XDG_DATA_HOME/kafka-audit (~/.local/share/kafka-audit) unless set (the checkout's "
        "dev.sh sets var/)"))
    warehouse: str | None = Field(None, description=(
        "where the tables live: a folder, or an object store's URI (s3://bucket/prefix, with "
        "the storage section); none: <home>/warehouse. Spools and status files stay under "
        "home; Spark's checkpoints too, unless the warehouse is an object store (then they "
        "are under <warehouse>/_checkpoints)"))
    storage: StorageSettings = StorageSettings()
    cluster: ClusterSettings = ClusterSettings()
    rabbit: RabbitSettings = RabbitSettings()
    rabbitmq: RabbitmqSettings = RabbitmqSettings()
    producer: ProducerSettings = ProducerSettings()
    stamp: StampSettings = StampSettings()
    spark: SparkSettings = SparkSettings()
    audit: AuditSettings = AuditSettings()
    profile: ProfileSettings = ProfileSettings()
    watch: WatchSettings = WatchSettings()
    outage: OutageSettings = OutageSettings()
    health: HealthSettings = HealthSettings()
    service: ServiceSettings = ServiceSettings()
    api: ApiSettings = ApiSettings()
    steady: SteadySettings = SteadySettings()
    retention: RetentionSettings = RetentionSettings()

    @classmethod
    def settings_customise_sources(cls, settings_cls, init_settings, env_settings,
                                   dotenv_settings, file_secret_settings):
        return (init_settings, _EnvironmentCheck(settings_cls), env_settings,
                _YamlSource(settings_cls))

    @field_validator("warehouse")
    @classmethod
    def _a_folder_or_a_bucket(cls, v: str | None) -> str | None:
        if v is None or not (is_remote(v) or "://" in v):
            return v
        if not v.startswith("s3://") or len(v.rstrip("/")) <= len("s3://"):
            raise ValueError(f"{v!r}: an object store's warehouse is s3://bucket or "
                             f"s3://bucket/prefix (no other object store yet)")
        return v.rstrip("/")

    @model_validator(mode="after")
    def _register_the_object_store(self) -> Settings:
        """A remote warehouse's storage, registered for the table layer (``storage.py``:
        one object store per process)."""
        if self.remote_warehouse:
            register(self.storage)
        return self

    def __setstate__(self, state: dict) -> None:
        """An unpickled copy (the service hands its API process its settings so) registers
        its object store as a validated one does: unpickling runs no validator."""
        super().__setstate__(state)
        if self.remote_warehouse:
            register(self.storage)

    @property
    def home_dir(self) -> Path:
        return self.home.resolve()

    @property
    def warehouse_uri(self) -> str:
        """Where the tables live: the folder made absolute (``<home>/warehouse`` by default,
        derived at each use, so a copy of these settings with another home moves it) or
        the object store's ``s3://`` URI."""
        if self.warehouse is None:
            return str(self.home_dir / "warehouse")
        if is_remote(self.warehouse):
            return self.warehouse
        return str(Path(self.warehouse).expanduser().resolve())

    @property
    def remote_warehouse(self) -> bool:
        return self.warehouse is not None and is_remote(self.warehouse)

    def table_path(self, name: str) -> str:
        return f"{self.warehouse_uri}/{name}"

    @property
    def checkpoints(self) -> Path:
        """The local folder of Spark's checkpoints (with a local warehouse)."""
        return self.home_dir / "checkpoints"

    def checkpoint_uri(self, query: str) -> str:
        """Where the streaming query ``query`` keeps its checkpoint, in Spark's words:
        ``<home>/checkpoints/<query>`` beside a local warehouse; in an object-store one,
        ``<warehouse>/_checkpoints/<query>`` (``s3a://``), so the query resumes on any host
        of a Spark cluster without a shared disk."""
        if self.remote_warehouse:
            return spark_uri(f"{self.warehouse_uri}/_checkpoints/{query}")
        return str(self.checkpoints / query)


def _is_secret(path: tuple[str, ...]) -> bool:
    """Whether the setting at ``path`` must never be printed: by its name (it, or a section
    or dict key above it: kafka_audit/redact.py's rule) or by its type."""
    if any(is_secret_name(part) for part in path) or is_secret_name(_dotted(path)):
        return True
    parent = _model_at(path[:-1])
    field = parent.model_fields.get(path[-1]) if parent is not None and path else None
    return field is not None and _secret_type(field.annotation)


def _secret_type(annotation: Any) -> bool:
    if annotation in (SecretStr, SecretBytes):
        return True
    return any(_secret_type(a) for a in typing.get_args(annotation))


def _origin(path: tuple[str, ...]) -> str:
    """Where a setting's value came from, if that was the environment or the overlay file."""
    for i in range(len(path), 0, -1):
        env = _env_name(path[:i])
        if any(name.upper() == env for name in os.environ):
            return f" from {env}"
    try:
        overlay = _overlay()
    except ConfigError:
        return ""
    if overlay is not None:
        node: Any = overlay[1]
        for part in path:
            if not isinstance(node, dict) or part not in node:
                return ""
            node = node[part]
        return f" in {overlay[0]}"
    return ""


def _without_userinfo(value):
    """A URL as an error may show it: a password in it (``http://user:pw@host``) hidden."""
    if isinstance(value, str) and "://" in value and "@" in value:
        return re.sub(r"(://[^/@\s:]*):[^/@\s]*@", r"\1:" + REDACTED + "@", value)
    return value


def describe_validation_error(exc: ValidationError) -> str:
    """One line: each problem as ``dotted.path: what is wrong (got value)``, joined by "; "."""
    problems = []
    for err in exc.errors(include_url=False):
        path = tuple(str(part) for part in err["loc"])
        if err["type"] == "extra_forbidden":
            problems.append(_unknown_key(path, _origin(path)))
            continue
        message = err["msg"].removeprefix("Value error, ")
        value = err.get("input")
        if not isinstance(value, dict | list) and not _is_secret(path):
            shown = repr(_without_userinfo(value))
            message += f" (got {shown if len(shown) <= 60 else shown[:57] + '...'})"
        problems.append(f"{_dotted(path) or 'settings'}{_origin(path)}: {message}")
    return _one_line("; ".join(problems))


@functools.cache
def get_settings() -> Settings:
    """The effective settings; a :class:`ConfigError` with a one-line message if they are wrong."""
    try:
        return Settings()
    except ValidationError as exc:
        raise ConfigError(describe_validation_error(exc)) from exc
    except SettingsError as exc:  # a KAFKA_AUDIT_* variable for a mapping that is not JSON
        raise ConfigError("; ".join(_bad_json_environment()) or _one_line(str(exc))) from exc


def _bad_json_environment() -> list[str]:
    """A problem for each KAFKA_AUDIT_* variable that sets a mapping to something not JSON."""
    problems = []
    for name, value in sorted(os.environ.items()):
        upper = name.upper()
        if not upper.startswith(ENV_PREFIX) or upper in NON_SETTINGS_ENV:
            continue
        path = tuple(upper[len(ENV_PREFIX):].lower().split(ENV_DELIMITER))
        parent = _model_at(path[:-1])
        field = parent.model_fields.get(path[-1]) if parent is not None else None
        if field is None or not (_section_model(field.annotation)
                                 or typing.get_origin(field.annotation) is dict):
            continue
        try:
            json.loads(value)
        except ValueError:
            problems.append(f"{_dotted(path)} from {name}: not valid JSON (a mapping is expected)")
    return problems
