"""The audited cluster's connection profile, and the one mapping of it to every client.

A profile says how to reach the cluster under audit: bootstrap servers, the
security protocol (PLAINTEXT, SSL, SASL_PLAINTEXT, SASL_SSL), SASL (PLAIN,
SCRAM-SHA-256, SCRAM-SHA-512) with its credentials, TLS (a CA file, an optional
client certificate and key for mutual TLS, hostname verification), any further
client properties, and which topics are audited. The local test cluster is the
default profile: with no ``bootstrap`` the local cluster's is used.

:func:`librdkafka_config` maps it to librdkafka properties (the producer, the
watcher's and the audit's admin clients, the re-read consumer, the ground
truth) and :func:`spark_kafka_options` to the Spark Kafka source's options (the
Java client's ``kafka.security.protocol``, ``kafka.sasl.jaas.config``, PEM trust
and key stores). No client builds its own.

Secrets (the SASL password, the client key's password) come from the
environment or from files: ``password_env`` names a variable, ``password_file``
a file, and ``password`` can be set by ``KAFKA_AUDIT_PROFILE__SASL__PASSWORD``.
They are held as ``SecretStr`` (printed ``**********``), never written to a
table, and never shown: :func:`describe` gives a client config fit to print, by the one
secret rule (``kafka_audit/redact.py``), which also hides each resolved secret in errors
and logs. :meth:`ProfileSettings.without_secrets` is the profile for a process that never
talks to Kafka (the API's).
"""

from __future__ import annotations

import os
import re
from pathlib import Path
from typing import Literal

from pydantic import BaseModel, ConfigDict, Field, SecretStr, model_validator

from kafka_audit.errors import ConfigError
from kafka_audit.redact import (
    is_secret_name,
    redact_config,
    remember_secret,
    without_secret_names,
)

__all__ = ["ProfileSettings", "SaslSettings", "TlsSettings", "TopicSelection",
           "librdkafka_config", "spark_kafka_options", "describe", "topic_pattern",
           "audited", "secret_from"]

Protocol = Literal["PLAINTEXT", "SSL", "SASL_PLAINTEXT", "SASL_SSL"]
Mechanism = Literal["PLAIN", "SCRAM-SHA-256", "SCRAM-SHA-512"]

_LOGIN_MODULES = {
    "PLAIN": "org.apache.kafka.common.security.plain.PlainLoginModule",
    "SCRAM-SHA-256": "org.apache.kafka.common.security.scram.ScramLoginModule",
    "SCRAM-SHA-512": "org.apache.kafka.common.security.scram.ScramLoginModule",
}


class _Section(BaseModel):
    model_config = ConfigDict(extra="forbid")


def secret_from(direct: SecretStr | None, env: str | None, file: Path | None,
            what: str) -> str | None:
    """The secret from exactly one of: the setting itself, an environment variable, a file."""
    given = [x for x in (direct, env, file) if x is not None]
    if len(given) > 1:
        raise ConfigError(f"{what}: set one of the value, the _env variable or the _file")
    if direct is not None:
        return remember_secret(direct.get_secret_value())
    if env is not None:
        if env not in os.environ:
            raise ConfigError(f"{what}_env: the environment variable {env} is not set")
        return remember_secret(os.environ[env])
    if file is not None:
        try:
            return remember_secret(Path(file).read_text().strip("\n"))
        except OSError as exc:
            raise ConfigError(f"{what}_file: cannot read {file}: {exc.strerror}") from None
    return None


class SaslSettings(_Section):
    mechanism: Mechanism = Field("SCRAM-SHA-512", description="the SASL mechanism")
    username: str = Field(min_length=1, description="the auditor's principal")
    password: SecretStr | None = Field(
        None, description="the password itself (KAFKA_AUDIT_PROFILE__SASL__PASSWORD); set one "
        "of it, password_env or password_file")
    password_env: str | None = Field(None, description="the variable holding the password")
    password_file: Path | None = Field(None, description="a file holding the password")

    def secret(self) -> str:
        value = secret_from(self.password, self.password_env, self.password_file,
                        "profile.sasl.password")
        if value is None:
            raise ConfigError("profile.sasl: a password is needed (password_env, "
                              "password_file or KAFKA_AUDIT_PROFILE__SASL__PASSWORD)")
        return value


