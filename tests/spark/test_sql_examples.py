"""The BI example queries (``deploy/sql/*.sql``) run as written in Spark SQL over the Delta
tables (``delta.`path```), with the same answers as DuckDB (tests/unit/test_api_sql.py),
on local disk and in a bucket of the S3 server."""

from datetime import date, datetime

from kafka_audit.storage import spark_uri
from tests.unit.test_api_sql import QUERIES, SQL, bi_warehouse, duckdb_answers, statements


def normal(value):
    """One form for both engines' values: naive UTC datetimes, floats rounded."""
    if isinstance(value, datetime):
        return value.replace(tzinfo=None) if value.tzinfo is None else \
            value.astimezone(tz=None).replace(tzinfo=None)
    if isinstance(value, float):
        return round(value, 3)
    if isinstance(value, date):
        return value
    return value


def test_the_example_queries_answer_the_same_in_spark_sql(spark, tmp_path):
    s = bi_warehouse(tmp_path)
    spark_answers_as(spark, s, duckdb_answers(s))


def test_the_example_queries_answer_alike_over_the_object_store(spark, s3_settings, tmp_path):
    """The tables in a bucket of the S3 server: DuckDB (through delta-rs and Arrow, offline)
    and Spark SQL (through S3A) answer as DuckDB does over the same tables on disk."""
    on_disk = duckdb_answers(bi_warehouse(tmp_path / "disk"))
    s = bi_warehouse(tmp_path, settings=s3_settings)
    assert not (s3_settings.home_dir / "warehouse").exists()
    answers = duckdb_answers(s)
    assert answers == on_disk
    spark_answers_as(spark, s, answers)


def spark_answers_as(spark, s, expected) -> None:
    """The example queries in Spark SQL over the warehouse of ``s``: ``expected`` each."""
    zone = spark.conf.get("spark.sql.session.timeZone")
    try:
        for stmt in statements("setup_spark.sql", spark_uri(s.warehouse_uri)):
            spark.sql(stmt)
        for q in QUERIES:
            rows = [tuple(r) for r in spark.sql((SQL / f"{q}.sql").read_text()).collect()]
            assert [tuple(map(normal, r)) for r in rows] == \
                [tuple(map(normal, r)) for r in expected[q]], q
    finally:
        spark.conf.set("spark.sql.session.timeZone", zone)
