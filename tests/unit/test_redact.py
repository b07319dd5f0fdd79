"""The one secret rule (kafka_audit/redact.py) over every property the clients know.

librdkafka's list comes from the library itself at test time (``rd_kafka_conf_properties_show``
through ctypes, into a temporary FILE*): the confluent-kafka wheel's bundled librdkafka and,
when installed, Debian's. The Java client's SSL and SASL properties, with the types its own
``ConfigDef`` gives them, are a checked-in list (tests/support/java_security_properties.py
regenerates it; tests/spark/test_java_security_properties.py checks it is current).
"""

from __future__ import annotations

import ctypes
import glob
import os
import re
import tempfile
from pathlib import Path

import pytest

from kafka_audit.redact import (
    REDACTED,
    SECRET_NAME_PATTERN,
    SPARK_REDACTION_REGEX,
    is_secret_name,
    redact_config,
    redacted,
    remember_secret,
    scrub,
)
from tests.support.java_security_properties import read_checked_in

#: librdkafka's properties that hold a secret: the ones rdkafka_conf.c flags _RK_SENSITIVE
#: (2.16) but ssl.key.location and sasl.oauthbearer.assertion.private.key.file (paths),
#: sasl.username and ssl.ca.pem (a public CA), which an operator needs to see
LIBRDKAFKA_SECRETS = {
    "sasl.password", "ssl.key.password", "ssl.key.pem", "ssl_key", "ssl.keystore.password",
    "sasl.oauthbearer.config", "sasl.oauthbearer.client.secret",
    "sasl.oauthbearer.client.credentials.client.secret",  # an alias of the one above
    "sasl.oauthbearer.assertion.private.key.passphrase",
    "sasl.oauthbearer.assertion.private.key.pem",
}
#: named and shown: where the secrets are, who, how
LIBRDKAFKA_SHOWN = {
    "sasl.username", "sasl.mechanism", "sasl.mechanisms", "security.protocol",
    "ssl.key.location", "ssl.keystore.location", "ssl.certificate.location",
    "ssl.ca.location", "ssl.certificate.pem", "ssl.ca.pem", "sasl.kerberos.keytab",
    "sasl.kerberos.principal", "sasl.oauthbearer.assertion.private.key.file",
    "sasl.oauthbearer.assertion.file", "sasl.oauthbearer.client.id",
    "sasl.oauthbearer.token.endpoint.url", "ssl.endpoint.identification.algorithm",
    "enable.ssl.certificate.verification", "enable.sasl.oauthbearer.unsecure.jwt",
    "oauthbearer_token_refresh_cb",
}
#: properties whose description speaks of a password, key, token or secret and that hold
#: none (reviewed): a new one in a later librdkafka fails the test until it is classified
LIBRDKAFKA_REVIEWED = {
    "enable.sasl.oauthbearer.unsecure.jwt": "a switch",
    "https.ca.location": "a path",
    "oauthbearer_token_refresh_cb": "a callback",
    "sasl.oauthbearer.assertion.private.key.file": "a path",
    "sasl.oauthbearer.metadata.authentication.type": "a mode",
    "sasl.oauthbearer.method": "a mode",
    "sasl.oauthbearer.sub.claim.name": "a claim's name",
    "sasl.oauthbearer.token.endpoint.url": "an endpoint",
    "ssl.key.location": "a path",
}
#: Java's PASSWORD-typed properties that hold public certificates: shown (a private key
#: pasted there is still hidden, by its PEM block)
JAVA_PUBLIC = {"ssl.keystore.certificate.chain", "ssl.truststore.certificates"}
JAVA_SHOWN = {"sasl.mechanism", "ssl.keystore.location", "ssl.truststore.location",
              "ssl.keystore.type", "ssl.truststore.type", "ssl.endpoint.identification.algorithm",
              "sasl.oauthbearer.client.credentials.client.id",
              "sasl.oauthbearer.assertion.private.key.file", "sasl.oauthbearer.token.endpoint.url",
              "sasl.kerberos.service.name", "sasl.login.callback.handler.class", *JAVA_PUBLIC}


def _libraries() -> list[tuple[str, str]]:
    import confluent_kafka

    wheel = Path(confluent_kafka.__file__).parent.parent / "confluent_kafka.libs"
    found = [("wheel", p) for p in sorted(glob.glob(str(wheel / "librdkafka-*.so*")))]
    debian = "/usr/lib/x86_64-linux-gnu/librdkafka.so.1"
    if os.path.exists(debian):
        found.append(("debian", debian))
    return found


def librdkafka_properties(path: str) -> dict[str, str]:
    """Every configuration property the library at ``path`` lists, with its description."""
    lib = ctypes.CDLL(path)
    libc = ctypes.CDLL(None)
    libc.fdopen.restype = ctypes.c_void_p
    libc.fdopen.argtypes = [ctypes.c_int, ctypes.c_char_p]
    libc.fclose.argtypes = [ctypes.c_void_p]
    lib.rd_kafka_conf_properties_show.argtypes = [ctypes.c_void_p]
    with tempfile.TemporaryFile() as f:
        fp = libc.fdopen(os.dup(f.fileno()), b"w")
        lib.rd_kafka_conf_properties_show(fp)
        libc.fclose(fp)
        f.seek(0)
        text = f.read().decode()
    out = {}
    for line in text.splitlines():
        cells = [c.strip() for c in line.split("|")]
        if len(cells) >= 6 and re.fullmatch(r"[a-z][\w.]*", cells[0]):
            out[cells[0]] = cells[-1]
    return out


