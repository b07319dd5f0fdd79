"""``kafka-audit check``: can the auditor audit this cluster, and what does it risk?

Against the profile (``kafka_audit/profile.py``), in this order, each failure
saying what to change:

1. the profile resolves: TLS files readable, secrets present;
2. the cluster answers and accepts the credentials, through librdkafka (the
   watcher, the re-reads, the producers) and through the Java client (what the
   Spark Kafka source uses: the same profile mapped to Java properties); the
   Kafka version (the finalized ``metadata.version``) comes from there, and the
   election rules (KIP-966's eligible leader replicas on, off, or not supported: off is
   a risk, with the command that turns them on); a ZooKeeper-era cluster (no
   metadata.version, its brokers name a ``zookeeper.connect``) is said so, with its
   ``inter.broker.protocol.version``, the risks of its classic rules and the setting
   that gives the watcher its exact timeline (:func:`zookeeper_advice`);
3. the permissions the auditor needs: describe the cluster; describe, describe
   the configs of and read every audited topic;
4. per audited topic, its durability and the risk it carries: replication factor
   below 3, ``min.insync.replicas`` below 2 or equal to the replication factor,
   ``unclean.leader.election.enable=true``, producers seen in the ack ledger with
   ``acks=0``/``1`` or without idempotence;
5. how the clients connect, as each is configured (:func:`transport_risks`): SASL PLAIN
   over a plaintext listener (the password in clear on the network), TLS without hostname
   verification or without certificate verification (anyone in the path can pose as a
   broker and take the password).

A *blocker* stops the auditor from auditing (exit 3); a *risk* is reported and
does not. Secrets never appear in the output.
"""

from __future__ import annotations

import json
import re
import subprocess
import time
from dataclasses import asdict, dataclass, field

from kafka_audit.clients import admin_client, cluster_config
from kafka_audit.errors import AuditorError
from kafka_audit.profile import audited, spark_kafka_options
from kafka_audit.schemas.policy import Durability, allowed_because
from kafka_audit.schemas.systems import KAFKA, system_of
from kafka_audit.schemas.verdicts import Kind
from kafka_audit.settings import Settings

__all__ = ["Finding", "Report", "run_check", "CheckFailed", "transport_risks",
           "election_rules"]

#: the permissions the auditor needs, and what each is for
NEEDED_ON_TOPICS = {"READ": "the consume job and the re-reads read every record",
                    "DESCRIBE": "the watcher follows leaders and ISRs",
                    "DESCRIBE_CONFIGS": "the audit reads cleanup.policy; check reads "
                                        "min.insync.replicas"}


class CheckFailed(AuditorError):
    """Raised when the cluster cannot be reached or refuses the profile's credentials."""

    code = "check"


@dataclass
class Finding:
    severity: str  # blocker | risk
    subject: str  # cluster | topic name
    problem: str
    fix: str


@dataclass
class Report:
    profile: str
    bootstrap: str
    security_protocol: str
    cluster_id: str | None = None
    brokers: int | None = None
    kafka_metadata_version: str | None = None
    #: KIP-966's eligible leader replicas: on | off | not supported (:func:`election_rules`)
    eligible_leader_replicas: str | None = None
    #: kraft, zookeeper (a ZooKeeper-era cluster: its brokers name a zookeeper.connect), or
    #: unknown (no metadata.version, and no broker's configs could be described)
    mode: str | None = None
    #: a ZooKeeper-mode broker's inter.broker.protocol.version (its release level)
    inter_broker_protocol: str | None = None
    topics: dict[str, dict] = field(default_factory=dict)
    findings: list[Finding] = field(default_factory=list)
    #: what the check proved, one line each: which client connected how, which
    #: permissions were found granted (a person wants to know what "ok" covers)
    verified: list[str] = field(default_factory=list)

    @property
    def blocked(self) -> bool:
        return any(f.severity == "blocker" for f in self.findings)

    def to_json(self) -> str:
        return json.dumps(asdict(self), indent=2, default=str)

    def text(self) -> str:
        level = f"ZooKeeper mode, inter.broker.protocol.version {self.inter_broker_protocol}" \
            if self.mode == "zookeeper" else f"metadata.version {self.kafka_metadata_version}"
        lines = [f"profile {self.profile!r}: {self.security_protocol} to {self.bootstrap}",
                 f"cluster {self.cluster_id}, {self.brokers} brokers, {level}, eligible "
                 f"leader replicas {self.eligible_leader_replicas}", ""]
        if self.topics:
            lines.append(f"{'topic':<32} {'RF':>3} {'min.isr':>7} {'unclean':>8}  producers")
            for name, t in sorted(self.topics.items()):
                lines.append(f"{name:<32} {t['replication_factor']:>3} {str(t['min_isr']):>7} "
                             f"{str(t['unclean']):>8}  {', '.join(t['producers']) or '-'}")
            lines.append("")
        else:
            lines += ["no audited topics yet (none in the ack ledger, none included)", ""]
        for f in self.findings:
            lines.append(f"{f.severity.upper():<8} {f.subject}: {f.problem}")
            lines.append(f"{'':<8} fix: {f.fix}")
        if self.verified:
            lines += ["verified:"] + [f"  - {v}" for v in self.verified] + [""]
        lines.append("check: " + ("BLOCKED: the auditor cannot audit this cluster as configured"
                                  if self.blocked else "ok" if not self.findings
                                  else "ok, with the risks above"))
        return "\n".join(lines)


