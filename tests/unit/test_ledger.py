"""The ack ledger against a real Delta table (delta-rs; no broker, no JVM)."""

import time

import pyarrow as pa
import pytest
from deltalake import DeltaTable

from kafka_audit.errors import LedgerWriteError
from kafka_audit.producers.ledger import AckLedger
from kafka_audit.schemas.policy import Durability


class FakeError:
    """A delivery error as librdkafka reports it (pure data for this unit test)."""

    def code(self):
        return -192

    def name(self):
        return "_MSG_TIMED_OUT"


def make(tmp_path, **kw):
    return AckLedger(str(tmp_path / "acks"), tmp_path / "spool", "p/r", "p", "r",
                     Durability("1", False, 2, 5), flush_seconds=60, **kw)


def report(seq, offset=None, err=None, partition=0):
    return (seq, "t", partition, offset if offset is not None else seq, err, 0.002, time.time())


def rows(tmp_path):
    return DeltaTable(str(tmp_path / "acks")).to_pyarrow_table().sort_by("seq").to_pylist()


def seqs(path, run=False):
    """Every acked seq the ledger's run rows stand for."""
    got = DeltaTable(str(path)).to_pyarrow_table().to_pylist()
    return sorted((r["run_id"], r["seq"] + i) if run else r["seq"] + i
                  for r in got for i in range(r["count"]))


def test_every_report_lands_once_with_its_settings(tmp_path):
    led = make(tmp_path)
    for i in range(5):
        led.add(report(i))
    led.add(report(5, offset=-1, err=FakeError()))
    led.close()
    got = rows(tmp_path)
    assert [(r["seq"], r["count"], r["offset"]) for r in got] == [(0, 5, 0), (5, 1, None)]
    assert got[1]["error_name"] == "_MSG_TIMED_OUT" and got[1]["error_code"] == -192
    assert got[0]["acks"] == "1" and got[0]["error_code"] is None
    assert {r["system"] for r in got} == {"kafka"}
    assert got[0]["last_ack_time"] >= got[0]["ack_time"] >= got[0]["send_time"]
    assert led.spooled_segments() == []


def die(led):
    """What a killed process leaves: its spool on disk, its flock dropped by the kernel."""
    led._spool.release(remove_if_empty=False)


def spool_only(led):
    led._spool.spool(led._drain(), led._next_version)
    led._next_version += 1


def test_crash_after_commit_before_spool_delete_does_not_double(tmp_path):
    led = make(tmp_path)
    led.add(report(0))
    spool_only(led)
    seg = led.spooled_segments()[0]
    kept = seg.read_bytes()
    led._spool.commit()
    seg.write_bytes(kept)  # as if the process died between the commit and the unlink
    die(led)
    again = make(tmp_path)
    again.close()
    assert seqs(tmp_path / "acks") == [0]


def test_crash_before_commit_is_recovered_from_the_spool(tmp_path):
    led = make(tmp_path)
    led.add(report(0))
    spool_only(led)  # spooled, never committed: the process dies here
    die(led)
    again = make(tmp_path)
    again.add(report(1))
    again.close()
    assert seqs(tmp_path / "acks") == [0, 1]


CRASHING_RUN = """
import os, sys, time
from pathlib import Path
from kafka_audit.producers.ledger import AckLedger
from kafka_audit.schemas.policy import Durability
root = Path(sys.argv[1])
led = AckLedger(str(root / "acks"), root / "spool", "p/crashed", "p", "crashed",
                Durability("1", False, 2, 5), flush_seconds=60)
for seq in range(3):
    led.add((seq, "t", 0, seq, None, 0.001, time.time()))
led._spool.spool(led._drain(), led._next_version)
os._exit(9)  # killed before the commit: no cleanup of any kind
"""


def test_a_crashed_run_is_committed_by_the_next_run(tmp_path):
    import subprocess
    import sys

    proc = subprocess.run([sys.executable, "-c", CRASHING_RUN, str(tmp_path)])
    assert proc.returncode == 9
    assert len(list((tmp_path / "spool" / "p_crashed").glob("*.arrow"))) == 1
    nxt = AckLedger(str(tmp_path / "acks"), tmp_path / "spool", "p/next", "p", "next",
                    Durability("1", False, 2, 5), flush_seconds=60).start()
    nxt.add((0, "t", 0, 10, None, 0.001, time.time()))
    nxt.close()
    got = seqs(tmp_path / "acks", run=True)
    assert got == [("crashed", 0), ("crashed", 1), ("crashed", 2), ("next", 0)]
    assert not (tmp_path / "spool" / "p_crashed").exists()


def test_a_live_ledgers_spool_is_left_to_it(tmp_path):
    from kafka_audit.producers.ledger import recover_orphaned_spools

    live = make(tmp_path)
    live.add(report(0))
    spool_only(live)
    assert recover_orphaned_spools(tmp_path / "spool", str(tmp_path / "acks")) == 0
    assert len(live.spooled_segments()) == 1
    with pytest.raises(LedgerWriteError):
        make(tmp_path)  # the same app id cannot be opened twice
    live.close()
    assert seqs(tmp_path / "acks") == [0]


def test_a_restarted_app_id_never_reuses_a_version(tmp_path):
    led = make(tmp_path)
    led.add(report(0))
    led.close()
    committed = DeltaTable(str(tmp_path / "acks")).transaction_version("p/r")
    assert make(tmp_path)._next_version > committed


