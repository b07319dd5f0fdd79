"""`kafka-audit check`'s warnings about how the clients connect (kafka_audit/app/preflight.py's
pure part): SASL PLAIN in clear, TLS without hostname or certificate verification. Each
case maps a real profile to both clients' configurations, as the check does."""

import pytest

from kafka_audit.app.preflight import transport_risks
from kafka_audit.profile import ProfileSettings, librdkafka_config, spark_kafka_options


def risks(tmp_path, **profile) -> list[str]:
    ca = tmp_path / "ca.pem"
    ca.write_text("-----BEGIN CERTIFICATE-----\nMIIB\n-----END CERTIFICATE-----\n")
    if "tls" in profile:
        profile["tls"] = {"ca_file": str(ca), **profile["tls"]}
    p = ProfileSettings(bootstrap="kafka-1:9092", **profile)
    java = {k.removeprefix("kafka."): v
            for k, v in spark_kafka_options(p, "unused:1").items()}
    found = transport_risks(librdkafka_config(p, "unused:1"), java)
    assert all(f.severity == "risk" and f.subject == "profile" for f in found)
    return [f.problem for f in found]


SASL = {"username": "auditor", "password": "pw"}


@pytest.mark.parametrize("profile", [
    {},
    {"security_protocol": "SASL_SSL", "sasl": {**SASL, "mechanism": "PLAIN"}, "tls": {}},
    {"security_protocol": "SASL_PLAINTEXT", "sasl": {**SASL, "mechanism": "SCRAM-SHA-512"}},
    {"security_protocol": "SSL", "tls": {"verify_hostname": True}},
])
def test_a_safe_transport_warns_of_nothing(tmp_path, profile):
    assert risks(tmp_path, **profile) == []


def test_sasl_plain_over_a_plaintext_listener(tmp_path):
    (problem,) = risks(tmp_path, security_protocol="SASL_PLAINTEXT",
                       sasl={**SASL, "mechanism": "PLAIN"})
    assert problem.startswith("SASL PLAIN over a plaintext listener")
    assert "librdkafka, Java client" in problem and "in clear" in problem


def test_sasl_plain_set_through_a_client_property(tmp_path):
    (problem,) = risks(tmp_path, security_protocol="SASL_PLAINTEXT",
                       sasl={**SASL, "mechanism": "SCRAM-SHA-512"},
                       librdkafka={"sasl.mechanisms": "PLAIN"})
    assert "SASL PLAIN" in problem and "(security.protocol SASL_PLAINTEXT; librdkafka)" in problem


def test_hostname_verification_off_in_the_profile(tmp_path):
    (problem,) = risks(tmp_path, security_protocol="SSL", tls={"verify_hostname": False})
    assert problem.startswith("TLS hostname verification is off")
    assert "librdkafka ssl.endpoint.identification.algorithm=none" in problem
    assert "Java client ssl.endpoint.identification.algorithm=(empty)" in problem


@pytest.mark.parametrize("client, override, says", [
    ("librdkafka", "none", "librdkafka ssl.endpoint.identification.algorithm=none"),
    ("java", "", "Java client ssl.endpoint.identification.algorithm=(empty)"),
])
def test_hostname_verification_off_through_a_client_property(tmp_path, client, override, says):
    (problem,) = risks(tmp_path, security_protocol="SASL_SSL",
                       sasl={**SASL, "mechanism": "SCRAM-SHA-512"}, tls={},
                       **{client: {"ssl.endpoint.identification.algorithm": override}})
    assert says in problem and problem.count("ssl.endpoint") == 1


def test_certificate_verification_off(tmp_path):
    problems = risks(tmp_path, security_protocol="SSL", tls={},
                     librdkafka={"enable.ssl.certificate.verification": "false"})
    assert problems == [problems[0]] and "certificate verification is off" in problems[0]


def test_hostname_verification_does_not_matter_without_tls(tmp_path):
    assert risks(tmp_path, librdkafka={"ssl.endpoint.identification.algorithm": "none"}) == []


def test_the_election_rules_and_their_advice():
    from kafka_audit.app.preflight import election_rules

    assert election_rules(1, 1) == ("on", None)
    assert election_rules(0, 0) == ("not supported", None)  # a Kafka before 4.0
    said, finding = election_rules(0, 1)
    assert said == "off" and finding.severity == "risk" and finding.subject == "cluster"
    assert "eligible.leader.replicas.version=1" in finding.fix
    assert election_rules(0, 1, "4.1-IV1")[1].fix.startswith("kafka-features.sh")
    # brokers of 4.x at a metadata.version Kafka's ELR feature cannot stand on yet
    for older in ("4.0-IV0", "3.9-IV0"):
        assert election_rules(0, 1, older)[1].fix.startswith(
            "first raise metadata.version: kafka-features.sh --bootstrap-server ... upgrade "
            "--metadata 4.0-IV1, then kafka-features.sh")