def _describe_cluster(settings: Settings, timeout: float):
    """librdkafka's view: the cluster's id, nodes and our authorized operations; an
    authentication error fails at once (the error callback), not at the timeout."""
    from confluent_kafka import KafkaError, KafkaException

    refused: list[str] = []
    tls_failed: list[str] = []

    def on_error(err: KafkaError) -> None:
        if err.code() == KafkaError._SSL or "SSL handshake failed" in err.str():
            tls_failed.append(err.str())  # before any password was sent
        elif err.code() in (KafkaError._AUTHENTICATION, KafkaError.SASL_AUTHENTICATION_FAILED):
            refused.append(err.str())

    conf = cluster_config(settings)
    admin = admin_client(conf, error_cb=on_error)
    fut = admin.describe_cluster(include_authorized_operations=True,
                                 request_timeout=timeout)
    deadline = time.monotonic() + timeout + 5
    while not fut.done() and not refused and not tls_failed and time.monotonic() < deadline:
        admin.poll(0.2)
    who = f"user {settings.profile.sasl.username!r} " if settings.profile.sasl else ""
    if tls_failed:
        tls = settings.profile.tls
        ca = f"profile.tls.ca_file ({tls.ca_file})" if tls.ca_file else \
            "profile.tls.ca_file (unset: the system's CAs)"
        raise CheckFailed(f"the TLS handshake with the cluster failed (profile "
                          f"{settings.profile.name!r}): {_tls_reason(tls_failed[0])}; check "
                          f"{ca}: the CA that signed the brokers' certificates, the host name "
                          f"the brokers' certificates name, and, for mutual TLS, "
                          f"profile.tls.cert_file and key_file")
    if refused:
        raise CheckFailed(f"the cluster refused {who}(profile {settings.profile.name!r}): "
                          f"{refused[0].splitlines()[0]}; check the password, the SASL "
                          f"mechanism and the TLS files")
    try:
        return admin, fut.result(timeout=1)
    except (KafkaException, TimeoutError, Exception) as exc:  # noqa: BLE001 - one line
        msg = str(exc).splitlines()[0] if str(exc) else type(exc).__name__
        raise CheckFailed(f"cannot reach the cluster at {conf['bootstrap.servers']} (profile "
                          f"{settings.profile.name!r}) within {timeout:.0f}s: {msg}") from None


def _tls_reason(text: str) -> str:
    """The part of librdkafka's TLS error that says why (``certificate verify failed``,
    ...), without the broker list before it."""
    line = text.splitlines()[0]
    why = re.search(r"SSL handshake failed: (.*)", line)
    return (why.group(1) if why else line)[:300]


def _java_probe(settings: Settings, timeout: float) -> dict:
    """The Java client's view (the Spark Kafka source's client), properties on stdin."""
    from kafka_audit.jars import client_tools_jar, tools_classpath

    props = {k.removeprefix("kafka."): v for k, v in
             spark_kafka_options(settings.profile, settings.cluster.bootstrap).items()}
    text = "".join(f"{k}={_escape(v)}\n" for k, v in props.items())
    cp = f"{tools_classpath(quiet=True)}:{client_tools_jar(quiet=True)}"
    try:
        done = subprocess.run(["java", "-cp", cp, "kafka_audit.app.preflight.Preflight",
                               str(int(timeout))], input=text, capture_output=True, text=True,
                              timeout=timeout + 20)
    except subprocess.TimeoutExpired:
        raise CheckFailed("the Java client (Spark's) got no answer from the cluster within "
                          f"{timeout:.0f}s") from None
    last = (done.stdout.strip().splitlines() or ["{}"])[-1]
    try:
        out = json.loads(last)
    except ValueError:
        out = {"error": (done.stderr.strip().splitlines() or ["no output"])[-1]}
    if "error" in out:
        raise CheckFailed(f"through the Java client (the one Spark uses), the cluster "
                          f"refused or did not answer: {out['error'][:300]}")
    return out


