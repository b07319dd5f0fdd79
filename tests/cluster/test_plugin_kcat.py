"""A producer in another language: kcat (Debian's, on Debian's librdkafka 2.0.2) with the
kaudit plugin, shipped by ``kafka-audit ship``: its writes are confirmed by the auditor,
its stamps hold (batching, compression, idempotence, a transaction, the size limit), and
the acks=1 leader kill's loss is found, write for write, against a full read."""

import re
import shutil
import subprocess
import threading
import time
import uuid

import pytest

from kafka_audit.producers.native import load_plugin, native_spool_root
from kafka_audit.scenarios.harness import audit_until_settled, findings_of
from kafka_audit.scenarios.harness import expand_rows as expand
from kafka_audit.schemas.stamp import HEADER

from ..support.leader_kill import watching
from ..support.native_checks import (
    kill_until_a_loss,
    ledger_reports,
    ledger_rows,
    losses_as_found,
    read_log,
    ship,
)

KCAT = shutil.which("kcat")
pytestmark = pytest.mark.skipif(KCAT is None, reason="kcat is not installed (Debian: kcat; "
                                                     "dev.sh installs it)")
DELIVERED = re.compile(r"Message delivered to partition (\d+) \(offset (\d+)\)")


def kcat_args(cluster, settings, topic, run_id, *extra):
    # -v -v: kcat prints one line per delivery report (its own account of what was acked)
    return [KCAT, "-P", "-b", cluster.bootstrap, "-t", topic, "-v", "-v",
            "-X", f"plugin.library.paths={load_plugin()}", "-X", "kaudit.producer.id=kcat",
            "-X", f"kaudit.run.id={run_id}",
            "-X", f"kaudit.spool.dir={native_spool_root(settings)}", *extra]


def delivered(stderr: str) -> list[tuple[int, int]]:
    return sorted((int(p), int(o)) for p, o in DELIVERED.findall(stderr))


def test_kcat_writes_are_audited_end_to_end(cluster, spark, settings, topic):
    run_id = f"e2e-{uuid.uuid4().hex[:6]}"
    proc = subprocess.run(kcat_args(cluster, settings, topic, run_id, "-X", "acks=all",
                                    "-X", "linger.ms=5"),
                          input="".join(f"line {i}\n" for i in range(3000)),
                          capture_output=True, text=True, timeout=120)
    assert proc.returncode == 0, proc.stderr[-2000:]
    told = delivered(proc.stderr)
    assert len(told) == 3000
    out = ship(settings)
    assert "1 finished and removed" in out, out
    reports = ledger_reports(settings, "kcat", run_id)
    assert [r[0] for r in reports] == list(range(3000))
    assert sorted((part, off) for _s, _t, part, off, _e in reports) == told
    log = read_log(cluster.bootstrap, topic)
    # kcat produces its lines in order: the plugin's seq is the line number
    assert all(log[(part, off)].value == b"line %d" % seq and log[(part, off)].checksum_ok
               for seq, _t, part, off, _e in reports)
    audit_until_settled(spark, settings, topic, progress=print)
    f = findings_of(settings, topic)
    assert {r["kind"] for r in f} == {"confirmed"}
    assert expand(f, "seq") == list(range(3000))
    assert {(r["producer_id"], r["run_id"]) for r in f} == {("kcat", run_id)}


KCAT_CASES = {
    "batching": ["-X", "linger.ms=100", "-X", "batch.num.messages=5000"],
    "gzip": ["-z", "gzip"],
    "lz4": ["-z", "lz4"],
    "snappy": ["-z", "snappy"],
    "idempotence": ["-X", "enable.idempotence=true"],
    "transaction": ["-X", "transactional.id=kcat-tx"],
}


def check_kcat_log(cluster, settings, topic, run_id, values, unstamped=()):
    """Every value delivered; all but ``unstamped`` (indexes) stamped in kcat's order with
    a good checksum; the ledger names exactly the stamped ones, where they are."""
    log = read_log(cluster.bootstrap, topic)
    assert sorted(r.value for r in log.values()) == sorted(values)
    stamped = [r for r in log.values() if r.stamp is not None]
    assert not any(r.malformed for r in log.values())
    assert sorted(r.value for r in log.values() if r.stamp is None) == sorted(
        values[i] for i in unstamped)
    assert all(r.stamp.version == 2 and r.checksum_ok and r.stamp.run_id == run_id
               and r.value == values[r.stamp.seq] for r in stamped)
    seqs = sorted(r.stamp.seq for r in stamped)
    assert seqs == [i for i in range(len(values)) if i not in unstamped]
    reports = ledger_reports(settings, "kcat", run_id)
    assert [r[0] for r in reports] == seqs
    assert all(log[(part, off)].stamp.seq == seq for seq, _t, part, off, _e in reports)


