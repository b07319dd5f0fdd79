"""Upkeep that keeps a long run flat, on real Delta tables (delta-rs, no JVM).

* The rows appended since a version are read once, whatever was compacted since: a
  compaction's files are left out, the files it replaced still read where they hold
  new rows; appends racing compactions lose nothing; re-read commits a pass already
  judged are skipped; without the commit files, the snapshot comparison takes over.
* Vacuum deletes replaced files only past their retention, and keeps those of the latest
  versions; the Delta log loses only entries past its retention and before its last
  checkpoint, and the tables read the same after; the schedule
  (:func:`~kafka_audit.jobs.upkeep.maintenance.plan`) and one round of
  :class:`~kafka_audit.jobs.upkeep.maintenance.Upkeep` over a warehouse.
"""

import os
import threading
import time
from pathlib import Path

import pyarrow.compute as pc
import pyarrow.dataset as ds
import pytest
from deltalake import DeltaTable

from kafka_audit.errors import TableError
from kafka_audit.jobs.upkeep import maintenance
from kafka_audit.jobs.upkeep.maintenance import COMPACTED, Done, Plan, Upkeep, plan
from kafka_audit.scenarios.cluster import wait_until
from kafka_audit.schemas.tables import arrow_schema
from kafka_audit.settings import Settings
from kafka_audit.store import (
    TOMBSTONE_PROPERTY,
    AppendedRows,
    append_once,
    append_rows,
    checkpoint,
    compact,
    files_added_since,
    footprint,
    latest_version,
    read_table,
    trim_log,
    vacuum,
    vacuum_unnamed,
    write_arrow,
)

from ..support.rows import T, ledger_row


def ack(seq: int) -> dict:
    return ledger_row(seq)


def seqs_in(files: list[str]) -> list[int]:
    if not files:
        return []
    return sorted(ds.dataset(files, format="parquet", schema=arrow_schema("acks"))
                  .to_table(columns=["seq"]).column("seq").to_pylist())


def test_rows_appended_since_a_version_are_read_once_across_compactions(tmp_path):
    path = str(tmp_path / "acks")
    for s in range(10):
        append_rows(path, "acks", [ack(s)])
    seen, _, _ = files_added_since(path, -1)
    for s in range(10, 20):
        append_rows(path, "acks", [ack(s)])
    assert compact(path)["numFilesRemoved"] == 20  # all twenty rows now in one new file
    for s in range(20, 25):
        append_rows(path, "acks", [ack(s)])
    compact(path)
    current, files, rows = files_added_since(path, seen)
    assert seqs_in(files) == list(range(10, 25)) and rows == 15
    assert current == latest_version(path) == DeltaTable(path).version()
    # from the start: the live files, each row once
    assert seqs_in(files_added_since(path, -1)[1]) == list(range(25))
    # nothing new: a compaction alone adds no rows
    compact(path)
    assert files_added_since(path, current)[1:] == ([], 0)


def test_appends_racing_compactions_lose_nothing_and_are_read_once(tmp_path):
    path = str(tmp_path / "acks")
    append_rows(path, "acks", [ack(0)])
    start = latest_version(path)
    stop = threading.Event()
    written: list[int] = []

    def produce():
        s = 1
        while not stop.is_set() or s < 50:
            append_rows(path, "acks", [ack(s)])  # delta-rs, as the ledger appends
            written.append(s)
            s += 1

    t = threading.Thread(target=produce)
    t.start()
    deadline = time.monotonic() + 60
    while len(written) < 10 and time.monotonic() < deadline:  # files to compact first (a
        time.sleep(0.01)  # loaded machine once starved the appender: nothing to compact)
    results = [compact(path) for _ in range(3)]  # while the appends go on
    while not any(r and r["numFilesRemoved"] for r in results) and len(results) < 50:
        results.append(compact(path))
    stop.set()
    t.join(60)
    assert any(r and r["numFilesRemoved"] for r in results)
    assert sorted(read_table(path, "acks", ["seq"]).column("seq").to_pylist()) == \
        list(range(len(written) + 1))
    assert seqs_in(files_added_since(path, start)[1]) == written


