"""The ack ledger on a spool disk that fills up: a real tmpfs of a few KiB, mounted for
the test (as root, as the fault tests are), filled to its last byte. Producing goes on;
what cannot be spooled is held and committed without the spool; what can be recorded
nowhere is dropped only past the bound, counted and described, never silently."""

import time
from pathlib import Path

import pytest
from deltalake import DeltaTable

from kafka_audit.errors import LedgerWriteError
from kafka_audit.jobs.core.unrecorded import unrecorded_findings
from kafka_audit.producers.ledger import LEDGER_NOTES, AckLedger
from kafka_audit.schemas.policy import Durability
from kafka_audit.store import CommitNotes, commit_staged, files_added_since

from ..support.full_disk import fill


def ledger(warehouse: Path, spool: Path, **kw) -> AckLedger:
    return AckLedger(str(warehouse / "acks"), spool, "p/r", "p", "r",
                     Durability("all", False, 2, 5), flush_seconds=60, **kw)


def report(seq: int, partition: int = 0):
    return (seq, "t", partition, seq, None, 0.002, time.time())


def acked(warehouse: Path) -> list[int]:
    got = DeltaTable(str(warehouse / "acks")).to_pyarrow_table().to_pylist()
    return sorted(r["seq"] + i for r in got for i in range(r["count"]))


def test_a_full_spool_disk_costs_no_ack_while_the_warehouse_takes_them(small_disk, tmp_path,
                                                                        capsys):
    led = ledger(tmp_path / "w", small_disk / "spool")
    fill(small_disk)
    for batch in range(5):
        for seq in range(batch * 100, batch * 100 + 100):
            led.add(report(seq, partition=seq % 3))
        led.flush()
    assert led.spool_failures == 5 and led.dropped_reports == 0 and led.held_reports == 0
    assert acked(tmp_path / "w") == list(range(500))  # each once, none lost
    assert "cannot write the spool" in capsys.readouterr().err  # and says so
    assert sorted(p.name for p in small_disk.iterdir()) == ["filler", "spool"]
    assert [p.name for p in (small_disk / "spool").iterdir()
            if p.suffix in (".arrow", ".tmp")] == []  # no half segment left on the disk
    led.close()


def test_spool_and_warehouse_both_gone_hold_then_count_what_is_dropped(small_disk, tmp_path,
                                                                       capsys, caplog):
    blocker = tmp_path / "w"  # a file where the warehouse folder should be: unwritable
    blocker.write_text("not a folder")
    led = ledger(blocker, small_disk / "spool", max_held_reports=250)
    filler = fill(small_disk)
    for batch in range(4):  # 400 reports, 100 a flush; 250 may wait in memory
        for seq in range(batch * 100, batch * 100 + 100):
            led.add(report(seq, partition=seq % 2))
        led.flush()
    assert led.held_reports == 200 and led.dropped_reports == 200
    # the two oldest batches, described per partition: the seqs the judgement lacks
    spans = [(u["partition"], u["first_seq"], u["last_seq"], u["reports"])
             for u in led.unrecorded]
    assert spans == [(0, 0, 98, 50), (1, 1, 99, 50), (0, 100, 198, 50), (1, 101, 199, 50)]
    assert all(u["producer_id"] == "p" and u["first_ack"] <= u["last_ack"]
               for u in led.unrecorded)
    assert "cannot write the spool" in capsys.readouterr().err
    said = [r.getMessage() for r in caplog.records if r.name == "kafka_audit.producers.ledger"]
    assert len([m for m in said if "delivery reports dropped" in m]) == 1  # once an outage
    # the disk has room again and the warehouse is back: what was held is written, once
    filler.unlink()
    blocker.unlink()
    blocker.mkdir()
    led.add(report(400))
    led.flush()
    assert acked(blocker) == list(range(200, 401))
    assert led.held_reports == 0 and led.spool_error is None
    assert any("recording again; 200 delivery reports of this outage were dropped" in
               r.getMessage() for r in caplog.records)
    # the warehouse holds the drops too: the first commit after them says what they were
    notes = [n for c in DeltaTable(str(blocker / "acks")).history() if LEDGER_NOTES in c
             for n in c[LEDGER_NOTES]]  # a list a commit: several notes may share one
    assert len(notes) == 1 and notes[0]["dropped_reports"] == 200
    assert [(u["partition"], u["first_seq"], u["last_seq"]) for u in notes[0]["unrecorded"]] \
        == [(p, first, last) for p, first, last, _ in spans]
    led.close()


def test_a_close_that_cannot_record_held_acks_counts_them(small_disk, tmp_path):
    blocker = tmp_path / "w"
    blocker.write_text("not a folder")
    led = ledger(blocker, small_disk / "spool")
    fill(small_disk)
    for seq in range(30):
        led.add(report(seq))
    with pytest.raises(LedgerWriteError, match="30 delivery reports could be recorded nowhere"):
        led.close(timeout=1)
    assert led.dropped_reports == 30 and led.unrecorded[0]["last_seq"] == 29


def test_a_staged_ledger_hands_its_drops_to_the_committers_commit(small_disk, tmp_path):
    blocker = tmp_path / "w"
    blocker.write_text("not a folder")
    led = ledger(blocker, small_disk / "spool", max_held_reports=100, staged=True)
    filler = fill(small_disk)
    for batch in range(2):
        for seq in range(batch * 100, batch * 100 + 100):
            led.add(report(seq, partition=seq % 2))
        led.flush()
    assert led.dropped_reports == 100
    filler.unlink()
    blocker.unlink()
    blocker.mkdir()
    led.add(report(200))
    led.flush()  # staged, the notes in the first segment handed over
    assert led.held_reports == 0 and led._spool.notes is None
    table = str(blocker / "acks")
    assert commit_staged(table, "acks").segments >= 1
    assert acked(blocker) == list(range(100, 201))
    notes = CommitNotes(LEDGER_NOTES)
    files_added_since(table, -1, notes=notes)
    assert [v for v, _ in notes.found] == [0] and notes.unread == []
    found, problems = unrecorded_findings(notes.found)
    assert problems == [] and sum(f.count for f in found) == 100
    assert sorted((f.partition, f.seq, f.evidence["last_seq"]) for f in found) == [
        (0, 0, 98), (1, 1, 99)]
    led.close()
