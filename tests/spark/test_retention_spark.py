"""Retention's commit (``store.commit_drop``) on a table Spark's Delta writer made, as the
consume job makes ``consumed``: the aged rows go, the rows their file keeps are written
again, and Spark reads the table and appends to it after."""

from datetime import UTC, datetime, timedelta

import pandas as pd
import pyarrow.compute as pc

from kafka_audit.jobs.audit.hot_state import consumed_row
from kafka_audit.jobs.core.model import ReadRun
from kafka_audit.jobs.sink import write_delta
from kafka_audit.schemas.tables import column_names, spark_schema
from kafka_audit.store import applied_round, commit_drop, plan_drop, read_table

OLD = datetime(2026, 10, 1, tzinfo=UTC)
NEW = datetime(2026, 11, 27, tzinfo=UTC)


def frame(spark, first: int, when: list[datetime]):
    rows = [{**consumed_row(ReadRun("t", 0, first + 10 * i, 10, "p", "r", first + 10 * i, t,
                                    "stream", "record"), 7), "read_time": t}
            for i, t in enumerate(when)]
    return spark.createDataFrame(pd.DataFrame(rows, columns=column_names("consumed")),
                                 spark_schema("consumed"))


def test_a_drop_on_a_table_spark_wrote(spark, tmp_path):
    path = str(tmp_path / "consumed")
    # one Spark file holding aged and recent rows, one all aged
    write_delta(frame(spark, 0, [OLD, OLD, NEW]).coalesce(1), path, "consumed", 0)
    write_delta(frame(spark, 100, [OLD]).coalesce(1), path, "consumed", 0)
    cutoff = NEW - timedelta(days=30)
    gone: list = []
    plan = plan_drop(path, "consumed", pc.field("read_time") < cutoff, "read_time", cutoff,
                     gone.append)
    assert sum(t.num_rows for t in gone) == 3 and len(plan.removed) == 2
    assert commit_drop(plan, 1, {"test": True}) == 3
    assert applied_round(path) == 1
    assert read_table(path, "consumed", ["offset"]).column("offset").to_pylist() == [20]
    # a string filter reads the file written again (plain strings, not string_view)
    assert read_table(path, "consumed", where=pc.field("source") == "stream").num_rows == 1
    write_delta(frame(spark, 200, [NEW]).coalesce(1), path, "consumed", 0)
    assert spark.read.format("delta").load(path).count() == 2