class TlsSettings(_Section):
    ca_file: Path | None = Field(None, description="PEM: the CAs that sign the brokers' "
                                 "certificates (none: the system's)")
    cert_file: Path | None = Field(None, description="PEM: the client's certificate (mTLS)")
    key_file: Path | None = Field(None, description="PEM: the client's private key (mTLS)")
    key_password: SecretStr | None = Field(
        None, description="the password of an encrypted key_file; set one of it, "
        "key_password_env or key_password_file")
    key_password_env: str | None = Field(None, description="the variable holding the key's "
                                         "password")
    key_password_file: Path | None = Field(None, description="a file holding the key's "
                                           "password")
    verify_hostname: bool = Field(True, description="the broker's certificate must name the "
                                  "host connected to")

    @model_validator(mode="after")
    def _pair(self) -> TlsSettings:
        if (self.cert_file is None) != (self.key_file is None):
            raise ValueError("cert_file and key_file go together (mutual TLS)")
        return self

    def key_secret(self) -> str | None:
        return secret_from(self.key_password, self.key_password_env, self.key_password_file,
                       "profile.tls.key_password")


class TopicSelection(_Section):
    """Which topics are audited. Patterns are regular expressions matched on the whole name.

    With no ``include``, the audited topics are those the instrumented producers have
    written to (the ack ledger's). Topics starting with ``_`` (Kafka's internal ones, the
    auditor's own) are never audited unless an ``include`` pattern names them."""

    include: list[str] = Field(default_factory=list, description="patterns of the topics "
                               "audited; empty: the topics the ack ledger names")
    exclude: list[str] = Field(default_factory=list, description="patterns of topics left "
                               "out, even if included")

    @model_validator(mode="after")
    def _compile(self) -> TopicSelection:
        for p in [*self.include, *self.exclude]:
            try:
                re.compile(p)
            except re.error as exc:
                raise ValueError(f"topic pattern {p!r}: {exc}") from None
        return self


class ProfileSettings(_Section):
    """How to reach the audited cluster (``profile`` in the settings)."""

    name: str = Field("local", description="shown in logs and `kafka-audit check`")
    bootstrap: str | None = Field(None, description="host:port,...; none: the local cluster")
    security_protocol: Protocol = Field("PLAINTEXT", description="how every client "
                                        "connects; SASL_* needs a sasl section")
    sasl: SaslSettings | None = None
    tls: TlsSettings = Field(default_factory=TlsSettings)
    librdkafka: dict[str, str] = Field(
        default_factory=dict, description="further librdkafka properties, passed through")
    java: dict[str, str] = Field(
        default_factory=dict, description="further Java client properties for the Spark Kafka "
        "source (without the kafka. prefix), passed through")
    topics: TopicSelection = Field(default_factory=TopicSelection)

    @model_validator(mode="after")
    def _consistent(self) -> ProfileSettings:
        if self.security_protocol.startswith("SASL") and self.sasl is None:
            raise ValueError(f"security_protocol {self.security_protocol} needs a sasl section")
        if not self.security_protocol.startswith("SASL") and self.sasl is not None:
            raise ValueError(f"a sasl section needs security_protocol SASL_SSL or "
                             f"SASL_PLAINTEXT, not {self.security_protocol}")
        return self

    @property
    def uses_tls(self) -> bool:
        return self.security_protocol in ("SSL", "SASL_SSL")

    def without_secrets(self) -> ProfileSettings:
        """This profile with no secret and no way to one: the SASL password and the key's
        password dropped with their ``_env`` and ``_file``, secret client properties
        removed. For a process that never talks to Kafka (the API's)."""
        gone = dict.fromkeys(("password", "password_env", "password_file"))
        sasl = self.sasl.model_copy(update=gone) if self.sasl is not None else None
        tls = self.tls.model_copy(update={f"key_{k}": None for k in gone})
        return self.model_copy(update={
            "sasl": sasl, "tls": tls,
            "librdkafka": without_secret_names(self.librdkafka),
            "java": without_secret_names(self.java)})

    def secret_environment(self) -> list[str]:
        """The environment variables that hold this profile's secrets."""
        named = [self.sasl.password_env if self.sasl else None, self.tls.key_password_env]
        return [n for n in named if n]


def _bootstrap(profile: ProfileSettings, local: str) -> str:
    return profile.bootstrap or local


