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