def _escape(value: str) -> str:
    """A value for a Java .properties file (backslashes and line ends escaped)."""
    return value.replace("\\", "\\\\").replace("\n", "\\n").replace("\r", "\\r")


def _ledger_producers(settings: Settings) -> dict[str, set[tuple]]:
    """Per topic, each producer with the durability settings it wrote with: (producer id,
    acks, idempotence, retries, max in flight)."""
    from kafka_audit.store import read_table

    cols = ["topic", "producer_id", "acks", "idempotence", "retries", "max_in_flight"]
    t = read_table(settings.table_path("acks"), "acks", columns=cols)
    out: dict[str, set[tuple]] = {}
    for r in t.group_by(cols).aggregate([]).to_pylist():
        if system_of(r["topic"]) == KAFKA:  # a RabbitMQ queue is no topic of the cluster
            out.setdefault(r["topic"], set()).add(tuple(r[c] for c in cols[1:]))
    return out


def _check_warehouse(settings: Settings, timeout: float) -> str | None:
    """The remote warehouse takes writes (its bucket, its key) and keeps concurrent writers
    correct (:func:`~kafka_audit.storage.probe`); :class:`CheckFailed` if it refuses or does
    not answer, in one line that names the store, never its secret."""
    from kafka_audit.storage import probe

    try:
        return probe(settings.warehouse_uri, timeout=2 * timeout)
    except Exception as exc:  # noqa: BLE001 - the store's own words, on one line
        text = str(exc)
        code = re.search(r"<Code>(\w+)</Code>", text)
        status = re.search(r"status code: (\d{3}[^:<]*)", text)
        said = (f"{status.group(1).strip()} {code.group(1)}" if status and code
                else next((line.strip() for line in text.splitlines() if line.strip()),
                          type(exc).__name__)[:300])
        fix = _STORE_FIXES.get(code.group(1) if code else "", "")
        where = settings.storage.endpoint_url or f"AWS S3 ({settings.storage.region})"
        raise CheckFailed(f"the warehouse {settings.warehouse_uri} at {where} refused a write "
                          f"({said}){': ' + fix if fix else ''}") from None


#: what to do about an object store's refusal, by its error code
_STORE_FIXES = {
    "SignatureDoesNotMatch": "the secret access key is wrong (storage.secret_access_key*)",
    "InvalidAccessKeyId": "no such access key (storage.access_key_id)",
    "NoSuchBucket": "the bucket does not exist: create it (the auditor does not)",
    "AccessDenied": "the key may not write there: grant s3:PutObject, s3:GetObject, "
                    "s3:DeleteObject and s3:ListBucket on the warehouse's prefix",
}


