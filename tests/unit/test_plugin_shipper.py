"""The ledger shipper on hand-made spool folders (``tests/support/spools.py``): reading
segments, which runs may ship, rows of the ``acks`` table, and exactly once through every
crash point. Real Delta tables (delta-rs); no plugin, no broker."""

import json

import numpy as np
import pyarrow.ipc as ipc
import pytest
from deltalake import DeltaTable

from kafka_audit.producers.shipper import (
    RECORD,
    Cursor,
    FolderShipper,
    SpoolError,
    closed_prefix,
    read_meta,
    read_segment,
    read_topics,
    runs_to_table,
    ship_spools,
)

from ..support.spools import hold_lock, make_folder, run, write_segment


def acks(tmp_path):
    path = tmp_path / "acks"
    if not (path / "_delta_log").exists():
        return []
    return DeltaTable(str(path)).to_pyarrow_table().to_pylist()


def per_report(rows):
    """(run, seq, partition, offset or None, error) per delivery report."""
    return sorted((r["run_id"], r["seq"] + k, r["partition"],
                   None if r["offset"] is None else r["offset"] + k, r["error_name"])
                  for r in rows for k in range(r["count"]))


def shipper(folder, tmp_path):
    s = FolderShipper(folder, str(tmp_path / "acks"))
    assert s.acquire()
    return s


def test_segments_meta_and_topics_read_back(tmp_path):
    folder = make_folder(tmp_path / "spool", "prod-é", "run 1", topics=("a", "b.c"),
                         segments=[([run(0, 5, 100), run(5, 2, partition=1, topic=1,
                                                        closed=False)], False)])
    meta = read_meta(folder)
    assert (meta.producer_id, meta.run_id, meta.app_id) == ("prod-é", "run 1", "prod-é/run 1")
    assert meta.durability == ("1", False, 2, 5)
    assert read_topics(folder) == {0: "a", 1: "b.c"}
    header, records = read_segment(folder / "00000001.seg")
    assert (header["used"], header["sealed"], header["capacity"]) == (2, 0, 64)
    assert records["seq"].tolist() == [0, 5] and records["count"].tolist() == [5, 2]


def test_a_damaged_folder_is_refused_with_a_reason(tmp_path):
    folder = make_folder(tmp_path / "spool", segments=[([run(0, 1)], False)])
    (folder / "00000001.seg").write_bytes(b"not a segment at all, but long enough for a header"
                                          + bytes(64))
    with pytest.raises(SpoolError, match="not a kaudit segment"):
        read_segment(folder / "00000001.seg")
    (folder / "meta").write_text("format=1\n")
    with pytest.raises(SpoolError, match="meta"):
        read_meta(folder)


def test_a_torn_topics_line_is_ignored(tmp_path):
    folder = make_folder(tmp_path / "spool", topics=("a",))
    with open(folder / "topics", "a") as f:
        f.write("1\tb")  # the process died inside this write: no run names index 1 yet
    assert read_topics(folder) == {0: "a", 1: "b"}
    (folder / "topics").write_text("0\ta\n1")
    assert read_topics(folder) == {0: "a"}


def test_only_a_prefix_of_closed_runs_ships_while_the_producer_lives():
    recs = np.array([run(0, 1), run(1, 1, closed=False), run(2, 1)], RECORD)
    assert closed_prefix(recs, 0, final=False) == 1  # the open run and all after it wait
    assert closed_prefix(recs, 2, final=False) == 3
    assert closed_prefix(recs, 0, final=True) == 3  # the producer is gone: all are final
    assert closed_prefix(recs[:0], 0, final=False) == 0


def test_runs_become_acks_rows_with_the_producers_settings(tmp_path):
    folder = make_folder(tmp_path / "spool", topics=("t", "u"), acks="all")
    recs = np.array([run(0, 3, 10), run(3, 2, err=-192, partition=-1, topic=1),
                     run(5, 4)], RECORD)  # acks=0 style: delivered, no offset
    got = runs_to_table(recs, read_topics(folder), read_meta(folder)).to_pylist()
    assert [(r["seq"], r["count"], r["topic"], r["partition"], r["offset"], r["error_code"],
             r["error_name"]) for r in got] == [
        (0, 3, "t", 0, 10, None, None), (3, 2, "u", -1, None, -192, "_MSG_TIMED_OUT"),
        (5, 4, "t", 0, None, None, None)]
    assert {(r["acks"], r["idempotence"], r["retries"], r["max_in_flight"]) for r in got} == {
        ("all", False, 2, 5)}
    assert {r["system"] for r in got} == {"kafka"}
    assert all(r["send_time"] < r["ack_time"] <= r["last_ack_time"] for r in got)
    with pytest.raises(SpoolError, match="topic indexes"):
        runs_to_table(np.array([run(0, 1, topic=7)], RECORD), {0: "t"}, read_meta(folder))


