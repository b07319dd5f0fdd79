"""The table layer: tables of another version are refused clearly; the committed pass."""

from datetime import UTC, datetime

import pyarrow as pa
import pyarrow.compute as pc
import pytest
from deltalake import write_deltalake

from kafka_audit.errors import TableError
from kafka_audit.schemas.tables import arrow_schema
from kafka_audit.settings import Settings
from kafka_audit.store import (
    Progress,
    append_once,
    append_rows,
    check_table,
    committed_pass,
    committed_progress,
    one_snapshot_each,
    read_admitting,
    read_table,
    write_arrow,
)

from ..support.rows import ledger_row


def test_a_table_of_another_version_is_refused_with_what_to_do(tmp_path):
    path = str(tmp_path / "audit_hot")
    full = arrow_schema("audit_hot")
    old = pa.schema([f for f in full if f.name not in ("horizon", "progress", "pass_id")]
                    + [pa.field("time1", pa.timestamp("us", tz="UTC"))])
    write_deltalake(path, pa.Table.from_pylist(
        [{"kind": "ack", "topic": "t", "partition": 0, "seq": 5, "count": 2}], schema=old))
    with pytest.raises(TableError, match="another version.*move the warehouse away") as e:
        check_table(path, "audit_hot")
    assert "time1" in str(e.value) and "horizon" in str(e.value)
    check_table(str(tmp_path / "absent"), "audit_hot")  # a table not made yet is fine
    append_rows(str(tmp_path / "acks"), "acks", [])
    check_table(str(tmp_path / "findings"), "findings")


def test_the_latest_progress_row_names_the_committed_pass(tmp_path):
    settings = Settings(home=tmp_path)
    path = settings.table_path("audit_hot")
    assert committed_progress(settings) == Progress() and committed_pass(settings) == 0

    def progress(pass_id):
        return {"kind": "progress", "topic": "", "partition": -1, "pass_id": pass_id,
                "progress": Progress(pass_id, 7, 9).to_json()}

    append_rows(path, "audit_hot", [progress(4), {"kind": "ack", "topic": "t", "partition": 0,
                                                  "pass_id": 4}])
    assert committed_progress(settings) == Progress(4, 7, 9, generation=4)
    append_rows(path, "audit_hot", [progress(5)])  # the next pass appends its generation
    assert committed_progress(settings).generation == 5 and committed_pass(settings) == 5
    check_table(path, "audit_hot")  # written by this version: accepted


def test_rows_of_one_value_are_read_from_the_files_admitting_it_alone(tmp_path):
    """``read_admitting`` equals a scan of the whole table under the same filter, with a
    file whose statistics span several generations (a compaction's), none without, and
    reads no file the statistics rule out (one is removed from under the table)."""
    path = str(tmp_path / "audit_hot")

    def rows(g, n):
        return [{"kind": "ack" if i else "progress", "topic": "t", "partition": i % 3,
                 "offset": 100 * g + i, "pass_id": g} for i in range(n)]

    append_rows(path, "audit_hot", rows(1, 4) + rows(2, 3))  # one file, generations 1-2
    for g in (3, 4):
        append_rows(path, "audit_hot", rows(g, 5))
    not_progress = pc.field("kind") != "progress"
    for g in (1, 2, 3, 4, 7):
        for where, columns in ((None, None), (not_progress, ["offset", "partition"])):
            match = pc.field("pass_id") == pa.scalar(g, pa.int64())
            whole = read_table(path, "audit_hot", columns,
                               match if where is None else match & where)
            with one_snapshot_each():
                assert read_admitting(path, "audit_hot", "pass_id", g, columns, where) \
                    .equals(whole)
    assert read_admitting(str(tmp_path / "absent"), "audit_hot", "pass_id", 1).num_rows == 0
    # generation 3's file gone: generation 4 is still read, alone
    from kafka_audit.store import live_files
    files = live_files(path)
    g3 = files.filter(pc.equal(files.column("max.pass_id"), 3)).column("path")[0].as_py()
    (tmp_path / "audit_hot" / g3).unlink()
    assert read_admitting(path, "audit_hot", "pass_id", 4).num_rows == 5
    # no statistic for the column: the caller must scan
    write_deltalake(str(tmp_path / "bare"), pa.table({"pass_id": pa.array([1], pa.int64())}),
                    configuration={"delta.dataSkippingNumIndexedCols": "0"})
    with pytest.raises(LookupError):
        read_admitting(str(tmp_path / "bare"), "audit_hot", "pass_id", 1)