@pytest.mark.parametrize("which, path", _libraries(), ids=[w for w, _ in _libraries()])
def test_every_librdkafka_property_is_hidden_exactly_when_it_holds_a_secret(which, path):
    props = librdkafka_properties(path)
    assert len(props) > 150 and "bootstrap.servers" in props
    if which == "wheel":  # the library the project runs (2.16): every named one exists
        assert LIBRDKAFKA_SECRETS | LIBRDKAFKA_SHOWN | set(LIBRDKAFKA_REVIEWED) <= set(props)
    hidden = {name for name in props if is_secret_name(name)}
    assert hidden == LIBRDKAFKA_SECRETS & set(props)
    shown = redact_config({name: "value" for name in props})
    assert {n for n, v in shown.items() if v == REDACTED} == hidden
    assert all(shown[n] == "value" for n in LIBRDKAFKA_SHOWN & set(props))
    speaks = re.compile(r"password|passphrase|secret|private key|token|credential|jaas", re.I)
    unreviewed = {n for n, d in props.items()
                  if speaks.search(d) and n not in hidden and n not in LIBRDKAFKA_REVIEWED}
    assert unreviewed == set(), "classify these: secret (the rule) or reviewed (here)"


def test_every_java_security_property_is_hidden_exactly_when_it_holds_a_secret():
    props = read_checked_in()
    assert {"sasl.jaas.config", "ssl.keystore.key", "security.protocol"} - set(props) == \
        {"security.protocol"}  # (CommonClientConfigs', not SSL's or SASL's)
    password_typed = {n for n, kind in props.items() if kind == "PASSWORD"}
    assert password_typed >= {"sasl.jaas.config", "ssl.keystore.key", "ssl.key.password",
                              "ssl.keystore.password", "ssl.truststore.password",
                              "sasl.oauthbearer.client.credentials.client.secret",
                              "sasl.oauthbearer.assertion.private.key.passphrase"}
    assert {n for n in props if is_secret_name(n)} == password_typed - JAVA_PUBLIC
    assert JAVA_SHOWN <= set(props)
    assert not any(is_secret_name(n) for n in JAVA_SHOWN)
    # the Spark Kafka source's options carry the kafka. prefix
    assert {n for n in props if is_secret_name(f"kafka.{n}")} == password_typed - JAVA_PUBLIC


@pytest.mark.parametrize("name", [
    "password", "profile.sasl.password", "key_password", "api.tokens", "secrets",
    "session_token", "secret_access_key", "spark.hadoop.fs.s3a.secret.key", "stamp.key",
    "listener.name.secure.scram-sha-512.sasl.jaas.config", "SASL_PASSWORD"])
def test_secrets_by_name(name):
    assert is_secret_name(name)


@pytest.mark.parametrize("name", [
    "password_env", "password_file", "key_password_env", "key_password_file", "key_file",
    "cert_file", "ca_file", "username", "mechanism", "security_protocol", "verify_hostname",
    "Token_URL", "monkey", "keytab", "stamp.key_file", "access_key_id", "bootstrap"])
def test_not_secrets_by_name(name):
    assert not is_secret_name(name)


def test_the_spark_pattern_is_the_rule_plus_urls():
    java_ish = re.compile(SPARK_REDACTION_REGEX)  # what Spark compiles, Python reads alike
    for name in [*read_checked_in(), *LIBRDKAFKA_SECRETS, *LIBRDKAFKA_SHOWN]:
        assert bool(java_ish.search(name)) == (is_secret_name(name) or "url" in name), name
    assert SPARK_REDACTION_REGEX.startswith(SECRET_NAME_PATTERN)


def test_values_that_are_secrets_whatever_their_name():
    key = "-----BEGIN PRIVATE KEY-----\nMIIEvQIBADANBg\n-----END PRIVATE KEY-----\n"
    conf = {"ssl.keystore.certificate.chain": key, "x.url": "https://u:pw@idp/token",
            "ssl.ca.pem": "-----BEGIN CERTIFICATE-----\nMIIB\n-----END CERTIFICATE-----"}
    shown = redact_config(conf)
    assert shown["ssl.keystore.certificate.chain"] == REDACTED
    assert shown["x.url"] == REDACTED
    assert shown["ssl.ca.pem"] == conf["ssl.ca.pem"]  # a public certificate


def test_redacted_keeps_none_and_names_of_places():
    from pydantic import BaseModel, SecretStr

    class Sasl(BaseModel):
        username: str = "auditor"
        password: SecretStr | None = None
        password_env: str | None = "KAFKA_PW"
        password_file: str | None = "/etc/kafka-audit/sasl.password"

    assert redacted(Sasl()) == {"username": "auditor", "password": None,
                                "password_env": "KAFKA_PW",
                                "password_file": "/etc/kafka-audit/sasl.password"}
    assert redacted(Sasl(password="hunter22"))["password"] == REDACTED


def test_scrub_hides_secrets_in_free_text():
    remember_secret("s3cr3t-from-a-file")
    text = ("KafkaException: failed with s3cr3t-from-a-file; "
            'sasl.jaas.config=org.apache.kafka.common.security.scram.ScramLoginModule '
            'required username="auditor" password="pw-in-jaas"; '
            "{'ssl.key.password': 'kp-1234', 'sasl.username': 'auditor'} "
            "https://user:urlpw@idp.example/token "
            "-----BEGIN ENCRYPTED PRIVATE KEY-----\nMIIFHzBJBgkqhk\n"
            "-----END ENCRYPTED PRIVATE KEY-----")
    clean = scrub(text)
    for secret in ("s3cr3t-from-a-file", "pw-in-jaas", "kp-1234", "urlpw", "MIIFHzBJBgkqhk"):
        assert secret not in clean
    assert "auditor" in clean and "idp.example" in clean and "sasl.username" in clean
    # error messages that name a secret's setting keep their text
    msg = "profile.tls.key_password: set one of the value, the _env variable or the _file"
    assert scrub(msg) == msg
