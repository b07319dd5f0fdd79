"""Staged acks (``producer.ledger_commits: staged``): producer hosts hand their segments
over, one committer commits every host's in one Delta commit. On local disk here;
``tests/spark/test_object_store.py`` runs hosts and the committer against the S3 server."""

from pathlib import Path

import pyarrow as pa
import pytest
from pyarrow import fs

from kafka_audit import store
from kafka_audit.jobs.upkeep.staged_acks import StagedCommits
from kafka_audit.producers.ledger import SpoolCommitter
from kafka_audit.schemas.tables import arrow_schema
from kafka_audit.settings import Settings

from ..support.rows import ledger_row


def rows(producer: str, first_seq: int, n: int) -> pa.Table:
    return pa.Table.from_pylist([{**ledger_row(first_seq + k), "producer_id": producer}
                                 for k in range(n)], schema=arrow_schema("acks"))


def host(settings: Settings, name: str) -> SpoolCommitter:
    spool = SpoolCommitter(settings.table_path("acks"), settings.home_dir / "spool" / name,
                           f"{name}/run", staged=True)
    assert spool.lock()
    return spool


def keys(path: str) -> list[tuple[str, int]]:
    t = store.read_table(path, "acks", ["producer_id", "seq"])
    return sorted(zip(t.column("producer_id").to_pylist(), t.column("seq").to_pylist(),
                      strict=True))


def staged_files(path: str) -> list[str]:
    root = Path(path) / store.STAGED
    return sorted(str(p.relative_to(root)) for p in root.rglob("*") if p.is_file()) \
        if root.exists() else []


def test_every_hosts_segments_land_in_one_commit_each_once(tmp_path):
    s = Settings(home=tmp_path)
    acks = s.table_path("acks")
    hosts = [host(s, f"h{n}") for n in range(3)]
    first = [h.first_version() for h in hosts]
    for i in range(4):  # four flushes of three hosts: twelve segments
        for n, h in enumerate(hosts):
            h.spool(rows(f"h{n}", i * 5, 5), first[n] + i)
            assert h.commit() == 5  # handed over: rows
            assert h.segments() == []  # the spool keeps nothing it handed over
    assert not store.table_exists(acks)  # nothing is in the table before the committer runs
    assert len(staged_files(acks)) == 12
    committer = StagedCommits(s)
    done = committer.round()
    assert (done.version, done.segments, done.rows, done.apps) == (0, 12, 60, 3)
    assert keys(acks) == sorted((f"h{n}", q) for n in range(3) for q in range(20))
    assert staged_files(acks) == []
    # each app's transaction: its newest segment's version
    assert [store.transaction_version(acks, h.app_id) for h in hosts] == [v + 3 for v in first]
    assert [(h.rows_written, h.reports_written) for h in hosts] == [(20, 20)] * 3
    assert committer.round().version is None  # nothing staged: no commit
    assert store.latest_version(acks) == 0


def test_a_segment_staged_again_after_its_commit_is_dropped_unread(tmp_path):
    """A crash after the commit and before the deletes (or a host that staged a segment
    again): the next round finds it at or below its app's version and deletes it."""
    s = Settings(home=tmp_path)
    acks = s.table_path("acks")
    data = rows("h", 0, 5)
    sink = pa.BufferOutputStream()
    with pa.ipc.new_file(sink, data.schema) as w:
        w.write_table(data)
    segment = sink.getvalue().to_pybytes()
    store.stage_segment(acks, "h/run", 7, segment)
    assert store.commit_staged(acks, "acks").segments == 1
    store.stage_segment(acks, "h/run", 7, segment)  # again
    store.stage_segment(acks, "h/run", 6, segment)  # older still
    done = store.commit_staged(acks, "acks")
    assert (done.version, done.dropped) == (None, 2)
    assert keys(acks) == [("h", q) for q in range(5)]
    assert staged_files(acks) == []