def run_check(settings: Settings, timeout: float = 10) -> Report:
    """The preflight; raises :class:`CheckFailed` (or ``ConfigError``) when the cluster
    cannot be reached or refuses the credentials, else returns the report."""
    from confluent_kafka import TopicCollection
    from confluent_kafka.admin import ConfigResource

    conf = cluster_config(settings)  # a missing file or secret: ConfigError, at once
    unsound = _check_warehouse(settings, timeout) if settings.remote_warehouse else None
    report = Report(settings.profile.name, conf["bootstrap.servers"],
                    settings.profile.security_protocol)
    java = {k.removeprefix("kafka."): v for k, v in
            spark_kafka_options(settings.profile, settings.cluster.bootstrap).items()}
    report.findings += transport_risks(conf, java)
    if unsound:
        report.findings.append(Finding(
            "blocker", "warehouse", unsound, "use a store that refuses a PUT with "
            "If-None-Match: * of an existing object (AWS S3 does): see docs/operate/storage.md"))
    if unsound is None and settings.remote_warehouse:
        report.verified.append(f"warehouse {settings.warehouse_uri}: writable, and refuses a "
                               f"second create of one object (concurrent commits are safe)")
    admin, cluster = _describe_cluster(settings, timeout)
    report.cluster_id, report.brokers = cluster.cluster_id, len(cluster.nodes)
    sasl = settings.profile.sasl
    as_whom = f", authenticated as {sasl.username!r} ({sasl.mechanism})" if sasl else ""
    report.verified.append(f"librdkafka (the producers', the watcher's and the re-reads' "
                           f"client): connected over {settings.profile.security_protocol}"
                           f"{as_whom}, described the cluster")
    probe = _java_probe(settings, 3 * timeout)
    report.kafka_metadata_version = probe["metadata_version"]
    report.verified.append(f"the Java client (the one Spark's consume job uses): connected "
                           f"with the same profile, read metadata.version "
                           f"{report.kafka_metadata_version}")
    # the probe says "unknown" where no metadata.version is finalized: a ZooKeeper-era one?
    zookeeper = _zookeeper_mode(admin, cluster, timeout) \
        if report.kafka_metadata_version in (None, "unknown") else None
    if zookeeper is not None:
        report.mode, report.inter_broker_protocol = "zookeeper", zookeeper[1]
        report.kafka_metadata_version = None
        report.eligible_leader_replicas = "not supported"
        from kafka_audit.jobs.watcher.zookeeper import zookeeper_connect

        report.findings += zookeeper_advice(zookeeper[0], zookeeper[1],
                                            zookeeper_connect(settings))
    else:  # no metadata.version and no broker said ZooKeeper: not known which
        report.mode = "kraft" if report.kafka_metadata_version not in (None, "unknown") \
            else "unknown"
        said, finding = election_rules(probe.get("elr_level", 0),
                                       probe.get("elr_supported", 0),
                                       report.kafka_metadata_version)
        report.eligible_leader_replicas = said
        report.findings += [finding] if finding else []
    ops = {op.name for op in cluster.authorized_operations or []}
    if "DESCRIBE" in ops:
        report.verified.append("permission DESCRIBE on the cluster")
    if "DESCRIBE" not in ops:
        report.findings.append(Finding(
            "blocker", "cluster", "may not DESCRIBE the cluster",
            "grant DESCRIBE on the cluster resource to the auditor's principal"))
    names = sorted(admin.list_topics(timeout=timeout).topics)
    ledger = _ledger_producers(settings)
    topics = audited(settings.profile.topics,
                     [t for t in names if t in ledger or settings.profile.topics.include])
    for t in sorted(set(ledger) - set(names)):
        if audited(settings.profile.topics, [t]):
            report.findings.append(Finding(
                "risk", t, "in the ack ledger but not visible in the cluster (deleted, or "
                "no DESCRIBE)", "grant DESCRIBE on the topic, or stop auditing it (exclude)"))
    if not topics:
        return report
    described = admin.describe_topics(TopicCollection(topics),
                                      include_authorized_operations=True)
    configs = admin.describe_configs([ConfigResource("topic", t) for t in topics])
    config_of = {res.name: fut for res, fut in configs.items()}
    for t in topics:
        try:
            d = described[t].result(timeout)
        except Exception as exc:  # noqa: BLE001 - one line per topic
            report.findings.append(Finding("blocker", t, f"cannot describe it: "
                                           f"{str(exc).splitlines()[0]}",
                                           "grant DESCRIBE on the topic"))
            continue
        if d.authorized_operations is not None:  # None: the broker did not say
            allowed = {op.name for op in d.authorized_operations}
            for op, why in NEEDED_ON_TOPICS.items():
                if op not in allowed:
                    report.findings.append(Finding(
                        "blocker", t, f"may not {op} it ({why})",
                        f"grant {op} on topic {t} (or on a prefix of it) to the auditor"))
            granted = [op for op in NEEDED_ON_TOPICS if op in allowed]
            if granted:
                report.verified.append(f"permissions {', '.join(granted)} on topic {t}")
        rf = min(len(p.replicas) for p in d.partitions) if d.partitions else 0
        try:
            cfg = config_of[t].result(timeout)
            min_isr = int(cfg["min.insync.replicas"].value)
            unclean = cfg["unclean.leader.election.enable"].value == "true"
        except Exception:  # noqa: BLE001 - no DESCRIBE_CONFIGS: reported above
            min_isr, unclean = None, None
        producers = ledger.get(t, set())
        report.topics[t] = {"replication_factor": rf, "min_isr": min_isr, "unclean": unclean,
                            "producers": sorted({f"{p} (acks={a}{', idempotent' if i else ''})"
                                                 for p, a, i, *_ in producers})}
        _risks(report, t, rf, min_isr, unclean, producers)
    return report


