"""The BI example queries (``deploy/sql/*.sql``) run as written in DuckDB over the Delta
tables (delta-rs datasets registered in DuckDB: its delta extension downloads itself and
is absent offline), with the exact answers; the layouts document equals the declaration.
``tests/spark/test_sql_examples.py`` runs the same files in Spark SQL."""

from datetime import timedelta
from pathlib import Path

import duckdb

from kafka_audit.app.sql_layouts import layouts
from kafka_audit.storage import delta_options
from kafka_audit.store import append_rows, table_exists
from tests.unit.test_api_resources import T, event, finding, warehouse

SQL = Path(__file__).resolve().parents[2] / "deploy" / "sql"
QUERIES = ("loss_by_topic_and_day", "exposure_per_partition", "producers_at_risk")
TABLES = ("acks", "consumed", "cluster_events", "findings", "partition_state", "audit_hot")


def bi_warehouse(tmp_path, settings=None):
    """test_api_resources's warehouse (3000 acks=1 runs, 200 lost at a leader change; an
    acks=all producer with 7 lost), a dead pass's finding, and partition 1 exposed 7.5 s;
    under tmp_path, or where ``settings`` say."""
    s = warehouse(tmp_path, runs=3000, settings=settings)
    append_rows(s.table_path("findings"), "findings", [
        finding("lost", 500_000, 9, T, pass_id=2)])  # pass 2 never committed
    append_rows(s.table_path("consumed"), "consumed", [{
        "topic": "orders", "partition": 0, "offset": 0, "count": 100, "kafka_timestamp": T,
        "stamped": True, "stamp_error": None, "producer_id": "p", "run_id": "r", "seq": 0,
        "checksum_ok": True, "read_time": T, "batch_id": 0, "source": "stream",
        "status": "record", "leader_epoch": None}])
    append_rows(s.table_path("partition_state"), "partition_state", [{
        "topic": "orders", "partition": 0, "frontier": 100, "settled_frontier": 100,
        "observed_at": T, "pending": 0, "unseen": 0, "oldest_unseen": None, "pass_id": 1}])
    append_rows(s.table_path("cluster_events"), "cluster_events", [
        {**event(T, "isr_shrink", 2, 2, [2]), "partition": 1},
        {**event(T + timedelta(seconds=7.5), "isr_expand", 2, 2, [2, 3]), "partition": 1}])
    return s


def statements(name: str, warehouse: str) -> list[str]:
    text = (SQL / name).read_text().replace("{warehouse}", warehouse)
    body = "\n".join(line for line in text.splitlines() if not line.startswith("--"))
    return [s.strip() for s in body.split(";") if s.strip()]


def duckdb_answers(s) -> dict[str, list[tuple]]:
    from deltalake import DeltaTable

    con = duckdb.connect()
    for stmt in statements("setup_duckdb.sql", s.warehouse_uri):
        if "delta_scan" not in stmt:  # offline: the tables come from delta-rs instead
            con.execute(stmt)
    for table in TABLES:
        path = s.table_path(table)
        if table_exists(path):  # on disk or in a bucket: delta-rs reads both
            con.register(table, DeltaTable(
                path, storage_options=delta_options(path)).to_pyarrow_dataset())
    return {q: con.execute((SQL / f"{q}.sql").read_text()).fetchall() for q in QUERIES}


def test_the_example_queries_answer_exactly_in_duckdb(tmp_path):
    a = duckdb_answers(bi_warehouse(tmp_path))
    (loss,) = a["loss_by_topic_and_day"]
    assert loss[:5] == ("orders", T.date(), 207, 0, 2)  # the dead pass's 9 are not counted
    (exposed,) = a["exposure_per_partition"]
    assert exposed[:4] == ("orders", 1, 7.5, 1)
    at_risk = {(r[0], r[1]): r for r in a["producers_at_risk"]}
    p = at_risk[("p", "1")]
    assert (p[6], p[7], p[8], p[10], p[13]) == (300_000, True, True, 200, 0)
    safe = at_risk[("safe", "all")]  # listed for its loss: a violation of acks=all
    assert (safe[7], safe[8], safe[10], safe[13]) == (False, False, 7, 7)


def test_the_layouts_document_is_generated_from_the_declaration():
    assert (SQL / "TABLES.md").read_text() == layouts(), (
        "deploy/sql/TABLES.md is stale: python -m kafka_audit.app.sql_layouts > "
        "deploy/sql/TABLES.md")