def test_commits_of_skipped_apps_are_left_out(tmp_path):
    path = str(tmp_path / "acks")
    append_rows(path, "acks", [ack(0)])
    v = latest_version(path)
    append_once(path, "acks", [ack(1)], "judged-already", 7)
    append_rows(path, "acks", [ack(2)])
    assert seqs_in(files_added_since(path, v)[1]) == [1, 2]
    assert seqs_in(files_added_since(path, v, ("judged-already",))[1]) == [2]


def test_without_the_commit_files_the_snapshots_are_compared(tmp_path, caplog):
    path = str(tmp_path / "acks")
    for s in range(5):
        append_rows(path, "acks", [ack(s)])
    v = latest_version(path)
    for s in range(5, 8):
        append_rows(path, "acks", [ack(s)])
    checkpoint(path)
    (tmp_path / "acks" / "_delta_log" / f"{v + 1:020d}.json").unlink()  # as log cleanup does
    current, files, rows = files_added_since(path, v)
    assert seqs_in(files) == [5, 6, 7] and rows == 3 and current == v + 3
    assert "commit files after version" in caplog.text


def log_versions(path: str) -> dict[str, int]:
    """The table's log entries (commit files, checkpoints) by name, with their versions."""
    return {f: int(f[:20]) for f in os.listdir(os.path.join(path, "_delta_log"))
            if f[:20].isdigit()}


def test_the_log_loses_only_entries_past_retention_and_before_the_last_checkpoint(tmp_path):
    path = str(tmp_path / "acks")
    for s in range(250):  # delta-rs checkpoints every 100 commits: at 99 and 199
        append_rows(path, "acks", [ack(s)])
    before = log_versions(path)
    recent = os.path.join(path, "_delta_log", f"{150:020d}.json")
    later = time.time() + 3 * 3600  # three hours on: every entry is past a 2 h retention
    os.utime(recent, (later, later))  # but this one was written "just now"
    assert trim_log(path, 2, now=later) == sum(1 for v in before.values() if v < 199) - 1
    after = log_versions(path)
    assert set(after) == {f for f, v in before.items() if v >= 199} | {f"{150:020d}.json"}
    # readers load the last checkpoint and what follows: the table reads as before
    assert latest_version(path) == 249
    assert sorted(read_table(path, "acks", ["seq"]).column("seq").to_pylist()) == list(range(250))
    assert seqs_in(files_added_since(path, 240)[1]) == list(range(241, 250))
    # an incremental read from a version the log no longer holds: a clear error, not a guess
    with pytest.raises(TableError, match="no longer holds version 20"):
        files_added_since(path, 20)
    assert trim_log(path, 2, now=later) == 0  # nothing more to delete
    # within the retention nothing goes, whatever the checkpoints
    append_rows(path, "acks", [ack(250)])
    checkpoint(path)
    assert trim_log(path, 24) == 0 and set(log_versions(path)) >= set(after)


def test_a_kept_read_reads_only_appended_files_and_again_whole_after_a_rewrite(tmp_path):
    path = str(tmp_path / "acks")
    odd = pc.field("seq").isin([1, 3, 5, 7, 9, 11])
    kept = AppendedRows(path, "acks", where=odd, columns=["seq", "offset"])
    assert kept.read().num_rows == 0  # no table yet: empty, typed

    def same() -> list[int]:
        got = kept.read()
        assert got.column_names == ["seq", "offset"]
        fresh = read_table(path, "acks", ["seq"], odd).column("seq").to_pylist()
        assert sorted(got.column("seq").to_pylist()) == sorted(fresh)
        return sorted(fresh)

    for s in range(6):
        append_rows(path, "acks", [ack(s)])
    assert same() == [1, 3, 5] and (kept.full_reads, kept.appended_files) == (1, 0)
    append_rows(path, "acks", [ack(7)])
    append_rows(path, "acks", [ack(8), ack(9)])
    assert same() == [1, 3, 5, 7, 9] and (kept.full_reads, kept.appended_files) == (1, 2)
    assert same() and (kept.full_reads, kept.appended_files) == (1, 2)  # nothing new
    compact(path)  # the same rows in other files: nothing to read
    assert same() == [1, 3, 5, 7, 9] and (kept.full_reads, kept.appended_files) == (1, 2)
    DeltaTable(path).delete("seq = 3")  # not an append: read whole again
    assert same() == [1, 5, 7, 9] and kept.full_reads == 2
    append_rows(path, "acks", [ack(11)])
    assert same() == [1, 5, 7, 9, 11] and (kept.full_reads, kept.appended_files) == (2, 3)