def _zookeeper_mode(admin, cluster, timeout: float) -> tuple[str, str | None] | None:
    """(zookeeper.connect, inter.broker.protocol.version) if the cluster's brokers run in
    ZooKeeper mode (a KRaft cluster finalizes a metadata.version; a ZooKeeper-era one
    finalizes no feature and names its ZooKeeper), else None. Asked of one broker's
    configs; None too where the auditor may not describe them."""
    from confluent_kafka.admin import ConfigResource

    for node in cluster.nodes:  # the first that answers (one may be down)
        broker = ConfigResource("broker", str(node.id))
        try:
            cfg = admin.describe_configs([broker])[broker].result(timeout)
        except Exception:  # noqa: BLE001 - no DESCRIBE_CONFIGS, or this one is down
            continue
        connect = cfg.get("zookeeper.connect")
        if connect is None or not connect.value:
            return None
        ibp = cfg.get("inter.broker.protocol.version")
        return connect.value, ibp.value if ibp is not None else None
    return None


def zookeeper_advice(connect: str, ibp: str | None, watched: str | None) -> list[Finding]:
    """What a ZooKeeper-era cluster risks, and how the auditor follows it: the classic
    election rules alone (no eligible leader replicas), ZooKeeper's end (Kafka 4.0 removed
    it: 3.9 is the last line), and the watcher's exact timeline, read from ZooKeeper when
    ``watch.zookeeper_connect`` names it (else from polls)."""
    out = [Finding(
        "risk", "cluster", f"a ZooKeeper-mode cluster (inter.broker.protocol.version {ibp}): "
        "the classic election rules alone: a partition whose ISR shrank to one broker and "
        "then lost it stays offline until that broker is back, or, with unclean election "
        "on, elects an out-of-sync replica and loses acknowledged writes; ZooKeeper mode "
        "ends with Kafka 3.9 (4.0 removed it)",
        "until the move: min.insync.replicas=2 with replication factor 3 and unclean "
        "election off on every topic; then migrate to KRaft (Kafka 3.9's ZooKeeper-to-KRaft "
        "migration) and Kafka 4.1 or later, whose eligible leader replicas elect a clean "
        "leader there")]
    if not watched:
        out.append(Finding(
            "risk", "watcher", "the watcher reads this cluster's elections from polls alone "
            "(a change shorter than a poll is missed, its time a poll's)",
            f"set watch.zookeeper_connect to the brokers' zookeeper.connect ({connect}): "
            "the watcher then reads leaders, epochs and ISRs from ZooKeeper's own state, "
            "read-only, at the controller's time"))
    return out


#: the metadata.version eligible leader replicas need (Kafka's ELRV_1 depends on it)
ELR_METADATA_VERSION = (4, 0, 1)


def election_rules(level: int, supported: int, metadata_version: str | None = None
                   ) -> tuple[str, Finding | None]:
    """The election rules a cluster follows, from its eligible leader replicas feature
    (KIP-966: the finalized level, the highest its brokers support), and the advice that
    fits them: "on"; "off" (a risk: the brokers support them, a command turns them on,
    after one that raises ``metadata.version`` where it is below 4.0-IV1, which Kafka
    would refuse first); "not supported" (a Kafka before 4.0, the classic rules)."""
    if level >= 1:
        return "on", None
    if supported < 1:
        return "not supported", None
    m = re.fullmatch(r"(\d+)\.(\d+)-IV(\d+)", metadata_version or "")
    first = ("first raise metadata.version: kafka-features.sh --bootstrap-server ... upgrade "
             "--metadata 4.0-IV1, then " if m and tuple(map(int, m.groups()))
             < ELR_METADATA_VERSION else "")
    return "off", Finding(
        "risk", "cluster", "eligible leader replicas (KIP-966) are off: a partition whose ISR "
        "fell below min.insync.replicas and then lost its last member has no clean leader: it "
        "stays offline until that broker is back, or, with unclean election on, elects an "
        "out-of-sync replica and loses acknowledged writes",
        f"{first}kafka-features.sh --bootstrap-server ... upgrade --feature "
        "eligible.leader.replicas.version=1 (clusters formatted at Kafka 4.1 or later have "
        "them on); the auditor names elections from them elr_election")


