"""The API's child process gets no Kafka secret (it never talks to Kafka): not in the
settings handed through its pipe, not in its environment."""

from __future__ import annotations

import os
import pickle
import secrets
import signal
import socket
from pathlib import Path

import httpx

from kafka_audit.app.api_process import child_environment, child_settings, start_api_process
from kafka_audit.scenarios.cluster import wait_until
from kafka_audit.settings import Settings

PEM = "-----BEGIN PRIVATE KEY-----\nMIIEvQIBADANBgkqhkiG9w0BAQEFAASC" + secrets.token_hex(16) + \
    "\n-----END PRIVATE KEY-----\n"


def _secret_settings(tmp_path: Path, port: int = 8088) -> tuple[Settings, dict[str, str]]:
    s = {"sasl": "sasl-" + secrets.token_hex(8), "key": "keypw-" + secrets.token_hex(8),
         "env_key": "envkey-" + secrets.token_hex(8), "pem": PEM,
         "oauth": "oauth-" + secrets.token_hex(8), "jaas": "jaaspw-" + secrets.token_hex(8),
         "rabbit": "rabbitpw-" + secrets.token_hex(8)}
    settings = Settings(
        home=tmp_path, api={"host": "127.0.0.1", "port": port},
        rabbitmq={"queues": ["rabbitmq:queue:%2F:orders"], "password": s["rabbit"],
                  "nodes": [{"amqp": "rmq-1:5672", "management": "http://rmq-1:15672"}]},
        cluster={"broker_overrides": {
            "sasl.jaas.config": f'ScramLoginModule required username="a" password="{s["jaas"]}";',
            "num.io.threads": 2}},
        profile={"bootstrap": "kafka-1.example:9093", "security_protocol": "SASL_SSL",
                 "sasl": {"mechanism": "SCRAM-SHA-512", "username": "auditor",
                          "password": s["sasl"]},
                 "tls": {"key_password_env": "AUDITOR_KEY_PASSWORD"},
                 "librdkafka": {"ssl.key.pem": s["pem"], "sasl.oauthbearer.client.secret":
                                s["oauth"], "socket.keepalive.enable": "true"},
                 "java": {"ssl.keystore.key": s["pem"], "ssl.key.password": s["key"]}})
    return settings, s


def test_the_settings_handed_over_hold_no_kafka_secret(tmp_path):
    settings, s = _secret_settings(tmp_path)
    handed = child_settings(settings)
    payload = pickle.dumps(handed)
    for value in s.values():
        assert value.encode() not in payload
    # what the API needs is all there: the profile's shape, the API's own settings
    assert handed.api == settings.api and handed.home == settings.home
    assert handed.profile.sasl.username == "auditor" and handed.profile.sasl.password is None
    assert handed.profile.librdkafka == {"socket.keepalive.enable": "true"}
    assert "sasl.jaas.config" not in handed.cluster.broker_overrides
    assert handed.cluster.broker_overrides["num.io.threads"] == 2
    assert settings.profile.sasl.password.get_secret_value() == s["sasl"]  # not modified
    # the RabbitMQ queues are there (the API serves them), not the password
    assert handed.rabbitmq.queues == settings.rabbitmq.queues
    assert settings.rabbitmq.password.get_secret_value() == s["rabbit"]


def test_the_environment_handed_over_holds_no_kafka_secret(tmp_path):
    settings, _ = _secret_settings(tmp_path)
    environ = {"PATH": "/usr/bin", "AUDITOR_KEY_PASSWORD": "x",
               "KAFKA_AUDIT_PROFILE__SASL__PASSWORD": "y", "KAFKA_AUDIT_HOME": "/h",
               "KAFKA_AUDIT_RABBITMQ__PASSWORD": "z"}
    assert child_environment(settings, environ) == {"PATH": "/usr/bin", "KAFKA_AUDIT_HOME": "/h"}


def _free_port() -> int:
    with socket.socket() as sock:
        sock.bind(("127.0.0.1", 0))
        return sock.getsockname()[1]


def test_the_running_api_process_has_no_kafka_secret_in_its_environment(tmp_path, monkeypatch):
    port = _free_port()
    settings, s = _secret_settings(tmp_path, port)
    monkeypatch.setenv("AUDITOR_KEY_PASSWORD", s["env_key"])
    monkeypatch.setenv("KAFKA_AUDIT_PROFILE__SASL__PASSWORD", s["sasl"])
    proc = start_api_process(settings)
    try:
        def up() -> bool:
            try:
                return httpx.get(f"http://127.0.0.1:{port}/healthz", timeout=2).status_code \
                    in (200, 503)
            except httpx.HTTPError:
                return False

        wait_until(up, 60, "the API process to answer")
        environ = Path(f"/proc/{proc.pid}/environ").read_bytes()
        assert b"AUDITOR_KEY_PASSWORD" not in environ and s["env_key"].encode() not in environ
        assert s["sasl"].encode() not in environ
        assert b"PATH=" in environ  # the rest of the environment is there
    finally:
        os.kill(proc.pid, signal.SIGTERM)
        proc.wait(15)
