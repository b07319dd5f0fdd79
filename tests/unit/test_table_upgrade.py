"""Tables left by an older version get the columns they lack, and keep their rows."""

import pyarrow as pa
from deltalake import DeltaTable, write_deltalake

from kafka_audit.jobs.io import read_table, upgrade_table
from kafka_audit.schemas.tables import arrow_schema, column_names


def test_an_older_table_gets_the_missing_columns_and_keeps_its_rows(tmp_path):
    path = str(tmp_path / "audit_hot")
    full = arrow_schema("audit_hot")
    old = pa.schema([f for f in full if f.name not in ("horizon", "progress")])
    write_deltalake(path, pa.Table.from_pylist(
        [{"kind": "ack", "topic": "t", "partition": 0, "seq": 5, "count": 2}], schema=old))

    assert upgrade_table(path, "audit_hot") == ["horizon", "progress"]
    assert [f.name for f in DeltaTable(path).schema().fields] == column_names("audit_hot")
    rows = read_table(path, "audit_hot").to_pylist()
    assert [(r["seq"], r["count"], r["horizon"], r["progress"]) for r in rows] == [
        (5, 2, None, None)]
    assert upgrade_table(path, "audit_hot") == []  # nothing left to add
    assert [f.name for f in DeltaTable(path).schema().fields] == column_names("audit_hot")
    assert upgrade_table(str(tmp_path / "absent"), "audit_hot") == []
