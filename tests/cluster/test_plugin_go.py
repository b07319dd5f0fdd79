"""A producer in Go through the kaudit plugin, over SASL_SSL with SCRAM: confluent-kafka-go
2.11.1 (the newest the Go proxy serves here) built with ``-tags dynamic`` against the
confluent-kafka wheel's librdkafka 2.16.0, so that the plugin resolves its ``rd_kafka_*``
symbols from the process (the module's default, a static librdkafka, exports none). It
writes to the test cluster's secured listener with ``acks=1`` through the demo's leader
kill; the ledger the shipper commits is the program's own account of its delivery
reports, and the auditor's losses are, write for write, the acknowledged writes a full
read cannot find.

The program is ``tests/support/goproducer``; Go is at ``/usr/local/go`` on these machines
and the module comes from the Go proxy (its ``go.sum`` pins it).
"""

import json
import os
import re
import shutil
import subprocess
import time
import uuid
from pathlib import Path

import confluent_kafka
import pytest

from kafka_audit.jars import plugin_library
from kafka_audit.producers.ledger import private_file
from kafka_audit.producers.native import librdkafka_path, native_spool_root
from kafka_audit.profile import librdkafka_config

from ..support.leader_kill import watching
from ..support.native_checks import kill_until_a_loss, ledger_rows, losses_as_found

GO = shutil.which("go") or ("/usr/local/go/bin/go" if Path("/usr/local/go/bin/go").exists()
                            else None)
PROGRAM = Path(__file__).resolve().parents[1] / "support" / "goproducer"
MODULE = "github.com/confluentinc/confluent-kafka-go/v2"
DELIVERED = re.compile(r"^delivered (\d+) (\d+)$", re.M)


@pytest.fixture(scope="module")
def goproducer(tmp_path_factory) -> Path:
    """The program, linked against the wheel's librdkafka through a pkg-config file of
    its own: the module's headers (2.11.1's, a subset of 2.16.0's API), the wheel's
    library by its file name, found again at run time by its rpath."""
    assert GO is not None, "Go is needed to build the Go producer (these machines have it)"
    out = tmp_path_factory.mktemp("go")
    env = {**os.environ, "CGO_ENABLED": "1", "GOFLAGS": "-mod=readonly",
           "PKG_CONFIG_PATH": str(out)}
    found = subprocess.run([GO, "mod", "download", "-json", MODULE], cwd=PROGRAM, env=env,
                           capture_output=True, text=True, timeout=600)
    assert found.returncode == 0, found.stdout + found.stderr
    vendor = Path(json.loads(found.stdout)["Dir"]) / "kafka" / "librdkafka_vendor"
    include = out / "include" / "librdkafka"
    include.mkdir(parents=True)
    for header in ("rdkafka.h", "rdkafka_mock.h"):
        (include / header).symlink_to(vendor / header)
    lib = Path(librdkafka_path())
    (out / "rdkafka.pc").write_text(
        "Name: rdkafka\nDescription: the confluent-kafka wheel's librdkafka\n"
        f"Version: {confluent_kafka.libversion()[0]}\nCflags: -I{out / 'include'}\n"
        f"Libs: -L{lib.parent} -l:{lib.name} -Wl,-rpath,{lib.parent}\n")
    exe = out / "goproducer"
    built = subprocess.run([GO, "build", "-tags", "dynamic", "-o", str(exe), "."],
                           cwd=PROGRAM, env=env, capture_output=True, text=True, timeout=900)
    assert built.returncode == 0, built.stdout + built.stderr
    return exe


def delivered(output: str) -> list[tuple[int, int]]:
    return sorted((int(p), int(o)) for p, o in DELIVERED.findall(output))


def test_a_go_producer_over_sasl_ssl_is_audited_and_its_loss_found(cluster, spark, settings,
                                                                  topic, goproducer):
    run_id = f"go-{uuid.uuid4().hex[:6]}"
    home = settings.home_dir
    home.mkdir(parents=True, exist_ok=True)
    conf = {**librdkafka_config(cluster.secure_profile("auditor"), cluster.bootstrap),
            "plugin.library.paths": str(plugin_library(quiet=True)),
            "kaudit.producer.id": "go", "kaudit.run.id": run_id,
            "kaudit.spool.dir": str(native_spool_root(settings)),
            "acks": "1", "message.timeout.ms": "60000", "linger.ms": "5"}
    protocol, mechanism = conf["security.protocol"], conf["sasl.mechanism"]  # (no password
    assert (protocol, mechanism) == ("sasl_ssl", "SCRAM-SHA-512")  # in a failure's message)
    properties = home / "go.properties"  # it holds the password: the user's alone
    with open(private_file(properties), "w") as f:
        f.writelines(f"{k}={v}\n" for k, v in conf.items())
    out_path, err_path = home / "go.out", home / "go.err"
    with open(out_path, "w") as out, open(err_path, "w") as err:
        proc = subprocess.Popen([str(goproducer), "-config", str(properties), "-topic", topic,
                                 "-rate", "2000"], stdin=subprocess.PIPE, stdout=out,
                                stderr=err)
    try:
        with watching(settings):
            time.sleep(3)  # a stream before the fault: part of the scenario
            killed, _ = kill_until_a_loss(cluster, topic,
                                          lambda: delivered(out_path.read_text()))
    finally:
        proc.stdin.close()  # the program flushes and exits
        try:
            code = proc.wait(120)
        finally:
            if proc.poll() is None:
                proc.kill()
    output = out_path.read_text()
    assert code == 0, err_path.read_text()[-3000:]
    version = re.search(r"^librdkafka (\S+)$", output, re.M)
    assert version and version.group(1) == confluent_kafka.libversion()[0]
    told = delivered(output)
    assert len(told) > 10000
    truth = losses_as_found(spark, settings, cluster, topic, "go", run_id, told)
    # the producer configuration's acks, read by the plugin
    assert {r["acks"] for r in ledger_rows(settings, run_id)} == {"1"}
    print(f"go producer: {len(told)} delivery reports, {len(truth)} lost = a full read's, "
          f"node {killed} killed")
