"""Tables left by an older version get the columns they lack, and keep their rows."""

import pyarrow as pa
from deltalake import DeltaTable, write_deltalake

from kafka_audit.jobs.io import Progress, read_table, upgrade_table
from kafka_audit.schemas.tables import arrow_schema, column_names


def test_an_older_table_gets_the_missing_columns_and_keeps_its_rows(tmp_path):
    path = str(tmp_path / "audit_hot")
    full = arrow_schema("audit_hot")
    old = pa.schema([f for f in full if f.name not in ("horizon", "progress", "pass_id")])
    write_deltalake(path, pa.Table.from_pylist(
        [{"kind": "ack", "topic": "t", "partition": 0, "seq": 5, "count": 2}], schema=old))

    assert upgrade_table(path, "audit_hot") == ["horizon", "progress", "pass_id"]
    assert [f.name for f in DeltaTable(path).schema().fields] == column_names("audit_hot")
    rows = read_table(path, "audit_hot").to_pylist()
    assert [(r["seq"], r["count"], r["horizon"], r["progress"], r["pass_id"]) for r in rows] \
        == [(5, 2, None, None, None)]
    assert upgrade_table(path, "audit_hot") == []  # nothing left to add
    assert [f.name for f in DeltaTable(path).schema().fields] == column_names("audit_hot")
    assert upgrade_table(str(tmp_path / "absent"), "audit_hot") == []


def test_the_latest_progress_row_names_the_committed_generation(tmp_path):
    from kafka_audit.jobs.io import append_rows, read_progress
    from kafka_audit.settings import Settings

    settings = Settings(home=tmp_path)
    path = settings.table_path("audit_hot")
    assert read_progress(settings) == Progress()

    def progress(pass_id, generation):
        return {"kind": "progress", "topic": "", "partition": -1, "pass_id": generation,
                "progress": Progress(pass_id, 7, 9).to_json()}

    # a table from before generations: one state, its rows without a pass id
    append_rows(path, "audit_hot", [progress(3, None), {"kind": "ack", "topic": "t",
                                                        "partition": 0}])
    assert read_progress(settings) == Progress(3, 7, 9, generation=None)
    append_rows(path, "audit_hot", [progress(4, 4)])  # the next pass appends its generation
    assert read_progress(settings) == Progress(4, 7, 9, generation=4)
    append_rows(path, "audit_hot", [progress(5, 5)])
    assert read_progress(settings).generation == 5