def test_an_idempotent_append_writes_each_version_once(tmp_path):
    path = str(tmp_path / "dq_results")
    row = {"validated_at": pa.scalar(0, pa.timestamp("us", tz="UTC")).as_py(),
           "table_name": "acks", "table_version": 1, "expectation": "e", "success": True}
    assert append_once(path, "dq_results", [row], "app", 3)
    assert not append_once(path, "dq_results", [row], "app", 3)  # a replay writes nothing
    assert not append_once(path, "dq_results", [row], "app", 2)
    assert append_once(path, "dq_results", [row], "app", 4)
    assert not append_once(path, "dq_results", [], "app", 5)
    assert read_table(path, "dq_results").num_rows == 2


def test_a_table_an_older_version_wrote_grows_the_nullable_columns_added_since(tmp_path):
    """An upgrade that adds a nullable column keeps the warehouse: the table is grown in
    place, its older rows read the column as null, and rows spooled by the older version
    (without the column) still append."""
    from deltalake import DeltaTable

    from kafka_audit import store

    path = str(tmp_path / "acks")
    full = arrow_schema("acks")
    assert full.names[-2:] == ["broker", "system"]
    old = pa.schema(list(full)[:-2])  # before either was added
    row = {"run_id": "r", "producer_id": "p", "seq": 0, "count": 3, "topic": "t",
           "partition": 0, "offset": 10, "send_time": datetime(2026, 1, 1, tzinfo=UTC),
           "ack_time": datetime(2026, 1, 1, tzinfo=UTC),
           "last_ack_time": datetime(2026, 1, 1, tzinfo=UTC), "error_code": None,
           "error_name": None, "acks": "all", "idempotence": True, "retries": 2,
           "max_in_flight": 5, "leader_epoch": 4}
    write_deltalake(path, pa.Table.from_pylist([row], schema=old))
    version = DeltaTable(path).version()
    check_table(path, "acks")
    assert [f.name for f in DeltaTable(path).schema().fields] == full.names
    assert DeltaTable(path).version() == version + 1
    check_table(path, "acks")  # once per process, and nothing more to add
    store._CHECKED.discard(path)
    check_table(path, "acks")
    assert DeltaTable(path).version() == version + 1
    # a part in the older form (spooled before the upgrade) and one in the new
    write_arrow(path, "acks", pa.Table.from_pylist([{**row, "seq": 3}], schema=old))
    append_rows(path, "acks", [{**row, "seq": 6, "broker": 2, "system": "kafka"}])
    got = sorted(read_table(path, "acks", columns=["seq", "broker", "leader_epoch", "system"]
                            ).to_pylist(), key=lambda r: r["seq"])
    assert got == [{"seq": 0, "broker": None, "leader_epoch": 4, "system": None},
                   {"seq": 3, "broker": None, "leader_epoch": 4, "system": None},
                   {"seq": 6, "broker": 2, "leader_epoch": 4, "system": "kafka"}]


def test_a_table_missing_a_column_that_may_not_be_null_is_refused_not_grown(tmp_path):
    from deltalake import DeltaTable

    path = str(tmp_path / "acks")
    full = arrow_schema("acks")
    old = pa.schema([f for f in full if f.name not in ("max_in_flight", "leader_epoch",
                                                       "broker")])
    write_deltalake(path, old.empty_table())
    with pytest.raises(TableError, match="another version"):
        check_table(path, "acks")
    assert [f.name for f in DeltaTable(path).schema().fields] == old.names
    with pytest.raises(KeyError, match="max_in_flight"):
        write_arrow(str(tmp_path / "other"), "acks", old.empty_table())


