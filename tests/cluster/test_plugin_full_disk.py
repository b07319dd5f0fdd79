"""The kaudit plugin on a spool disk that fills up (a real tmpfs, filled to its last byte):
producing goes on; every delivery report the plugin cannot record is counted and held in
a drop span (topic, partition, seqs, ack times), which the shipper commits as the ledger's
note; recording resumes once the disk has room. Every acknowledged write is then either
in the ledger or in an ``unrecorded`` finding's span, once."""

from kafka_audit.jobs.core.unrecorded import unrecorded_findings
from kafka_audit.producers.instrumented import AuditedProducer
from kafka_audit.producers.native import native_spool_root
from kafka_audit.scenarios.cluster import wait_until
from kafka_audit.schemas.tables import LEDGER_NOTES
from kafka_audit.store import CommitNotes, files_added_since

from ..conftest import test_settings
from ..support.full_disk import fill
from ..support.native_checks import ledger_reports


def send(p: AuditedProducer, topic: str, seqs: range) -> None:
    """Round robin over the partitions: each partition's seqs have gaps, so every report
    is a run of its own and segments of 16 runs fill fast."""
    for i in seqs:
        p.produce(topic, b"v%d" % i, partition=i % 3)
    assert p.flush(60) == 0


def test_a_full_spool_disk_counts_and_spans_every_report_the_plugin_drops(
        cluster, topic, small_disk, tmp_path, capfd):
    settings = test_settings(small_disk / "home", warehouse=str(tmp_path / "warehouse"))
    p = AuditedProducer({"bootstrap.servers": cluster.bootstrap, "acks": "all",
                         "linger.ms": 0, "kaudit.spool.segment.records": "16"},
                        "full", settings, keep_record=True, native=True)
    send(p, topic, range(0, 60))
    wait_until(lambda: len(ledger_reports(settings, "full")) == 60, 30, "the first reports")
    filler = fill(small_disk)
    send(p, topic, range(60, 400))  # the segment fills, no next one: counted, spanned
    assert p._state.dropped > 0
    filler.unlink()
    # the plugin tries a new segment at most once a second: send until one is recorded
    sent, recorded = 400, p._state.acked

    def records_again() -> bool:
        nonlocal sent
        send(p, topic, range(sent, sent + 3))
        sent += 3
        return p._state.acked > recorded

    wait_until(records_again, 30, "the plugin to record again", every=0.2)
    dropped_before_room = p._state.dropped
    total = sent + 60
    send(p, topic, range(sent, total))  # recorded: the outage's spans are closed
    assert p._state.dropped == dropped_before_room  # none dropped once there was room
    spans = p._state.drop_spans()
    assert spans and all(s["topic"] == topic for s in spans)
    p.close()
    # the application was told of every write; the plugin recorded all but the dropped
    assert len(p.record) == total and p.failed == 0
    assert p.acked + dropped_before_room == total
    err = capfd.readouterr().err
    assert "counted as dropped, not recorded" in err and "recording delivery reports again" in err

    recorded = {r[0] for r in ledger_reports(settings, "full", p.run_id)}
    notes = CommitNotes(LEDGER_NOTES)
    files_added_since(settings.table_path("acks"), -1, notes=notes)
    found, problems = unrecorded_findings(notes.found)
    assert problems == []
    assert sum(f.count for f in found) == dropped_before_room  # every drop in a span, once
    assert sorted((f.partition, f.seq) for f in found) == sorted(
        (s["partition"], s["first_seq"]) for s in spans)
    # each acknowledged write is in the ledger or inside a span of its partition, not both
    for seq, _t, part, _off in p.record:
        inside = [f for f in found if f.partition == part
                  and f.seq <= seq <= f.evidence["last_seq"]]
        assert (seq in recorded) != bool(inside), seq
    assert len(recorded) == p.acked
    assert not any(native_spool_root(settings).iterdir())  # shipped, folder removed