def test_a_round_capped_commits_each_apps_oldest_first(tmp_path):
    s = Settings(home=tmp_path)
    acks = s.table_path("acks")
    h = host(s, "h")
    first = h.first_version()
    for i in range(5):
        h.spool(rows("h", i * 2, 2), first + i)
    h.commit()
    done = store.commit_staged(acks, "acks", max_segments=3)
    assert (done.segments, store.transaction_version(acks, "h/run")) == (3, first + 2)
    assert keys(acks) == [("h", q) for q in range(6)]
    assert store.commit_staged(acks, "acks").segments == 2
    assert store.transaction_version(acks, "h/run") == first + 4
    assert keys(acks) == [("h", q) for q in range(10)]


def test_staged_objects_are_no_part_of_the_table(tmp_path):
    """Readers do not see them, and neither vacuum (which lists the folder) deletes them."""
    s = Settings(home=tmp_path)
    acks = s.table_path("acks")
    store.write_arrow(acks, "acks", rows("setup", 0, 1))
    h = host(s, "h")
    h.spool(rows("h", 0, 3), h.first_version())
    h.commit()
    assert keys(acks) == [("setup", 0)]
    assert store.vacuum_unnamed(acks, hours=0) == 0
    assert store.vacuum(acks, retention_hours=0) == 0
    assert len(staged_files(acks)) == 1
    assert store.commit_staged(acks, "acks").rows == 3


def test_a_host_that_cannot_stage_keeps_its_segments(tmp_path):
    s = Settings(home=tmp_path)
    acks = s.table_path("acks")
    Path(acks).parent.mkdir(parents=True)
    Path(acks).write_text("a file where the table's folder should be")
    h = host(s, "h")
    h.spool(rows("h", 0, 3), h.first_version())
    assert h.commit() == 0
    assert len(h.segments()) == 1 and h.write_failures == 1 and h.last_error
    Path(acks).unlink()
    assert h.commit() == 3 and h.segments() == [] and h.last_error is None
    assert fs.LocalFileSystem().get_file_info(f"{acks}/{store.STAGED}").type \
        == fs.FileType.Directory


def test_commit_staged_once_from_the_command_line(tmp_path, monkeypatch, capsys):
    from kafka_audit.app import cli
    from kafka_audit.settings import get_settings

    monkeypatch.setenv("KAFKA_AUDIT_HOME", str(tmp_path))
    monkeypatch.delenv("KAFKA_AUDIT_CONFIG", raising=False)
    get_settings.cache_clear()
    try:
        s = get_settings()
        h = host(s, "h")
        for i in range(3):
            h.spool(rows("h", i * 4, 4), h.first_version())
        h.commit()
        assert cli.main(["commit-staged", "--once"]) == 0
    finally:
        get_settings.cache_clear()
    assert capsys.readouterr().out.strip() == \
        "committed 3 staged segments (12 rows) in 1 commits; 0 committed before, dropped"
    assert keys(s.table_path("acks")) == [("h", q) for q in range(12)]


def test_a_committer_that_lost_the_race_appends_nothing_twice(tmp_path):
    """Another committer committed a segment (its app's transaction) after this one loaded
    the table and before it committed the same segment: Delta's conflict check refuses
    this one, which must not commit again on the new version (the segment is in once);
    its segments stay staged, and the next round finds them committed."""
    from deltalake import CommitProperties, Transaction, write_deltalake
    from deltalake.exceptions import CommitFailedError

    s = Settings(home=tmp_path)
    acks = s.table_path("acks")
    h = host(s, "h0")
    first = h.first_version()
    h.spool(rows("h0", 0, 5), first)
    h.commit()
    assert store.commit_staged(acks, "acks").segments == 1
    h.spool(rows("h0", 5, 5), first + 1)
    h.commit()
    with store.one_snapshot_each():
        store._dt(acks)  # this committer's load
        # the winner: the same segment, with its app's transaction, committed meanwhile
        write_deltalake(acks, rows("h0", 5, 5), mode="append", commit_properties=
                        CommitProperties(app_transactions=[Transaction("h0/run", first + 1)]))
        with pytest.raises(CommitFailedError):
            store.commit_staged(acks, "acks")
    assert keys(acks) == [("h0", q) for q in range(10)]
    assert staged_files(acks) != []  # left for the next round
    assert store.commit_staged(acks, "acks").dropped == 1  # found committed: deleted unread
    assert staged_files(acks) == [] and keys(acks) == [("h0", q) for q in range(10)]