def _check_files(profile: ProfileSettings) -> None:
    """A named TLS file that cannot be read is a configuration error, said at once."""
    if not profile.uses_tls:
        return
    for name in ("ca_file", "cert_file", "key_file"):
        path = getattr(profile.tls, name)
        if path is not None and not os.access(path, os.R_OK):
            raise ConfigError(f"profile.tls.{name}: cannot read {path}")


def librdkafka_config(profile: ProfileSettings, local_bootstrap: str) -> dict[str, str]:
    """The profile as librdkafka properties (security included, secrets resolved)."""
    _check_files(profile)
    conf = {"bootstrap.servers": _bootstrap(profile, local_bootstrap),
            "security.protocol": profile.security_protocol.lower()}
    if profile.sasl is not None:
        conf.update({"sasl.mechanism": profile.sasl.mechanism,
                     "sasl.username": profile.sasl.username,
                     "sasl.password": profile.sasl.secret()})
    if profile.uses_tls:
        t = profile.tls
        if t.ca_file is not None:
            conf["ssl.ca.location"] = str(t.ca_file)
        if t.cert_file is not None:
            conf["ssl.certificate.location"] = str(t.cert_file)
            conf["ssl.key.location"] = str(t.key_file)
            key_password = t.key_secret()
            if key_password is not None:
                conf["ssl.key.password"] = key_password
        conf["ssl.endpoint.identification.algorithm"] = "https" if t.verify_hostname else "none"
    conf.update(profile.librdkafka)
    _remember_inline(profile.librdkafka)
    return conf


def _jaas_quote(value: str) -> str:
    return '"' + value.replace("\\", "\\\\").replace('"', '\\"') + '"'


def spark_kafka_options(profile: ProfileSettings, local_bootstrap: str) -> dict[str, str]:
    """The profile as the Spark Kafka source's ``kafka.*`` options (the Java client)."""
    _check_files(profile)
    opts = {"kafka.bootstrap.servers": _bootstrap(profile, local_bootstrap),
            "kafka.security.protocol": profile.security_protocol}
    if profile.sasl is not None:
        s = profile.sasl
        opts["kafka.sasl.mechanism"] = s.mechanism
        opts["kafka.sasl.jaas.config"] = (
            f"{_LOGIN_MODULES[s.mechanism]} required username={_jaas_quote(s.username)} "
            f"password={_jaas_quote(s.secret())};")
    if profile.uses_tls:
        t = profile.tls
        if t.ca_file is not None:
            opts["kafka.ssl.truststore.type"] = "PEM"
            opts["kafka.ssl.truststore.location"] = str(t.ca_file)
        if t.cert_file is not None:
            # a PEM key store given inline: the Java client reads the key and the chain
            # from the options, no key store file is written anywhere
            opts["kafka.ssl.keystore.type"] = "PEM"
            opts["kafka.ssl.keystore.certificate.chain"] = Path(t.cert_file).read_text()
            opts["kafka.ssl.keystore.key"] = remember_secret(
                Path(t.key_file).read_text())  # type: ignore
            key_password = t.key_secret()
            if key_password is not None:
                opts["kafka.ssl.key.password"] = key_password
        opts["kafka.ssl.endpoint.identification.algorithm"] = \
            "https" if t.verify_hostname else ""
    opts.update({f"kafka.{k}": v for k, v in profile.java.items()})
    _remember_inline(profile.java)
    return opts


def _remember_inline(props: dict[str, str]) -> None:
    """Secrets given inline as client properties are hidden in errors and logs too."""
    for k, v in props.items():
        if is_secret_name(k):
            remember_secret(v)


def describe(conf: dict[str, str]) -> dict[str, str]:
    """A client config fit to print (a log line, an error): secret values as ``***``."""
    return redact_config(conf)


def topic_pattern(topics: list[str]) -> str:
    """A Java regex (for Spark's ``subscribePattern``) matching exactly these topics."""
    return "^(" + "|".join(re.escape(t) for t in sorted(topics)) + ")$" if topics else "^$"


def audited(selection: TopicSelection, candidates: list[str]) -> list[str]:
    """The topics of ``candidates`` (the cluster's, or the ledger's) that are audited."""
    def matches(patterns: list[str], topic: str) -> bool:
        return any(re.fullmatch(p, topic) for p in patterns)

    out = []
    for t in candidates:
        if selection.include:
            if not matches(selection.include, t):
                continue
        elif t.startswith("_"):
            continue
        if matches(selection.exclude, t):
            continue
        out.append(t)
    return sorted(set(out))
