"""Auditing a secured cluster as an operator does: one profile file pointing at the
SASL_SSL listener (SCRAM-SHA-512, the CA file, the password in a file, ACLs enforced),
`kafka-audit check`, then `kafka-audit run`, findings over REST.

The acks=1 leader-kill scenario through that profile: the losses served over REST equal
the ground truth (a full read over the local cluster's own listener), and the password
reaches no log, no table and no API answer. Bad inputs against the secured listener (a
wrong password, a user who may not read the audited topic) get one line or a blocker,
and a non-zero exit, fast.
"""

import json
import os
import subprocess
import sys
import time
from pathlib import Path

import httpx

from kafka_audit.producers.load import LoadSpec, run_load
from kafka_audit.scenarios.cluster import wait_until
from kafka_audit.scenarios.groundtruth import acked_but_missing, full_read_stamps
from kafka_audit.scenarios.harness import (
    Component,
    fetch_lost,
    lost_messages,
    produce_with_leader_kill,
    settings_file,
)
from kafka_audit.schemas.verdicts import Cause, cause_name

EXE = str(Path(sys.executable).with_name("kafka-audit"))


def with_profile(settings, profile):
    return settings.model_copy(update={"profile": profile})


def check(settings, tmp_path, *args):
    env = {k: v for k, v in os.environ.items() if not k.startswith("KAFKA_AUDIT_")}
    env["KAFKA_AUDIT_CONFIG"] = str(settings_file(settings, tmp_path / "profile.yaml"))
    t0 = time.monotonic()
    done = subprocess.run([EXE, "check", *args], env=env, capture_output=True, text=True,
                          timeout=120)
    return done.returncode, done.stdout, done.stderr, time.monotonic() - t0


def api(settings, path, **params):
    r = httpx.get(f"http://{settings.api.host}:{settings.api.port}{path}", params=params,
                  timeout=10)
    return r.json() if r.status_code == 200 else None


def test_an_acks1_leader_kill_audited_through_a_sasl_ssl_profile(cluster, settings, topic,
                                                                 tmp_path):
    secured = with_profile(settings, cluster.secure_profile("auditor"))
    password = secured.profile.sasl.secret()
    code, out, err, _ = check(secured, tmp_path, "--json")
    assert code == 0, err
    assert json.loads(out)["security_protocol"] == "SASL_SSL"
    with Component(secured, "run") as service:
        # the producer writes through the same profile (SCRAM over TLS). Whether the fault
        # loses writes is the cluster's to decide (in CI a 0.5 s lag window once
        # acknowledged nothing the new leader lacked): only the fault is retried, on a
        # fresh topic, each time with the followers frozen longer (inside
        # replica.lag.time.max.ms), until a plain full read misses an acknowledged write
        for attempt, lag in enumerate((0.5, 1.5, 3.0)):
            if attempt:
                topic = f"{topic}-{attempt}"
                cluster.create_topic(topic, partitions=3, replication=3)
            p, _killed = produce_with_leader_kill(secured, cluster, topic, acks="1",
                                                  rate=5000, before_kill=3, after_kill=3,
                                                  lag_seconds=lag, progress=print)
            truth = acked_but_missing(p.record, p.producer_id, p.run_id,
                                      full_read_stamps(cluster.bootstrap, topic))
            if truth:
                break

        def judged():
            s = api(secured, "/v1/summary", topic=topic)
            return s is not None and s["acked"] == p.acked and s["pending"] == 0 and s

        summary = wait_until(judged, 300, "every write judged over REST", every=2)
        lost = fetch_lost(f"http://{secured.api.host}:{secured.api.port}", topic)
        log = service.output()
    assert truth, f"acks=1 with {attempt + 1} leader SIGKILLs mid-stream lost no write"
    assert summary["lost"] == len(truth)
    assert lost_messages(lost) == truth
    # (a loaded machine may leave the watcher blind a few seconds: the cause then names it)
    assert {cause_name(r["cause"]) for r in lost} == {Cause.acks1_failover}
    # the password is nowhere: not in the service's log, not in any table, checkpoint or
    # status file, not in an API answer
    assert password not in log
    leaked = [str(f) for f in Path(secured.home_dir).rglob("*")
              if f.is_file() and password.encode() in f.read_bytes()]
    assert leaked == []
    assert password not in json.dumps(summary) and password not in json.dumps(lost)


def test_a_wrong_password_is_one_line_and_exit_2_within_30s(cluster, settings, tmp_path):
    wrong = tmp_path / "wrong.password"
    wrong.write_text("not-the-password\n")
    profile = cluster.secure_profile("auditor")
    profile = profile.model_copy(update={"sasl": profile.sasl.model_copy(
        update={"password_file": wrong})})
    code, out, err, seconds = check(with_profile(settings, profile), tmp_path)
    assert code == 2 and seconds < 30, (code, seconds, err)
    lines = err.strip().splitlines()
    assert len(lines) == 1 and "refused user 'auditor'" in lines[0], lines
    assert "not-the-password" not in err + out


def test_a_wrong_ca_is_a_failed_tls_handshake_naming_the_ca_file(cluster, settings, tmp_path):
    """A CA that did not sign the brokers' certificates fails the TLS handshake before any
    password is sent: the one line says so and names the setting, never "refused user"."""
    other_key, other_ca = tmp_path / "other.key", tmp_path / "other.pem"
    subprocess.run(["openssl", "req", "-x509", "-newkey", "ec", "-pkeyopt",
                    "ec_paramgen_curve:P-256", "-nodes", "-keyout", str(other_key), "-out",
                    str(other_ca), "-subj", "/CN=another CA", "-days", "1"],
                   capture_output=True, check=True)
    profile = cluster.secure_profile("auditor")
    profile = profile.model_copy(update={"tls": profile.tls.model_copy(
        update={"ca_file": other_ca})})
    code, _out, err, seconds = check(with_profile(settings, profile), tmp_path)
    assert code == 2 and seconds < 30, (code, seconds, err)
    lines = err.strip().splitlines()
    assert len(lines) == 1 and "TLS handshake with the cluster failed" in lines[0], lines
    assert f"profile.tls.ca_file ({other_ca})" in lines[0] and "refused" not in lines[0]
    assert "certificate verify failed" in lines[0]


def test_a_user_who_may_not_read_the_audited_topic_is_a_blocker(cluster, settings, topic,
                                                                tmp_path):
    run_load(settings, LoadSpec(topic=topic, rate=0, count=10, acks="all"))  # in the ledger
    code, out, err, seconds = check(with_profile(settings, cluster.secure_profile("noread")),
                                    tmp_path, "--json")
    assert code == 3 and seconds < 60, (code, err)
    blockers = [f for f in json.loads(out)["findings"] if f["severity"] == "blocker"]
    assert [(f["subject"], f["problem"].split(" (")[0]) for f in blockers
            if f["subject"] == topic] == [(topic, "may not READ it"),
                                          (topic, "may not DESCRIBE_CONFIGS it")]