def test_a_dead_producers_folder_ships_once_and_goes(tmp_path):
    folder = make_folder(tmp_path / "spool", segments=[
        ([run(0, 4, 0), run(4, 1, closed=False)], True), ([run(5, 2, 4, closed=False)], False)])
    s = shipper(folder, tmp_path)
    assert s.ship() == 3
    s.release()
    assert s.finished and not folder.exists()
    assert per_report(acks(tmp_path)) == [("r", q, 0, o, None) for q, o in
                                          [(0, 0), (1, 1), (2, 2), (3, 3), (4, None), (5, 4),
                                           (6, 5)]]


def test_a_spool_of_the_first_form_still_ships_beside_the_newer_one(tmp_path):
    """An upgraded shipper meets spools an older plugin left (64-byte records, no broker
    or epoch): they ship, those columns null; the newer form's broker and epoch land."""
    folder = make_folder(tmp_path / "spool")
    write_segment(folder, 1, [run(0, 4, 0, broker=2, leader_epoch=7)], sealed=True,
                  magic=b"KAUDSEG1")
    write_segment(folder, 2, [run(4, 2, 4, broker=3, leader_epoch=8)], sealed=True)
    header, old = read_segment(folder / "00000001.seg")
    assert header["rec_size"] == 64 and (old["broker"], old["leader_epoch"]) == (-1, -1)
    s = shipper(folder, tmp_path)
    assert s.ship() == 2
    s.release()
    rows = sorted(DeltaTable(str(tmp_path / "acks")).to_pyarrow_table().to_pylist(),
                  key=lambda r: r["seq"])
    assert [(r["seq"], r["count"], r["offset"], r["broker"], r["leader_epoch"])
            for r in rows] == [(0, 4, 0, None, None), (4, 2, 4, 3, 8)]


def test_a_live_producers_open_runs_wait_for_their_close(tmp_path):
    folder = make_folder(tmp_path / "spool", segments=[
        ([run(0, 4, 0), run(4, 1, 4, closed=False), run(5, 1, 20)], False)])
    with hold_lock(folder):
        s = shipper(folder, tmp_path)
        assert s.producer_alive()
        assert s.ship(close_timeout=0.05) == 1  # no plugin answers the close request here
        assert per_report(acks(tmp_path)) == [("r", q, 0, q, None) for q in range(4)]
        # the plugin closes the run, grown meanwhile, and adds one
        write_segment(folder, 1, [run(0, 4, 0), run(4, 3, 4), run(7, 1, 20),
                                  run(8, 1, 30, closed=False)])
        assert s.ship(close_timeout=0.05) == 2
        assert folder.exists() and not s.finished
        s.release()
    s = shipper(folder, tmp_path)  # the producer is gone: the open run is final
    assert s.ship() == 1 and s.finished
    s.release()
    assert [q for _, q, *_ in per_report(acks(tmp_path))] == list(range(9))


def test_one_shipper_per_folder(tmp_path):
    folder = make_folder(tmp_path / "spool", segments=[([run(0, 1)], False)])
    first = shipper(folder, tmp_path)
    assert not FolderShipper(folder, str(tmp_path / "acks")).acquire()
    assert ship_spools(tmp_path / "spool", str(tmp_path / "acks")).busy == 1
    first.release()


def crash_after_cut(folder, tmp_path):
    """A shipper that died after step 2 (batch file and cursor written, nothing committed)."""
    s = shipper(folder, tmp_path)
    s.cut()
    s.release()