@pytest.mark.parametrize("case", sorted(KCAT_CASES))
def test_kcat_stamps_hold_on_librdkafka_2_0_2(cluster, settings, topic, case):
    run_id = f"{case}-{uuid.uuid4().hex[:6]}"
    lines = [f"{case} {i} " + "x" * (i % 700) for i in range(1000)]
    proc = subprocess.run(kcat_args(cluster, settings, topic, run_id, *KCAT_CASES[case]),
                          input="\n".join(lines) + "\n", capture_output=True, text=True,
                          timeout=120)
    assert proc.returncode == 0, proc.stderr[-2000:]
    assert len(delivered(proc.stderr)) == len(lines)
    ship(settings)
    check_kcat_log(cluster, settings, topic, run_id, [line.encode() for line in lines])


def test_kcat_at_the_size_limit_on_librdkafka_2_0_2(cluster, settings, topic, tmp_path):
    """Each file one message: one that fits with its stamp, one a byte over (unstamped),
    one at librdkafka's own limit (unstamped); none aborts kcat."""
    limit = 20000
    run_id = f"size-{uuid.uuid4().hex[:6]}"
    fits = limit - 36 - (1 + len(HEADER) + 1 + 19 + len("kcat") + len(run_id))
    values = [b"f" * fits, b"g" * (fits + 1), b"h" * (limit - 36)]
    files = []
    for i, v in enumerate(values):
        files.append(tmp_path / f"m{i}")
        files[-1].write_bytes(v)
    proc = subprocess.run(kcat_args(cluster, settings, topic, run_id, "-X",
                                    f"message.max.bytes={limit}", *map(str, files)),
                          capture_output=True, text=True, timeout=120)
    assert proc.returncode == 0, proc.stderr[-2000:]
    assert len(delivered(proc.stderr)) == 3
    ship(settings)
    check_kcat_log(cluster, settings, topic, run_id, values, unstamped=(1, 2))


def test_kcat_acks1_leader_kill_loss_is_found(cluster, spark, settings, topic):
    """The demo's fault hits kcat's writes: the auditor's losses equal the acked writes whose
    stamp a full read cannot find, and the ledger equals kcat's own delivery reports."""
    run_id = f"kill-{uuid.uuid4().hex[:6]}"
    err_path = settings.home_dir / "kcat.err"
    settings.home_dir.mkdir(parents=True, exist_ok=True)
    with open(err_path, "w") as err:
        # kcat -P puts acks on its topic handle's configuration, which an interceptor cannot
        # read: kaudit.acks declares it (without it the ledger said "all" and the cause
        # "unknown", hidden while the watcher was blind through the kill)
        proc = subprocess.Popen(kcat_args(cluster, settings, topic, run_id, "-X", "acks=1",
                                          "-X", "kaudit.acks=1", "-X", "message.timeout.ms=60000",
                                          "-X", "linger.ms=5"),
                                stdin=subprocess.PIPE, stderr=err, text=True)
    stop = threading.Event()
    sent = [0]

    def feed(rate=2000):
        start = time.monotonic()
        while not stop.is_set():
            due = int((time.monotonic() - start) * rate)
            if due > sent[0]:
                proc.stdin.write("".join(f"kill {i}\n" for i in range(sent[0], due)))
                proc.stdin.flush()
                sent[0] = due
            time.sleep(0.005)
        proc.stdin.close()

    feeder = threading.Thread(target=feed, name="kcat-feed")
    with watching(settings):
        feeder.start()
        try:
            time.sleep(3)  # a stream before the fault: part of the scenario
            killed, attempts = kill_until_a_loss(cluster, topic,
                                                 lambda: delivered(err_path.read_text()))
        finally:
            stop.set()
            feeder.join(60)
            assert proc.wait(120) == 0
    told = delivered(err_path.read_text())
    assert len(told) > 10000, f"{attempts} kills"
    losses_as_found(spark, settings, cluster, topic, "kcat", run_id, told)
    assert {r["acks"] for r in ledger_rows(settings, run_id)} == {"1"}
    assert killed in cluster.running()
