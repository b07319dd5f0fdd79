"""No secret of a full profile is printed: not by `config show`, not in a log record, a
status file, a client config shown, or an error message.

The profile holds every kind of secret the auditor handles: a SCRAM password from an
environment variable, mutual TLS with the client key's password from a file, private keys
inline as librdkafka and Java properties, an OAuth client secret, a trust store password.
No cluster: the paths that print are run for real, with the profile resolved as the
service resolves it.
"""

from __future__ import annotations

import base64
import json
import logging
import os
import secrets

import pytest
import yaml

from kafka_audit.app import cli
from kafka_audit.errors import ConfigError
from kafka_audit.profile import describe, librdkafka_config, spark_kafka_options
from kafka_audit.settings import get_settings
from kafka_audit.status import Outage, StatusWriter


def _pem(kind: str = "PRIVATE KEY") -> str:
    body = base64.b64encode(secrets.token_bytes(180)).decode()
    lines = [body[i:i + 64] for i in range(0, len(body), 64)]
    return f"-----BEGIN {kind}-----\n" + "\n".join(lines) + f"\n-----END {kind}-----\n"


@pytest.fixture
def full(tmp_path, monkeypatch):
    """A settings file with a full profile; the secrets it holds, by what they are."""
    for name in list(os.environ):
        if name.upper().startswith("KAFKA_AUDIT_"):
            monkeypatch.delenv(name)
    s = {"sasl_password": "sasl-" + secrets.token_hex(8),
         "key_password": "keypw-" + secrets.token_hex(8),
         "key_file_pem": _pem(),
         "librdkafka_key_pem": _pem("ENCRYPTED PRIVATE KEY"),
         "java_keystore_key": _pem(),
         "oauth_client_secret": "oauth-" + secrets.token_hex(8),
         "truststore_password": "trust-" + secrets.token_hex(8)}
    monkeypatch.setenv("AUDITOR_SASL_PASSWORD", s["sasl_password"])
    (tmp_path / "key.password").write_text(s["key_password"] + "\n")
    (tmp_path / "client.key").write_text(s["key_file_pem"])
    cert = _pem("CERTIFICATE")
    (tmp_path / "client.pem").write_text(cert)
    (tmp_path / "ca.pem").write_text(cert)
    config = {"home": str(tmp_path / "home"), "profile": {
        "name": "prod", "bootstrap": "kafka-1.example:9093",
        "security_protocol": "SASL_SSL",
        "sasl": {"mechanism": "SCRAM-SHA-512", "username": "auditor",
                 "password_env": "AUDITOR_SASL_PASSWORD"},
        "tls": {"ca_file": str(tmp_path / "ca.pem"), "cert_file": str(tmp_path / "client.pem"),
                "key_file": str(tmp_path / "client.key"),
                "key_password_file": str(tmp_path / "key.password")},
        "librdkafka": {"ssl.key.pem": s["librdkafka_key_pem"],
                       "sasl.oauthbearer.client.secret": s["oauth_client_secret"],
                       "ssl.certificate.pem": cert},
        "java": {"ssl.keystore.key": s["java_keystore_key"],
                 "ssl.truststore.password": s["truststore_password"]}}}
    path = tmp_path / "config.yaml"
    path.write_text(yaml.safe_dump(config))
    monkeypatch.setenv("KAFKA_AUDIT_CONFIG", str(path))
    get_settings.cache_clear()
    yield s
    get_settings.cache_clear()


def _fragments(secrets_: dict[str, str]) -> list[str]:
    """Each secret, and each line of each key: a line alone gives a key away too."""
    out = []
    for value in secrets_.values():
        out.append(value.strip())
        out += [line for line in value.splitlines() if line and "-----" not in line]
    return out


def assert_no_secret(text: str, secrets_: dict[str, str], where: str) -> None:
    leaked = [f for f in _fragments(secrets_) if f in text]
    assert leaked == [], f"{where} shows a secret: {leaked[0][:20]}..."


@pytest.mark.parametrize("argv", [["config", "show"], ["config", "show", "--json"]])
def test_config_show(full, capsys, argv):
    assert cli.main(argv) == 0
    out = capsys.readouterr().out
    assert_no_secret(out, full, "config show")
    data = json.loads(out) if "--json" in argv else yaml.safe_load(out)
    p = data["profile"]
    # hidden: the secrets; shown: where they come from, who, how
    assert p["librdkafka"]["ssl.key.pem"] == "***" and p["java"]["ssl.keystore.key"] == "***"
    assert p["librdkafka"]["sasl.oauthbearer.client.secret"] == "***"
    assert p["java"]["ssl.truststore.password"] == "***"
    assert p["librdkafka"]["ssl.certificate.pem"].startswith("-----BEGIN CERTIFICATE-----")
    assert p["sasl"] == {"mechanism": "SCRAM-SHA-512", "username": "auditor", "password": None,
                         "password_env": "AUDITOR_SASL_PASSWORD", "password_file": None}
    assert p["tls"]["key_password_file"].endswith("key.password")
    assert p["tls"]["key_file"].endswith("client.key") and p["tls"]["key_password"] is None