def test_batches_an_older_version_spooled_commit_once_the_table_grew_or_create_it_whole(
        tmp_path):
    """The ledger's and the shipper's commit path (append_arrow_once) with batches in the
    older form: alone, and creating the table."""
    from deltalake import DeltaTable

    from kafka_audit.store import append_arrow_once

    full = arrow_schema("acks")
    old = pa.schema(list(full)[:-1])
    row = {"run_id": "r", "producer_id": "p", "seq": 0, "count": 1, "topic": "t",
           "partition": 0, "offset": 0, "send_time": datetime(2026, 1, 1, tzinfo=UTC),
           "ack_time": datetime(2026, 1, 1, tzinfo=UTC),
           "last_ack_time": datetime(2026, 1, 1, tzinfo=UTC), "acks": "1",
           "idempotence": False, "retries": 2, "max_in_flight": 5}
    fresh = str(tmp_path / "fresh")
    assert append_arrow_once(fresh, "acks", pa.Table.from_pylist([row], schema=old), "a", 1)
    assert [f.name for f in DeltaTable(fresh).schema().fields] == full.names
    grown = str(tmp_path / "grown")
    write_deltalake(grown, pa.Table.from_pylist([row], schema=old))
    check_table(grown, "acks")
    assert append_arrow_once(grown, "acks", pa.Table.from_pylist([{**row, "seq": 1}],
                                                                 schema=old), "a", 1)
    assert sorted(read_table(grown, "acks", columns=["seq", "broker"]).to_pylist(),
                  key=lambda r: r["seq"]) == [{"seq": 0, "broker": None},
                                              {"seq": 1, "broker": None}]


def test_a_reader_takes_an_older_table_as_it_is_and_grows_nothing(tmp_path):
    from deltalake import DeltaTable

    path = str(tmp_path / "acks")
    write_deltalake(path, pa.schema(list(arrow_schema("acks"))[:-1]).empty_table())
    check_table(path, "acks", grow=False)
    assert DeltaTable(path).version() == 0


def test_a_table_kept_between_contexts_is_brought_up_to_date_not_loaded_anew(tmp_path,
                                                                              monkeypatch):
    """Each ``one_snapshot_each`` context sees the newest version, and a thread's later
    context takes it from the table its last one loaded (its new commits read), so an
    audit pass or a ledger commit does not read the whole log again."""
    from kafka_audit import store

    path = str(tmp_path / "partition_state")
    rows = [{"topic": "t", "partition": 0, "observed_at": datetime(2026, 1, 1, tzinfo=UTC),
             "pass_id": 1, "frontier": 5, "settled_frontier": 5, "pending": 0, "unseen": 0}]
    append_once(path, "partition_state", rows, "app", 1)
    with one_snapshot_each():
        first = store._dt(path)
        assert read_table(path, "partition_state").num_rows == 1
        append_once(path, "partition_state", rows, "app", 2)
        assert first.version() == 1  # written through the loaded table, not by its path
        assert read_table(path, "partition_state").num_rows == 2
    write_deltalake(path, pa.Table.from_pylist(rows, schema=arrow_schema("partition_state")),
                    mode="append")  # another writer
    with one_snapshot_each():
        assert store._dt(path) is first
        assert read_table(path, "partition_state").num_rows == 3
        assert store.transaction_version(path, "app") == 2
    monkeypatch.setattr(store, "KEPT_IDLE_SECONDS", -1.0)  # unused too long: loaded anew
    with one_snapshot_each():
        assert store._dt(path) is not first
        assert read_table(path, "partition_state").num_rows == 3


def test_an_append_loaded_before_its_apps_own_commit_is_found_done(tmp_path):
    """A context loaded the table, then the same app's transaction was committed (another
    process of it): the append is refused by Delta's conflict check, read again and found
    done: neither an error nor a second copy."""
    from deltalake import CommitProperties, Transaction

    path = str(tmp_path / "acks")
    append_once(path, "acks", [ledger_row(0)], "X", 1)
    with one_snapshot_each():
        read_table(path, "acks")
        write_deltalake(path, pa.Table.from_pylist([ledger_row(2)], schema=arrow_schema("acks")),
                        mode="append",
                        commit_properties=CommitProperties(app_transactions=[Transaction("X", 2)]))
        assert append_once(path, "acks", [ledger_row(2)], "X", 2) is False
    assert read_table(path, "acks", ["seq"]).column("seq").to_pylist().count(2) == 1