def test_vacuum_keeps_files_in_retention_and_of_the_latest_versions(tmp_path):
    path = str(tmp_path / "audit_hot")
    rows = [{"kind": "ack", "topic": "t", "partition": 0, "pass_id": g} for g in range(6)]
    for r in rows:
        append_rows(path, "audit_hot", [r])
    write_arrow(path, "audit_hot", read_table(path, "audit_hot", where=pc.field("pass_id") == 5),
                "overwrite")
    append_rows(path, "audit_hot", [{"kind": "ack", "topic": "t", "partition": 0,
                                     "pass_id": 6}])
    assert footprint(path).data_files == 8 and footprint(path).live_files == 2
    assert vacuum(path, 1) == 0  # replaced a moment ago: within an hour's retention
    # no retention, but the files of the two latest versions stay: the rewrite's and the
    # last append's (the six older generations go)
    assert vacuum(path, 0, keep_last_versions=2) == 6
    assert footprint(path).data_files == 2
    assert sorted(read_table(path, "audit_hot").column("pass_id").to_pylist()) == [5, 6]
    assert read_table(path, "audit_hot", version=DeltaTable(path).version() - 1).num_rows


def test_the_schedule():
    s = Settings(audit={"hot_rewrite_passes": 10},
                 steady={"compact_every_seconds": 600, "quality_every_seconds": 30,
                         "windows_every_seconds": 10})
    first = plan(s, 1, 1000.0, Done())
    # a fresh loop compacts, checks, drops what aged out and computes windows at once
    assert first == Plan(compact=True, quality=True, windows=True, retention=True)
    done = Done(compact=1000.0, quality=1000.0, windows=1000.0, retention=1000.0)
    assert plan(s, 2, 1009.0, done) == Plan()
    assert plan(s, 2, 1010.0, done) == Plan(windows=True)
    done.windows = 1029.0
    assert plan(s, 2, 1029.0, done) == Plan()
    assert plan(s, 3, 1030.0, done) == Plan(quality=True)
    assert plan(s, 4, 1600.0, done) == Plan(compact=True, quality=True, windows=True)
    assert plan(s, 4, 4600.0, done).retention  # retention.every_seconds: an hour
    # audit_hot: checkpointed after each rewrite (passes 10, 20, ...), vacuumed once
    # half-way to the next
    assert [p for p in range(1, 36) if plan(s, p, 1001.0, done).hot_checkpoint] == \
        list(range(10, 36))
    done.hot_checkpoint_round = 1
    assert not plan(s, 11, 1001.0, done).hot_checkpoint
    assert plan(s, 20, 1001.0, done).hot_checkpoint
    assert [p for p in range(1, 20) if plan(s, p, 1001.0, done).hot_vacuum] == \
        list(range(15, 20))
    done.hot_vacuum_round = 1
    assert not any(plan(s, p, 1001.0, done).hot_vacuum for p in range(15, 25))
    assert plan(s, 25, 1001.0, done).hot_vacuum