def test_a_crash_after_the_cut_commits_the_batch_once(tmp_path):
    folder = make_folder(tmp_path / "spool", segments=[([run(0, 5, 0)], True)])
    crash_after_cut(folder, tmp_path)
    assert acks(tmp_path) == [] and len(list((folder / "ship").glob("*.arrow"))) == 1
    report = ship_spools(tmp_path / "spool", str(tmp_path / "acks"))
    assert (report.rows, report.reports, report.finished) == (1, 5, 1)
    assert per_report(acks(tmp_path)) == [("r", q, 0, q, None) for q in range(5)]


def test_a_crash_before_the_cursor_is_saved_finds_it_in_the_batch(tmp_path):
    folder = make_folder(tmp_path / "spool", segments=[([run(0, 5, 0), run(5, 1, 9)], True)])
    crash_after_cut(folder, tmp_path)
    (folder / "ship" / "cursor.json").unlink()  # died between the batch file and the cursor
    s = shipper(folder, tmp_path)
    assert s.cursor()[0] == Cursor(1, 2)
    assert s.cut() == 0  # nothing cut twice
    s.ship()
    s.release()
    assert per_report(acks(tmp_path)) == [("r", q, 0, q if q < 5 else 9, None)
                                          for q in range(6)]


def test_a_crash_after_the_commit_before_the_delete_writes_nothing_twice(tmp_path):
    folder = make_folder(tmp_path / "spool", segments=[([run(0, 3, 0)], True)])
    s = shipper(folder, tmp_path)
    s.cut()
    batch = next((folder / "ship").glob("*.arrow"))
    kept = batch.read_bytes()
    s.committer.commit()
    batch.write_bytes(kept)  # as if the process died before it deleted the committed batch
    s.release()
    assert ship_spools(tmp_path / "spool", str(tmp_path / "acks")).rows == 0
    assert per_report(acks(tmp_path)) == [("r", q, 0, q, None) for q in range(3)]
    assert not folder.exists()


def test_batches_carry_their_cursor_and_versions_only_grow(tmp_path):
    folder = make_folder(tmp_path / "spool", segments=[([run(0, 1, 0)], False)])
    with hold_lock(folder):
        s = shipper(folder, tmp_path)
        s.cut(close_timeout=0.01)
        first = int(next((folder / "ship").glob("*.arrow")).stem)
        with open(next((folder / "ship").glob("*.arrow")), "rb") as f:
            assert ipc.open_file(f).schema.metadata[b"kaudit.cursor"] == b"1:1:0"
        s.committer.commit()
        write_segment(folder, 1, [run(0, 1, 0), run(1, 1, 1)])
        s.cut(close_timeout=0.01)
        second = int(next((folder / "ship").glob("*.arrow")).stem)
        saved = json.loads((folder / "ship" / "cursor.json").read_text())
        assert second > first and saved == {"segment": 1, "slot": 2, "drops": 0,
                                            "next_version": second + 1}
        s.release()


def test_shipped_segments_are_deleted_behind_the_cursor(tmp_path):
    folder = make_folder(tmp_path / "spool", segments=[
        ([run(0, 2, 0)], True), ([run(2, 2, 2)], True), ([run(4, 1, 4, closed=False)], False)])
    with hold_lock(folder):
        s = shipper(folder, tmp_path)
        assert s.ship(close_timeout=0.01) == 2
        assert sorted(p.name for p in folder.glob("*.seg")) == ["00000003.seg"]
        s.release()
    assert ship_spools(tmp_path / "spool", str(tmp_path / "acks")).finished == 1
    assert [q for _, q, *_ in per_report(acks(tmp_path))] == list(range(5))


def test_only_dead_leaves_live_producers_to_their_own_shipper(tmp_path):
    live = make_folder(tmp_path / "spool", "p", "live", segments=[([run(0, 1)], False)])
    make_folder(tmp_path / "spool", "p", "dead", segments=[([run(0, 1)], False)])
    with hold_lock(live):
        report = ship_spools(tmp_path / "spool", str(tmp_path / "acks"), only_dead=True)
    assert (report.folders, report.finished, report.reports) == (2, 1, 1)
    assert {r["run_id"] for r in acks(tmp_path)} == {"dead"}


def test_a_cursor_saved_before_drop_spans_reads_as_none_reported():
    assert Cursor.decode(b"3:4") == Cursor(3, 4, 0)
    assert Cursor.decode(Cursor(3, 4, 2).encode()) == Cursor(3, 4, 2)