def test_unreachable_warehouse_keeps_acks_spooled_and_says_so(tmp_path, capsys):
    blocker = tmp_path / "blocked"
    blocker.write_text("a file where the warehouse folder should be")
    led = AckLedger(str(blocker / "acks"), tmp_path / "spool", "p/r", "p", "r",
                    Durability("all", False, 2, 5), flush_seconds=60)
    led.add(report(0))
    with pytest.raises(LedgerWriteError):
        led.close(timeout=1)
    assert len(led.spooled_segments()) == 1
    assert led.write_failures >= 1
    assert "cannot write" in capsys.readouterr().err
    # the warehouse comes back: the same spool is written, once
    blocker.unlink()
    blocker.mkdir()
    later = AckLedger(str(blocker / "acks"), tmp_path / "spool", "p/r", "p", "r",
                      Durability("all", False, 2, 5), flush_seconds=60)
    later.close()
    assert seqs(blocker / "acks") == [0]



def test_writer_thread_flushes_at_flush_rows_without_waiting_for_the_interval(tmp_path):
    from kafka_audit.scenarios.cluster import wait_until

    led = make(tmp_path, flush_rows=3).start()  # flush_seconds is 60
    led.add(report(0))  # the topic's first report: flushed at once (the test below)
    wait_until(lambda: led.reports_written == 1, 20, "the new topic's flush")
    for i in range(1, 4):
        led.add(report(i))
    wait_until(lambda: led.reports_written == 4, 20, "the row-count flush")
    assert led.spooled_segments() == []
    led.close()
    assert seqs(tmp_path / "acks") == [0, 1, 2, 3]


def test_a_topics_first_reports_are_committed_at_once_not_at_the_interval(tmp_path):
    """The audit reads a topic from when the ledger first names it: a producer's first
    report of a topic is committed within a quarter second, not ``flush_seconds`` (60
    here) later; a report of a topic already written waits for the interval."""
    from kafka_audit.scenarios.cluster import wait_until

    led = make(tmp_path)  # its writer started below: these looks are its own
    led.add(report(0))
    assert led._new_topic_waits()
    led.flush()
    led.add(report(1))
    assert not led._new_topic_waits()  # "t" is written: this one waits
    led.add((0, "u", 0, 0, None, 0.002, time.time()))
    assert led._new_topic_waits()
    led.start()
    wait_until(lambda: led.reports_written == 3, 20, "the new topic's first report")
    topics = DeltaTable(str(tmp_path / "acks")).to_pyarrow_table().column("topic")
    assert sorted(set(topics.to_pylist())) == ["t", "u"]
    led.close()


def test_a_subclass_s_own_rows_count_as_its_topics_written(tmp_path):
    """The topics written are read from the rows, whatever made them: RabbitLedger's own
    ``_to_table`` (reports ``(seq, key, node, outcome, sent, acked)``) included, so its
    writer flushes early once a key, not at every tick (it cut a publisher's one run into
    seven rows when the topics came from the Kafka ``_to_table`` alone)."""
    from kafka_audit.producers.rabbit import RabbitLedger

    led = RabbitLedger(str(tmp_path / "acks"), tmp_path / "spool", "p/r", "p", "r",
                       Durability("persistent", False, 0, 1), flush_seconds=60)
    now = time.time()
    led.add((0, "queue:/q", 1, None, now, now))
    assert led._new_topic_waits()
    led.flush()
    led.add((1, "queue:/q", 1, None, now, now))
    assert not led._new_topic_waits()
    led.close()
    assert [(r["seq"], r["count"]) for r in rows(tmp_path)] == [(0, 1), (1, 1)]


def test_reports_become_runs_split_at_every_gap_duplicate_or_disorder(tmp_path):
    led = make(tmp_path)
    # delivery order is not seq order; 0..3 form one run at offsets 10..13
    for seq, off in [(2, 12), (0, 10), (1, 11), (3, 13),
                     (4, 20),            # offset gap: new run
                     (6, 21),            # seq gap: new run
                     (7, 23), (8, 22)]:  # disorder: seq 8 sits before seq 7
        led.add(report(seq, offset=off))
    led.add(report(9, offset=30, partition=1))  # another partition
    led.add(report(10, offset=-1, err=FakeError()))
    led.add(report(11, offset=-1, err=FakeError()))
    led.close()
    got = [(r["partition"], r["seq"], r["count"], r["offset"]) for r in rows(tmp_path)]
    assert sorted(got, key=lambda r: r[1]) == [
        (0, 0, 4, 10), (0, 4, 1, 20), (0, 6, 1, 21), (0, 7, 1, 23), (0, 8, 1, 22),
        (1, 9, 1, 30), (0, 10, 2, None)]
    assert led.reports_written == 11 and led.rows_written == 7


def test_a_backlog_goes_in_as_one_commit_per_run_of_segments(tmp_path, monkeypatch):
    """Segments kept while the warehouse was away (or lost to other writers' commits) are
    appended together: a writer that fell behind does not ask the table for a commit per
    segment; each run's transaction is its last segment's version."""
    from kafka_audit import store
    from kafka_audit.producers import ledger as ledger_module
    from kafka_audit.producers.ledger import SpoolCommitter
    from kafka_audit.schemas.tables import arrow_schema

    from ..support.rows import ledger_row

    monkeypatch.setattr(ledger_module, "BACKLOG_SEGMENTS_PER_COMMIT", 3)
    acks = str(tmp_path / "acks")
    spool = SpoolCommitter(acks, tmp_path / "spool", "p/r")
    assert spool.lock()
    first = spool.first_version()
    for i in range(7):
        spool.spool(pa.Table.from_pylist([ledger_row(i * 2), ledger_row(i * 2 + 1)],
                                         schema=arrow_schema("acks")), first + i)
    assert spool.commit() == 14
    assert store.latest_version(acks) == 2  # 3 + 3 + 1 segments: three commits
    assert store.transaction_version(acks, "p/r") == first + 6
    assert seqs(tmp_path / "acks") == list(range(14))
    assert spool.segments() == [] and spool.reports_written == 14
