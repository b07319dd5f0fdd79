"""The local cluster's secured listener (SASL_SSL, SCRAM-SHA-512, ACLs), through librdkafka
clients configured by a connection profile: ``auditor`` produces, reads and describes;
``noread`` sees the topics but reads none; a wrong password is refused at once; the
client certificate made for mutual TLS verifies against the CA.

No password is printed: assertion messages carry error codes and broker messages only.
"""

import secrets
import stat
import subprocess
import time
import uuid

import pytest
from confluent_kafka import Consumer, KafkaError, KafkaException, Producer, TopicPartition
from confluent_kafka.admin import ConfigResource, ResourceType
from pydantic import SecretStr

from kafka_audit.clients import admin_client, consumer_config, producer_config
from kafka_audit.profile import SaslSettings, librdkafka_config


def secure_config(cluster, role: str) -> dict:
    return librdkafka_config(cluster.secure_profile(role), cluster.bootstrap)


def new_topic(cluster) -> str:
    name = f"sec-{uuid.uuid4().hex[:8]}"
    cluster.create_topic(name, partitions=2, replication=3)  # over PLAINTEXT: a super user
    return name


def produce(conf: dict, topic: str, values: list[bytes], **overrides) -> list:
    """Every value written with acks=all; the delivery errors (None for a success)."""
    reports: list = []
    p = Producer(producer_config(conf, acks="all", **{"message.timeout.ms": 30000},
                                 **overrides))
    for v in values:
        p.produce(topic, v, on_delivery=lambda err, _m: reports.append(err))
    assert p.flush(60) == 0, "records still queued after 60 s"
    return reports


def test_secured_listener_is_sasl_ssl_on_its_own_ports(cluster):
    conf = secure_config(cluster, "auditor")
    assert conf["security.protocol"] == "sasl_ssl" and conf["sasl.mechanism"] == "SCRAM-SHA-512"
    assert conf["ssl.endpoint.identification.algorithm"] == "https"  # the SAN is checked
    secure_ports = {int(a.rsplit(":", 1)[1]) for a in conf["bootstrap.servers"].split(",")}
    assert secure_ports == {cluster.cfg.secure_port(n) for n in cluster.nodes}
    assert not secure_ports & {cluster.cfg.broker_port(n) for n in cluster.nodes}


def test_auditor_produces_reads_and_describes_a_topic(cluster):
    topic = new_topic(cluster)
    conf = secure_config(cluster, "auditor")
    values = [f"v{i}".encode() for i in range(50)]
    # idempotence needs IDEMPOTENT_WRITE on the cluster, the writes WRITE on the topic
    reports = produce(conf, topic, values, **{"enable.idempotence": True})
    assert len(reports) == len(values) and all(e is None for e in reports), \
        [e.name() for e in reports if e is not None][:3]

    # read in a consumer group: READ on the topic and on the group
    consumer = Consumer(consumer_config(conf, "sec-test", **{"auto.offset.reset": "earliest"}))
    consumer.subscribe([topic])
    seen: list[bytes] = []
    errors: list[str] = []
    deadline = time.monotonic() + 90
    try:
        while len(seen) < len(values) and time.monotonic() < deadline:
            m = consumer.poll(1)
            if m is None:
                continue
            if m.error():
                errors.append(m.error().name())
                continue
            seen.append(m.value())
    finally:
        consumer.close()
    assert sorted(seen) == sorted(values), (len(seen), errors[:5])

    admin = admin_client(conf)
    resource = ConfigResource(ResourceType.TOPIC, topic)
    configs = admin.describe_configs([resource])[resource].result(30)
    assert configs["cleanup.policy"].value == "delete"
    assert "min.insync.replicas" in configs


def test_noread_lists_topics_but_cannot_read_them(cluster):
    topic = new_topic(cluster)
    assert produce({"bootstrap.servers": cluster.bootstrap}, topic, [b"secret"]) == [None]
    conf = secure_config(cluster, "noread")

    admin = admin_client(conf)
    md = admin.list_topics(timeout=30)
    assert topic in md.topics and md.topics[topic].error is None
    assert len(md.topics[topic].partitions) == 2
    # DESCRIBE only: its configs are refused too
    resource = ConfigResource(ResourceType.TOPIC, topic)
    try:
        admin.describe_configs([resource])[resource].result(30)
        refused = None
    except KafkaException as exc:
        refused = exc.args[0].code()
    assert refused == KafkaError.TOPIC_AUTHORIZATION_FAILED, refused

    # partitions assigned by hand: the fetch itself is refused (the consumer also reports
    # GROUP_AUTHORIZATION_FAILED for its group, which it is not allowed to use either)
    consumer = Consumer(consumer_config(conf, "sec-noread"))
    consumer.assign([TopicPartition(topic, p, -2) for p in range(2)])  # -2: the beginning
    codes: list[int] = []
    values: list[bytes] = []
    deadline = time.monotonic() + 60
    try:
        while KafkaError.TOPIC_AUTHORIZATION_FAILED not in codes \
                and time.monotonic() < deadline:
            m = consumer.poll(1)
            if m is None:
                continue
            if m.error():
                codes.append(m.error().code())
            else:
                values.append(m.value())
    finally:
        consumer.close()
    assert KafkaError.TOPIC_AUTHORIZATION_FAILED in codes, codes
    assert values == []