def test_a_round_of_upkeep_over_a_warehouse(tmp_path):
    settings = Settings(home=tmp_path, steady={"compact_min_files": 3})
    acks = settings.table_path("acks")
    for s in range(12):
        append_rows(acks, "acks", [ack(s)])
    append_rows(settings.table_path("cluster_events"), "cluster_events", [
        {"event_time": T, "topic": "t", "partition": 0, "kind": "first_seen",
         "source": "test"}])
    upkeep = Upkeep(settings, clock=lambda: 5000.0)
    did = upkeep.run(Plan(compact=True))
    assert set(did) == set(COMPACTED)
    assert did["acks"][0] == "compacted 12 files into 1; 0 files vacuumed; 0 log entries deleted"
    assert did["cluster_events"][0] == "0 files vacuumed; 0 log entries deleted"
    assert did["findings"][0] == ""  # no table yet
    assert footprint(acks).live_files == 1 and footprint(acks).data_files == 13
    assert upkeep.done.compact == 5000.0 and upkeep.rounds == 1
    # a day and more on, the next round deletes the log before the compaction's checkpoint
    log = tmp_path / "warehouse" / "acks" / "_delta_log"
    old = time.time() - 25 * 3600
    for f in log.iterdir():
        os.utime(f, (old, old))
    expected = sum(1 for v in log_versions(acks).values() if v < latest_version(acks))
    append_rows(acks, "acks", [ack(12)])
    assert upkeep.run(Plan(compact=True))["acks"][0] == \
        f"0 files vacuumed; {expected} log entries deleted"
    assert sorted(read_table(acks, "acks", ["seq"]).column("seq").to_pylist()) == list(range(13))
    # audit_hot's own upkeep, between passes: a checkpoint after the tenth pass's rewrite
    hot = settings.table_path("audit_hot")
    append_rows(hot, "audit_hot", [{"kind": "ack", "topic": "t", "partition": 0,
                                    "pass_id": 10}])
    upkeep.between_passes(10)
    assert (tmp_path / "warehouse" / "audit_hot" / "_delta_log" / "_last_checkpoint").exists()
    assert upkeep.done.hot_checkpoint_round == 1


@pytest.mark.parametrize("table", COMPACTED)
def test_every_compacted_table_is_declared(table):
    assert arrow_schema(table).names


def test_a_compaction_leaves_files_of_the_target_size_alone(tmp_path):
    path = str(tmp_path / "acks")
    append_rows(path, "acks", [ack(s) for s in range(20_000)])  # one file, larger than ...
    big = DeltaTable(path).file_uris()
    size = footprint(path).live_bytes
    for s in range(20_000, 20_010):
        append_rows(path, "acks", [ack(s)])
    target = size // 2  # ... the target: it stays, the ten small ones become one
    metrics = compact(path, target)
    assert metrics["numFilesRemoved"] == 10 and metrics["numFilesAdded"] == 1, metrics
    live = DeltaTable(path).file_uris()
    assert len(live) == 2 and set(big) < set(live)
    assert seqs_in(live) == list(range(20_010))
    # Delta's default target (100 MB) would have rewritten all eleven
    for s in range(20_010, 20_020):
        append_rows(path, "acks", [ack(s)])
    assert compact(path)["numFilesRemoved"] == 12
    assert seqs_in(DeltaTable(path).file_uris()) == list(range(20_020))


def _removed_in_checkpoint(path: str) -> int:
    import pyarrow.parquet as pq

    checkpoint(path)
    last = sorted((Path(path) / "_delta_log").glob("*.checkpoint.parquet"))[-1]
    return pq.read_table(last, columns=["remove"]).column("remove").is_valid().to_pylist(
        ).count(True)


