"""``kafka-audit check`` against the real cluster, as a user runs it (a process of its own):
a report a person reads, JSON with a flag, the risks of each audited topic, and one
line with a non-zero exit, fast, for what blocks auditing."""

import json
import os
import subprocess
import sys
import time
from pathlib import Path

from kafka_audit.producers.load import LoadSpec, run_load
from kafka_audit.scenarios.harness import settings_file

EXE = str(Path(sys.executable).with_name("kafka-audit"))


def check(settings, tmp_path, *args: str) -> tuple[int, str, str, float]:
    env = {k: v for k, v in os.environ.items() if not k.startswith("KAFKA_AUDIT_")}
    env["KAFKA_AUDIT_CONFIG"] = str(settings_file(settings, tmp_path / "check.yaml"))
    t0 = time.monotonic()
    done = subprocess.run([EXE, "check", *args], env=env, capture_output=True, text=True,
                          timeout=120)
    return done.returncode, done.stdout, done.stderr, time.monotonic() - t0


def test_check_reports_durability_risks_of_each_audited_topic(cluster, settings, topic,
                                                               tmp_path):
    risky = f"risky-{topic}"
    cluster.create_topic(risky, partitions=1, replication=1,
                         config={"unclean.leader.election.enable": "true"})
    run_load(settings, LoadSpec(topic=topic, rate=0, count=10, acks="all", idempotence=True))
    run_load(settings, LoadSpec(topic=risky, rate=0, count=10, acks="1", producer_id="fast"))
    code, out, err, _ = check(settings, tmp_path, "--json")
    assert code == 0, err
    report = json.loads(out)
    assert report["brokers"] == 3 and report["kafka_metadata_version"].startswith("4.1")
    # formatted with the classic elections, on brokers that support KIP-966: advised
    assert report["eligible_leader_replicas"] == "off"
    assert [f["fix"].split(" upgrade")[0] for f in report["findings"]
            if f["subject"] == "cluster"] == ["kafka-features.sh --bootstrap-server ..."]
    assert report["topics"][topic]["replication_factor"] == 3
    assert report["topics"][risky] == {"replication_factor": 1, "min_isr": 1, "unclean": True,
                                       "producers": ["fast (acks=1)"]}
    problems = {(f["subject"], f["problem"].split(":")[0]) for f in report["findings"]}
    assert (risky, "replication factor 1") in problems
    assert (risky, "unclean.leader.election.enable=true") in problems
    assert (risky, "producer fast writes with acks=1") in problems
    assert (risky, "producer fast writes without idempotence") in problems
    assert all(f["severity"] == "risk" for f in report["findings"])
    assert not [f for f in report["findings"] if f["subject"] == topic
                and "idempotence" in f["problem"]]
    # what "ok" covers: each client that connected and each permission found granted
    verified = report["verified"]
    assert [v.split(" (")[0] for v in verified[:2]] == ["librdkafka", "the Java client"]
    assert "connected over PLAINTEXT" in verified[0] and "metadata.version 4.1" in verified[1]
    assert f"permissions READ, DESCRIBE, DESCRIBE_CONFIGS on topic {topic}" in verified
    code, text, _, _ = check(settings, tmp_path)  # the table a person reads
    assert code == 0 and "check: ok, with the risks above" in text and risky in text
    assert "verified:\n  - librdkafka" in text


def test_check_says_in_one_line_when_the_cluster_cannot_be_reached(settings, tmp_path):
    nowhere = settings.model_copy(update={"profile": settings.profile.model_copy(
        update={"bootstrap": "127.0.0.1:9"})})  # nothing listens on port 9
    code, out, err, seconds = check(nowhere, tmp_path)
    assert code == 2 and seconds < 30, (code, seconds)
    assert len(err.strip().splitlines()) == 1 and "cannot reach the cluster at 127.0.0.1:9" \
        in err, err


def test_check_says_in_one_line_that_a_ca_file_is_missing(settings, tmp_path):
    profile = settings.profile.model_copy(update={
        "security_protocol": "SSL",
        "tls": settings.profile.tls.model_copy(update={"ca_file": tmp_path / "nope.pem"})})
    code, out, err, seconds = check(settings.model_copy(update={"profile": profile}), tmp_path)
    assert code == 2 and seconds < 30
    assert err.strip().splitlines() == [
        f"kafka-audit: [config] profile.tls.ca_file: cannot read {tmp_path / 'nope.pem'}"]