def test_a_wrong_password_is_refused_quickly(cluster):
    profile = cluster.secure_profile("auditor")
    wrong = profile.model_copy(update={"sasl": SaslSettings(
        mechanism=profile.sasl.mechanism, username=profile.sasl.username,
        password=SecretStr(secrets.token_urlsafe(24)))})
    reported: list[KafkaError] = []
    admin = admin_client(librdkafka_config(wrong, cluster.bootstrap),
                         error_cb=reported.append)
    t0 = time.monotonic()
    deadline = t0 + 30
    while not any(e.code() == KafkaError._AUTHENTICATION for e in reported) \
            and time.monotonic() < deadline:
        admin.poll(0.2)
    elapsed = time.monotonic() - t0
    auth = [e for e in reported if e.code() == KafkaError._AUTHENTICATION]
    assert auth, [e.name() for e in reported]
    assert elapsed < 30
    assert "SASL authentication error" in auth[0].str(), auth[0].name()
    # and it gets nothing: metadata never arrives
    try:
        admin.list_topics(timeout=3)
        listed = True
    except KafkaException:
        listed = False
    assert not listed


def test_certificates_verify_against_the_ca_and_stay_private(cluster, tmp_path):
    sec = cluster.security
    ok = subprocess.run(["openssl", "verify", "-CAfile", str(sec.ca_file),
                         str(sec.client_cert_file)], capture_output=True, text=True)
    assert ok.returncode == 0 and ok.stdout.strip().endswith(": OK"), ok.stdout + ok.stderr
    # the client key is the certificate's: same public key
    pub = [subprocess.run(cmd, capture_output=True, text=True, check=True).stdout
           for cmd in (["openssl", "x509", "-in", str(sec.client_cert_file), "-noout",
                        "-pubkey"],
                       ["openssl", "pkey", "-in", str(sec.client_key_file), "-pubout"])]
    assert pub[0] == pub[1] and "PUBLIC KEY" in pub[0]
    # the brokers' certificate (the key store's first) names the address clients connect to
    broker = subprocess.run(["openssl", "verify", "-CAfile", str(sec.ca_file),
                             "-verify_ip", "127.0.0.1", str(sec.broker_keystore_file)],
                            capture_output=True, text=True)
    assert broker.returncode == 0, broker.stdout + broker.stderr
    # a CA of its own does not vouch for the client certificate: verify really checks
    other_key, other_ca = tmp_path / "other.key", tmp_path / "other.pem"
    subprocess.run(["openssl", "req", "-x509", "-newkey", "ec", "-pkeyopt",
                    "ec_paramgen_curve:P-256", "-nodes", "-keyout", str(other_key), "-out",
                    str(other_ca), "-subj", "/CN=another CA", "-days", "1"],
                   capture_output=True, check=True)
    foreign = subprocess.run(["openssl", "verify", "-CAfile", str(other_ca),
                              str(sec.client_cert_file)], capture_output=True, text=True)
    assert foreign.returncode != 0

    assert stat.S_IMODE(sec.directory.stat().st_mode) == 0o700
    files = sorted(p for p in sec.directory.iterdir())
    assert {sec.password_file(u) for u in sec.users.values()} <= set(files)
    modes = {p.name: oct(stat.S_IMODE(p.stat().st_mode)) for p in files}
    assert set(modes.values()) == {"0o600"}, modes


def test_each_broker_answers_its_own_view_over_sasl_ssl_as_over_plaintext(cluster):
    """The watcher's per-broker views through the secured listener (TLS with the CA and
    the host-name check, SCRAM-SHA-512): each broker's answer equals its PLAINTEXT one."""
    from kafka_audit.jobs.watcher.broker_views import ask, security_for

    topic = new_topic(cluster)
    profile = cluster.secure_profile("auditor")
    security = security_for(profile)
    assert security.tls is not None and security.tls.check_hostname
    assert profile.sasl.secret() not in repr(security)
    host = cluster.cfg.host
    for n in cluster.nodes:
        brokers, secured = ask(host, cluster.cfg.secure_port(n), [topic], 10,
                               security=security)
        _plain_brokers, plain = ask(host, cluster.cfg.broker_port(n), [topic], 10)
        assert secured == plain and len(secured) == 2, (n, secured, plain)
        # it names each broker at its secured listener: the next poll asks there
        assert {port for _h, port in brokers.values()} == {
            cluster.cfg.secure_port(m) for m in cluster.nodes}
    wrong = profile.model_copy(update={"sasl": SaslSettings(
        mechanism=profile.sasl.mechanism, username=profile.sasl.username,
        password=SecretStr(secrets.token_urlsafe(24)))})
    with pytest.raises(PermissionError, match="SCRAM-SHA-512 refused"):
        ask(host, cluster.cfg.secure_port(1), [topic], 10, security=security_for(wrong))
    with pytest.raises((OSError, ValueError)):  # TLS to a PLAINTEXT listener: never a view
        ask(host, cluster.cfg.broker_port(1), [topic], 5, security=security)