def test_new_tables_name_removed_files_for_hours_not_a_week(tmp_path, monkeypatch):
    """A new table keeps the files a compaction removed in its checkpoints for
    TOMBSTONE_RETENTION_HOURS (every load reads them; Delta's default kept a week's). A
    file whose name has left them before its vacuum (a service stopped for longer), or
    that no commit names (a failed writer's), is deleted by ``vacuum_unnamed`` once that
    many hours old, where delta-rs's default vacuum keeps it for good; a file written more
    recently is kept (a writer may be about to commit it)."""
    from kafka_audit import store

    path = str(tmp_path / "acks")
    append_rows(path, "acks", [ack(0)])
    assert DeltaTable(path).metadata().configuration[
        "delta.deletedFileRetentionDuration"] == "interval 2 hours"
    monkeypatch.setattr(store, "TOMBSTONE_RETENTION_HOURS", 1 / 3600)  # one second
    path = str(tmp_path / "acks2")
    for s in range(10):
        append_rows(path, "acks", [ack(s)])
    replaced = DeltaTable(path).file_uris()

    def written_ago(files, hours):
        t = time.time() - hours * 3600
        for f in files:
            os.utime(f, (t, t))

    written_ago(replaced, 2)
    assert compact(path)["numFilesRemoved"] == 10
    assert vacuum(path, 1) + vacuum_unnamed(path, 24) == 0  # removed a moment ago: 1 h
    assert _removed_in_checkpoint(path) == 10
    appended = 10

    def expired() -> bool:  # the names expire as a later version is checkpointed
        nonlocal appended
        append_rows(path, "acks", [ack(appended)])
        appended += 1
        return _removed_in_checkpoint(path) == 0

    wait_until(expired, 30, "the removed files to leave the checkpoint", every=0.5)
    stray = Path(path) / "part-00000-uncommitted.parquet"  # a writer about to commit
    stray.write_bytes(Path(replaced[0]).read_bytes())
    written_ago([str(stray)], 2)
    assert vacuum(path, 1) == 0  # the names are gone: the default vacuum keeps the files
    assert vacuum(path, 1) + vacuum_unnamed(path, 24) == 0  # and 2 hours is not 24
    written_ago([*replaced, str(stray)], 25)
    assert vacuum(path, 1) + vacuum_unnamed(path, 24) == 11
    assert not any(os.path.exists(f) for f in [*replaced, str(stray)])
    assert seqs_in(DeltaTable(path).file_uris()) == list(range(appended))


def test_tombstones_kept_for_seconds_are_set_on_every_table_and_both_vacuums_follow(
        tmp_path, monkeypatch):
    """``steady.tombstone_retention_hours`` below an hour (a soak's minutes; here ten
    seconds, under the 5-minute floor lowered for the test): the round sets it on a table
    made with the default, and its vacuums delete what a compaction replaced once that
    long ago (delta-rs takes whole hours else), the names still in the checkpoints or
    not; nothing live is touched."""
    from kafka_audit import settings as settings_module

    monkeypatch.setattr(settings_module, "MIN_TOMBSTONE_HOURS", 0)
    settings = Settings(home=tmp_path, steady={"tombstone_retention_hours": 10 / 3600,
                                               "compact_min_files": 3})
    path = settings.table_path("acks")
    for s in range(10):
        append_rows(path, "acks", [ack(s)])
    assert DeltaTable(path).metadata().configuration[TOMBSTONE_PROPERTY] == \
        "interval 2 hours"  # a new table's default
    replaced = DeltaTable(path).file_uris()
    upkeep = Upkeep(settings)
    did = upkeep.compact_table("acks")[0]
    assert did.startswith("compacted 10 files into 1; tombstones kept 0.00277778 h"), did
    assert DeltaTable(path).metadata().configuration[TOMBSTONE_PROPERTY] == \
        "interval 10 seconds"
    assert all(os.path.exists(f) for f in replaced)  # removed a moment ago
    appended = 10

    def vacuumed() -> bool:
        nonlocal appended
        append_rows(path, "acks", [ack(appended)])  # the table goes on being written
        appended += 1
        did = upkeep.compact_table("acks")[0]
        assert "tombstones kept" not in did  # set once
        return not any(os.path.exists(f) for f in replaced)

    wait_until(vacuumed, 60, "the replaced files to be vacuumed", every=1)
    assert seqs_in(DeltaTable(path).file_uris()) == list(range(appended))


@pytest.mark.parametrize("hours,error", [
    (2, None), (1.5, None), (1.1, "at least vacuum_retention_hours plus"), (0.5, None),
    (0.1, None), (0.05, "at least 0.0833333 [(]5 minutes[)]"),
    (0.0001, "at least 0.0833333")])
def test_tombstones_outlive_the_vacuum_and_its_round_or_are_minutes(tmp_path, hours, error):
    def make():
        return Settings(home=tmp_path, steady={"tombstone_retention_hours": hours})

    if error is None:
        assert make().steady.tombstone_retention_hours == hours
    else:
        with pytest.raises(ValueError, match=error):
            make()