def transport_risks(librdkafka: dict[str, str], java: dict[str, str]) -> list[Finding]:
    """How each client connects, as configured (librdkafka's properties; the Java client's,
    the Spark Kafka source's, without the ``kafka.`` prefix): the risks to the credentials.

    * SASL PLAIN over a plaintext listener sends the password in clear on every connection;
    * TLS with hostname verification off (librdkafka ``ssl.endpoint.identification.algorithm``
      ``none``, Java's empty) accepts any certificate the CA signed, for any host: anyone in
      the path who holds one poses as the broker and receives the password (and the
      records); with certificate verification off (librdkafka
      ``enable.ssl.certificate.verification=false``) any certificate at all.
    """
    clients = {"librdkafka": librdkafka, "Java client": java}

    def value(conf: dict[str, str], *names: str) -> str | None:
        """The value in force: of aliases (sasl.mechanism, sasl.mechanisms) the one set
        last, as the client applies them in order."""
        found = [str(v).strip() for k, v in conf.items() if k in names]
        return found[-1] if found else None

    plain, no_hostname, no_certificate = [], [], []
    for client, conf in clients.items():
        protocol = (value(conf, "security.protocol") or "PLAINTEXT").upper()
        mechanism = (value(conf, "sasl.mechanism", "sasl.mechanisms") or "").upper()
        if protocol == "SASL_PLAINTEXT" and mechanism == "PLAIN":
            plain.append(client)
        if protocol in ("SSL", "SASL_SSL"):
            algorithm = value(conf, "ssl.endpoint.identification.algorithm")
            if algorithm is not None and algorithm.lower() in ("", "none"):
                no_hostname.append(f"{client} ssl.endpoint.identification.algorithm="
                                   f"{algorithm or '(empty)'}")
            if (value(conf, "enable.ssl.certificate.verification") or "true").lower() \
                    == "false":
                no_certificate.append(client)
    out = []
    if plain:
        out.append(Finding(
            "risk", "profile", f"SASL PLAIN over a plaintext listener (security.protocol "
            f"SASL_PLAINTEXT; {', '.join(plain)}): the password crosses the network in clear "
            f"on every connection", "use SASL_SSL (TLS), or at least a SCRAM mechanism, "
            "which never sends the password"))
    if no_hostname:
        out.append(Finding(
            "risk", "profile", f"TLS hostname verification is off ({'; '.join(no_hostname)}): "
            f"any certificate the CA signed, for any host, is taken for the broker's, and "
            f"whoever holds one can receive the credentials", "set profile.tls.verify_hostname: "
            "true and drop the override from profile.librdkafka / profile.java"))
    if no_certificate:
        out.append(Finding(
            "risk", "profile", f"TLS certificate verification is off "
            f"(enable.ssl.certificate.verification=false; {', '.join(no_certificate)}): any "
            f"certificate at all is taken for the broker's", "remove "
            "enable.ssl.certificate.verification from profile.librdkafka"))
    return out


def _risks(report: Report, t: str, rf: int, min_isr: int | None, unclean: bool | None,
           producers: set[tuple]) -> None:
    def risk(problem: str, fix: str) -> None:
        report.findings.append(Finding("risk", t, problem, fix))

    if rf < 3:
        risk(f"replication factor {rf}: one broker lost can lose acknowledged writes",
             "use a replication factor of 3 or more (kafka-reassign-partitions)")
    if min_isr is not None and min_isr < 2:
        risk(f"min.insync.replicas={min_isr}: acks=all is acknowledged by the leader alone "
             f"when the ISR shrinks", "set min.insync.replicas=2 (with RF 3)")
    if min_isr is not None and min_isr >= rf > 1:
        risk(f"min.insync.replicas={min_isr} equals the replication factor: one broker down "
             f"refuses every acks=all write", "set min.insync.replicas below the RF (2 of 3)")
    if unclean:
        risk("unclean.leader.election.enable=true: an out-of-sync replica may become leader "
             "and destroy committed writes", "set unclean.leader.election.enable=false")
    for p, acks, idem, retries, in_flight in sorted(producers):
        # the policy table says what each producer's own settings allow
        settings = Durability(acks, idem, retries, in_flight)
        if allowed_because(Kind.lost, settings):
            risk(f"producer {p} writes with acks={acks}: a fail-over can lose its acknowledged "
                 f"writes", f"set acks=all for {p}")
        if allowed_because(Kind.duplicate, settings):
            risk(f"producer {p} writes without idempotence: retries can duplicate and reorder",
                 f"set enable.idempotence=true for {p}")