def test_client_configs_shown_and_logged(full, caplog, tmp_path):
    s = get_settings()
    conf = librdkafka_config(s.profile, s.cluster.bootstrap)
    opts = spark_kafka_options(s.profile, s.cluster.bootstrap)
    assert conf["sasl.password"] == full["sasl_password"]  # resolved, really
    assert opts["kafka.ssl.keystore.key"] == full["java_keystore_key"]
    shown = json.dumps([describe(conf), describe(opts)])
    assert_no_secret(shown, full, "a client config shown")
    assert "AUDITOR_SASL_PASSWORD" not in shown and "auditor" in shown  # the user, the path
    assert "client.key" in shown

    # a component whose step fails with an error that carries the options (as a Spark
    # plan's, a client's would): its log line and its status file
    status = StatusWriter(tmp_path / "home", "consume")
    outage = Outage("consume", status, logging.getLogger("kafka_audit.test"), 0.1, 1)
    with caplog.at_level(logging.INFO):
        outage.failed(RuntimeError(f"source failed: {opts} {conf}"))
        outage.failed(ValueError(f"bad key {full['key_file_pem']}"))
    assert "source failed" in caplog.text
    assert_no_secret(caplog.text, full, "a log record")
    text = status.path.read_text()
    assert json.loads(text)["error"].startswith("ValueError: bad key")
    assert_no_secret(text, full, "a status file")


def test_every_line_of_the_cli_log(full, capsys):
    """Whatever a library logs (Spark's, a client's), the CLI's log line hides the secrets."""
    args = cli.build_parser().parse_args(["--verbose", "config", "show"])
    cli._logging(args)
    s = get_settings()
    opts = spark_kafka_options(s.profile, s.cluster.bootstrap)
    try:
        logging.getLogger("py4j.clientserver").error("options %s", opts)
        try:
            raise RuntimeError(f"query failed with {opts['kafka.sasl.jaas.config']}")
        except RuntimeError:
            logging.getLogger("kafka_audit.app.service").exception("consume stopped")
    finally:
        logging.getLogger().handlers[:] = []
    err = capsys.readouterr().err
    assert "options {" in err and "consume stopped" in err and "Traceback" in err
    assert_no_secret(err, full, "the CLI's log")


def test_error_messages(full, capsys, monkeypatch):
    from kafka_audit.app import preflight

    s = get_settings()
    opts = spark_kafka_options(s.profile, s.cluster.bootstrap)

    def refused(settings, timeout=10):
        raise preflight.CheckFailed("through the Java client (the one Spark uses), the "
                                    f"cluster refused: {opts}")

    monkeypatch.setattr(preflight, "run_check", refused)
    for argv in (["check"], ["check", "--verbose"]):
        assert cli.main(argv) == 2
        err = capsys.readouterr().err
        assert "the cluster refused" in err
        assert_no_secret(err, full, f"`kafka-audit {' '.join(argv)}`'s error")


def test_settings_errors_name_the_setting_not_its_value(tmp_path, monkeypatch):
    for name in list(os.environ):
        if name.upper().startswith("KAFKA_AUDIT_"):
            monkeypatch.delenv(name)
    path = tmp_path / "config.yaml"
    path.write_text("profile:\n  java:\n    ssl.keystore.key: 314159265358979\n"
                    "  librdkafka:\n    sasl.oauthbearer.client.secret: 271828182845904\n")
    monkeypatch.setenv("KAFKA_AUDIT_CONFIG", str(path))
    get_settings.cache_clear()
    with pytest.raises(ConfigError) as info:
        get_settings()
    get_settings.cache_clear()
    message = str(info.value)
    assert "profile.java.ssl.keystore.key" in message
    assert "314159265358979" not in message and "271828182845904" not in message


def test_api_answers(full, caplog):
    """/healthz, /readyz and every GET route of the API, with a token (the most they show),
    over the full profile's settings and status files whose errors carried the secrets:
    no answer and no log record shows one."""
    from fastapi.testclient import TestClient

    from kafka_audit.auditor_api.auth import hash_token, new_token
    from kafka_audit.auditor_api.main import create_app
    from kafka_audit.settings import ApiToken
    from kafka_audit.status import COMPONENTS, StatusWriter

    token = new_token()
    s = get_settings().model_copy(deep=True)
    s.api.tokens = [ApiToken(name="ops", hash=hash_token(token))]
    opts = spark_kafka_options(s.profile, s.cluster.bootstrap)
    for c in COMPONENTS:  # each component failed with the options in its error's text
        StatusWriter(s.home, c).failing(f"RuntimeError: source failed: {opts}")
    app = create_app(s)
    paths = sorted({p for p, ops in app.openapi()["paths"].items()
                    if "get" in ops and "{" not in p} | {"/healthz", "/readyz", "/metrics"})
    assert {"/healthz", "/readyz", "/metrics", "/v1/summary"} <= set(paths)
    seen = []
    with caplog.at_level(logging.INFO), TestClient(app, base_url="http://localhost") as api:
        for path in paths:
            r = api.get(path, headers={"Authorization": f"Bearer {token}"})
            # failing components: /readyz says 503 (not ready), nothing else fails
            assert r.status_code < 500 or (path, r.status_code) == ("/readyz", 503), (
                path, r.status_code, r.text[:300])
            seen.append(f"{path} {r.status_code} {dict(r.headers)} {r.text}")
    text = "\n".join(seen)
    assert "source failed" in text  # the errors are shown, the secrets in them are not
    assert_no_secret(text, full, "an API answer")
    assert_no_secret(caplog.text, full, "the API's log")