def test_audit_hot_s_unnamed_files_go_in_the_compaction_round_not_between_passes(tmp_path):
    """A file in audit_hot's folder that no version names (a pass that died between writing
    and committing) is deleted once a day old by the worker's compaction round; the
    audit loop's own upkeep between passes does not list the folder."""
    settings = Settings(home=tmp_path, audit={"hot_rewrite_passes": 10})
    hot = settings.table_path("audit_hot")
    for g in range(10, 16):
        append_rows(hot, "audit_hot", [{"kind": "ack", "topic": "t", "partition": 0,
                                        "pass_id": g}])
    stray = Path(hot) / "part-00000-died-before-its-commit.parquet"
    stray.write_bytes(Path(DeltaTable(hot).file_uris()[0]).read_bytes())
    a_day_ago = time.time() - 25 * 3600
    os.utime(stray, (a_day_ago, a_day_ago))
    upkeep = Upkeep(settings, clock=lambda: 5000.0)
    upkeep.between_passes(15)  # checkpoint and vacuum of audit_hot are due: no listing
    assert upkeep.done.hot_vacuum_round == 1 and stray.exists()
    upkeep.run(Plan(compact=True))
    assert not stray.exists()
    assert sorted(read_table(hot, "audit_hot").column("pass_id").to_pylist()) == list(
        range(10, 16))


def test_the_ledger_is_compacted_every_minute_between_the_rounds():
    s = Settings(steady={"compact_every_seconds": 600, "ledger_compact_every_seconds": 60})
    # a round compacts the ledger with the rest: its own is due a minute after
    assert not plan(s, 1, 1000.0, Done()).compact_ledger
    done = Done(compact=1000.0)
    assert not plan(s, 2, 1059.0, done).compact_ledger
    assert plan(s, 2, 1060.0, done).compact_ledger
    done.compact_ledger = 1060.0
    assert not plan(s, 3, 1119.0, done).compact_ledger
    assert plan(s, 3, 1120.0, done).compact_ledger
    # ... and none when the round itself is due
    due = plan(s, 4, 1600.0, done)
    assert due.compact and not due.compact_ledger and due.background


def test_the_ledger_s_own_round_packs_its_small_files_and_nothing_else(tmp_path, monkeypatch):
    settings = Settings(home=tmp_path, steady={"compact_min_files": 2})
    acks, events = settings.table_path("acks"), settings.table_path("cluster_events")
    for s in range(12):  # a thousand runs a file: the packed file outweighs three small
        append_rows(acks, "acks", [ack(1000 * s + i) for i in range(1000)])
        append_rows(events, "cluster_events", [
            {"event_time": T, "topic": "t", "partition": s, "kind": "first_seen",
             "source": "test"}])
    upkeep = Upkeep(settings, clock=lambda: 5000.0)
    did = upkeep.run(Plan(compact_ledger=True))
    assert set(did) == {"acks"}
    assert did["acks"][0] == "compacted 12 files into 1"  # no vacuum, no log trimmed
    assert footprint(acks).live_files == 1 and footprint(events).live_files == 12
    assert upkeep.done.compact_ledger == 5000.0 and upkeep.done.compact == float("-inf")
    assert sorted(read_table(acks, "acks", ["seq"]).column("seq").to_pylist()) == \
        list(range(12000))
    # a file of the round's target size (a megabyte; here the packed file's) is left to
    # the 10-minute rounds; the files appended since are packed
    monkeypatch.setattr(maintenance, "LEDGER_ROUND_TARGET_MB",
                        footprint(acks).live_bytes / 2**20)
    for s in range(12000, 12003):
        append_rows(acks, "acks", [ack(s)])
    assert upkeep.run(Plan(compact_ledger=True))["acks"][0] == "compacted 3 files into 1"
    assert footprint(acks).live_files == 2
    assert upkeep.run(Plan(compact=True))["acks"][0].startswith("compacted 2 files into 1;")
    assert sorted(read_table(acks, "acks", ["seq"]).column("seq").to_pylist()) == \
        list(range(12003))
