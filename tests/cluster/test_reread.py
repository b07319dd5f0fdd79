"""Direct re-reads on the real cluster: whatever the consume job reads, a re-read reads and
classifies the same way, and no record fails its range (issue 36, item 5)."""

import shutil
import subprocess

import pytest
from confluent_kafka import Producer

from kafka_audit.clients import cluster_config
from kafka_audit.jobs.audit.reread import reread
from kafka_audit.jobs.consume.consume_job import start_consume
from kafka_audit.jobs.core.model import Reread
from kafka_audit.producers.native import load_plugin, native_spool_root
from kafka_audit.schemas.stamp import HEADER, build_stamp, crc32
from kafka_audit.store import read_table

KCAT = shutil.which("kcat")


def _per_offset(runs: list[dict]) -> dict[int, tuple]:
    """(producer, seq) per offset of read runs (None, None: a record no producer's)."""
    out = {}
    for r in runs:
        for k in range(r["count"]):
            assert r["offset"] + k not in out
            out[r["offset"] + k] = (r["producer_id"], None if r["seq"] is None else r["seq"] + k)
    return out


def _kcat(bootstrap: str, topic: str, value: bytes, header: bytes, *extra: bytes) -> None:
    """One record with the header ``header`` (``name=value``, any bytes but NUL), written
    by kcat: confluent-kafka's produce() writes a bytes key as its repr."""
    proc = subprocess.run([KCAT, "-P", "-b", bootstrap, "-t", topic, "-p", "0", "-H", header,
                           *extra], input=value + b"\n", capture_output=True, timeout=60)
    assert proc.returncode == 0, proc.stderr[-2000:]


@pytest.mark.skipif(KCAT is None, reason="kcat is not installed (Debian: kcat; dev.sh "
                                         "installs it)")
def test_a_header_key_that_is_not_utf8_is_read_as_the_consume_job_reads_it(
        cluster, spark, settings, topic):
    # the protocol allows any bytes in a header key; confluent-kafka's Message.headers()
    # raises SystemError on one that is not UTF-8 (and the re-read's range failed on every
    # pass), the Java client decodes it with replacement characters
    raw = Producer({"bootstrap.servers": cluster.bootstrap})

    def stamped(seq: int) -> None:
        value = b"v%d" % seq
        raw.produce(topic, value, partition=0, headers=[(HEADER, build_stamp(
            "p", "r", seq, crc32(value)))])
        assert raw.flush(30) == 0

    stamped(0)  # offset 0
    _kcat(cluster.bootstrap, topic, b"v1", b"\xc3\x28=x")  # 1: its one key is not UTF-8
    # 2: stamped by the plugin (in kcat), beside a key that is not UTF-8
    _kcat(cluster.bootstrap, topic, b"v2", b"\xfe\xff=x",
          b"-X", f"plugin.library.paths={load_plugin()}".encode(),
          b"-X", b"kaudit.producer.id=kcat", b"-X", b"kaudit.run.id=k1",
          b"-X", f"kaudit.spool.dir={native_spool_root(settings)}".encode())
    _kcat(cluster.bootstrap, topic, b"v3", b"kaudit\xff=x")  # 3: not kaudit
    stamped(1)  # 4
    want = {0: ("p", 0), 1: (None, None), 2: ("kcat", 0), 3: (None, None), 4: ("p", 1)}

    answers = reread(cluster_config(settings), [Reread(topic, 0, 0, 5, "test")])
    assert {r.status for r in answers} == {"record"}  # every offset answered, a record
    assert _per_offset([r.__dict__ for r in answers]) == want

    # the consume job, over the same records, says the same
    start_consume(spark, settings, pattern=f"^{topic}$", once=True).awaitTermination()
    consumed = [r for r in read_table(settings.table_path("consumed"), "consumed").to_pylist()
                if r["topic"] == topic]
    assert _per_offset(consumed) == want
    assert [r["stamp_error"] for r in sorted(consumed, key=lambda r: r["offset"])
            if not r["stamped"]] == ["no kaudit header"] * 2
