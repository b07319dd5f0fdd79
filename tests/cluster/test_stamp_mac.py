"""Stamp MACs on the real cluster (``stamp.key_file``, issue 36 item 7): both producer paths
write the MACs the readers verify, and a stamp whose MAC does not verify is counted forged
and confirms no write, in the consume job and in the re-read."""

import pytest

from kafka_audit.producers.instrumented import AuditedProducer
from kafka_audit.scenarios.harness import audit_until_settled, findings_of
from kafka_audit.schemas.stamp import FORGED
from kafka_audit.stamp_key import stamp_mac
from kafka_audit.store import read_table

from ..support.native_checks import read_log


def keyed(settings, tmp_path, name: str, key: bytes):
    path = tmp_path / name
    path.write_bytes(key)
    path.chmod(0o600)
    return settings.model_copy(update={"stamp": settings.stamp.model_copy(
        update={"key_file": path})})


@pytest.mark.parametrize("native", [True, False], ids=["plugin", "python"])
def test_both_producer_paths_write_macs_the_readers_verify(cluster, settings, topic, tmp_path,
                                                           native):
    settings = keyed(settings, tmp_path, "stamp.key", bytes(range(40)))
    p = AuditedProducer({"bootstrap.servers": cluster.bootstrap, "acks": "all"}, "mac",
                        settings, native=native)
    for i in range(300):
        p.produce(topic, b"value %d" % i, headers=[("app", b"x")] if i % 3 == 0 else None)
    p.close()
    assert (p.acked, p.failed) == (300, 0)
    log = read_log(cluster.bootstrap, topic, mac=stamp_mac(settings))
    assert not any(r.malformed for r in log.values())  # a forged stamp counts as malformed
    assert sorted(r.stamp.seq for r in log.values()) == list(range(300))
    assert all(r.checksum_ok and r.stamp.version == (2 if native else 1)
               for r in log.values())
    # the same records under another key: every one forged
    other = stamp_mac(keyed(settings, tmp_path, "other.key", bytes(range(1, 41))))
    assert all(r.malformed for r in read_log(cluster.bootstrap, topic, mac=other).values())


def test_a_stamp_whose_mac_does_not_verify_is_counted_forged_and_confirms_nothing(
        cluster, spark, settings, topic, tmp_path):
    auditor = keyed(settings, tmp_path, "stamp.key", b"the auditor's key, 32 bytes long")
    # a producer that stamps with another key: well-formed stamps, acked writes, ledgered
    forger = keyed(settings, tmp_path, "forger.key", b"a key that is not the auditor's!")
    for who, s, n in (("honest", auditor, 30), ("forger", forger, 20)):
        p = AuditedProducer({"bootstrap.servers": cluster.bootstrap, "acks": "all"}, who, s,
                            keep_record=True, native=False)
        for i in range(n):
            p.produce(topic, b"%s %d" % (who.encode(), i), partition=0)
        p.close()
        assert (p.acked, p.failed) == (n, 0)

    audit_until_settled(spark, auditor, topic, progress=print)
    consumed = [r for r in read_table(auditor.table_path("consumed"), "consumed").to_pylist()
                if r["topic"] == topic]
    stream = [r for r in consumed if r["source"] == "stream"]
    assert sum(r["count"] for r in stream if r["stamp_error"] == FORGED) == 20
    assert {r["producer_id"] for r in stream if r["stamped"]} == {"honest"}
    # the re-reads the forger's writes asked for read them forged too: no producer's
    assert {r["producer_id"] for r in consumed if r["source"] == "reread"} <= {None, "honest"}
    assert any(r["source"] == "reread" and r["producer_id"] is None for r in consumed)
    f = findings_of(auditor, topic)
    confirmed = {(r["producer_id"], r["seq"] + k) for r in f if r["kind"] == "confirmed"
                 for k in range(r["count"])}
    assert confirmed == {("honest", i) for i in range(30)}
    assert sum(r["count"] for r in f if r["producer_id"] == "forger") == 20  # all judged
    # the API's count of unjudged records, by reason
    from kafka_audit.auditor_api.folds import SUMMARY_FOLDS, StreamSums

    fold = next(f for f in SUMMARY_FOLDS if f.name == "stream_sums")
    sums = fold.add(StreamSums(), read_table(auditor.table_path("consumed"), "consumed"), 1)
    assert sums.unjudged(topic, frozenset())["forged_stamp"] == 20
