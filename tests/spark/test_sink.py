"""``write_delta``: the driver (delta-rs) and Spark paths write the same table."""

import json
from datetime import UTC, datetime

import pandas as pd
from deltalake import DeltaTable

from kafka_audit.jobs.audit.hot_state import consumed_row
from kafka_audit.jobs.core.model import ReadRun
from kafka_audit.jobs.sink import write_delta
from kafka_audit.schemas.tables import column_names, spark_schema
from kafka_audit.store import read_table


def frame(spark, first: int, n: int):
    t = datetime(2026, 11, 22, 9, 0, tzinfo=UTC)
    rows = [consumed_row(ReadRun("t", p, first + 10 * i, 10, f"p{p}", "r", first + 10 * i, t,
                                 "stream", "record"), 7) for i in range(n) for p in (0, 1)]
    return spark.createDataFrame(pd.DataFrame(rows, columns=column_names("consumed")),
                                 spark_schema("consumed"))


def rows_of(path):
    return sorted(read_table(path, "consumed").to_pylist(), key=lambda r: (r["partition"],
                                                                           r["offset"]))


def marks(path):
    return [c.get("userMetadata") for c in reversed(DeltaTable(path).history())
            if c.get("operation") in ("WRITE", "CREATE TABLE AS SELECT")]


def test_driver_and_spark_writes_give_the_same_table(spark, tmp_path):
    driver, spark_path = str(tmp_path / "driver"), str(tmp_path / "spark")
    for path, limit in ((driver, 1000), (spark_path, 0)):
        assert write_delta(frame(spark, 0, 5), path, "consumed", limit,
                           user_metadata=json.dumps({"batch": 0})) == 10
        assert write_delta(frame(spark, 50, 3), path, "consumed", limit, rows=6,
                           user_metadata=json.dumps({"batch": 1})) == 6
        version = DeltaTable(path).version()
        assert write_delta(frame(spark, 0, 0), path, "consumed", limit) == 0
        assert DeltaTable(path).version() == version  # an empty append commits nothing
    assert rows_of(driver) == rows_of(spark_path)
    assert len(rows_of(driver)) == 16
    assert marks(driver) == marks(spark_path) == ['{"batch": 0}', '{"batch": 1}']
    # each path reads and appends to what the other wrote, and overwrites it
    write_delta(frame(spark, 100, 1), driver, "consumed", 0)
    write_delta(frame(spark, 100, 1), spark_path, "consumed", 1000)
    assert rows_of(driver) == rows_of(spark_path) and len(rows_of(driver)) == 18
    for path, limit in ((driver, 1000), (spark_path, 0)):
        write_delta(frame(spark, 200, 2), path, "consumed", limit, mode="overwrite")
        assert [r["offset"] for r in rows_of(path)] == [200, 210, 200, 210]
        assert spark.read.format("delta").load(path).count() == 4
