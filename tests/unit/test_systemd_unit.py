"""The systemd unit in deploy/ parses (systemd-analyze verify), with its paths made real."""

import shutil
import subprocess
import sys
from pathlib import Path

import pytest

UNIT = Path(__file__).resolve().parents[2] / "deploy" / "kafka-audit.service"


@pytest.mark.skipif(shutil.which("systemd-analyze") is None,
                    reason="systemd-analyze is not installed on this machine")
def test_the_systemd_unit_verifies(tmp_path):
    exe = Path(sys.executable).with_name("kafka-audit")
    text = (UNIT.read_text().replace("/opt/kafka-audit/bin/kafka-audit", str(exe))
            .replace("User=kafka-audit", "User=root").replace("Group=kafka-audit", "Group=root"))
    unit = tmp_path / "kafka-audit.service"
    unit.write_text(text)
    done = subprocess.run(["systemd-analyze", "verify", str(unit)], capture_output=True,
                          text=True, timeout=60)
    assert done.returncode == 0 and done.stderr.strip() == "", done.stderr
    assert "kafka-audit run" in text and "KillSignal=SIGTERM" in text


def _service_entries() -> dict[str, list[str]]:
    """The [Service] section's entries, each key with its values in order."""
    out: dict[str, list[str]] = {}
    section = None
    for line in UNIT.read_text().splitlines():
        line = line.strip()
        if line.startswith("["):
            section = line
        elif section == "[Service]" and line and not line.startswith("#"):
            key, _, value = line.partition("=")
            out.setdefault(key, []).append(value)
    return out


def test_the_unit_keeps_its_files_private_and_names_a_writable_jar_cache():
    entries = _service_entries()
    assert entries["UMask"] == ["0077"]  # spools, tables, status files: the user's alone
    env = dict(e.split("=", 1) for e in entries["Environment"])
    cache = env["KAFKA_AUDIT_JAR_CACHE"]  # kafka_audit/jars.py's jar_cache() reads it
    from kafka_audit import jars

    assert "KAFKA_AUDIT_JAR_CACHE" in jars.jar_cache.__doc__
    # under ProtectSystem=strict the cache must be a path the service may write
    assert entries["ProtectSystem"] == ["strict"]
    writable = [*entries.get("ReadWritePaths", []),
                *(f"/var/cache/{d}" for d in entries.get("CacheDirectory", [])),
                *(f"/var/lib/{d}" for d in entries.get("StateDirectory", []))]
    assert any(cache == w or cache.startswith(w.rstrip("/") + "/") for w in writable), cache
    # and the comment says to fetch the jars as the service's user, into that cache
    text = UNIT.read_text()
    user = entries["User"][0]
    assert f"sudo -u {user}" in text and f"KAFKA_AUDIT_JAR_CACHE={cache}" in text
    assert "kafka-audit setup" in text
