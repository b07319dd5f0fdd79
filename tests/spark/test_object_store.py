"""The warehouse on a real S3-compatible server (s3proxy over a temporary folder): the table
layer answers there as it does on local disk, several processes appending to one table
at once lose and double nothing, and Delta Spark's commits there are as safe as delta-rs's.

The concurrent writers are the ack ledger's own commit path (``SpoolCommitter``: a spooled
segment appended as an idempotent Delta transaction), one process per producer host, each
with its own spool and no shared disk but the bucket.
"""

from __future__ import annotations

import collections
import multiprocessing
import time
from pathlib import Path

import pyarrow as pa
import pyarrow.compute as pc
import pytest
import yaml
from pyarrow.fs import FileSelector

from kafka_audit import storage, store
from kafka_audit.producers.ledger import SpoolCommitter
from kafka_audit.scenarios.object_store import S3Server
from kafka_audit.schemas.tables import arrow_schema, spark_schema
from kafka_audit.settings import Settings

from ..conftest import S3_PORT
from ..support.header_proxy import StrippingProxy
from ..support.rows import ledger_row

WRITERS, COMMITS, ROWS = 4, 20, 5
SPARK_COMMITS = 8  # Spark's appends beside 3 hosts' (a second or two each)


def _rows(producer: str, first_seq: int, n: int) -> pa.Table:
    rows = [{**ledger_row(first_seq + k), "producer_id": producer} for k in range(n)]
    return pa.Table.from_pylist(rows, schema=arrow_schema("acks"))


def _host(warehouse: str, storage: dict, home: str, producer: str, ready,
          staged: bool = False) -> dict:
    """One producer host: its own spool, committing COMMITS segments to the bucket's acks
    (``staged``: handing them over to the committer)."""
    s = Settings(home=home, warehouse=warehouse, storage=storage)  # registers the store
    spool = SpoolCommitter(s.table_path("acks"), Path(home) / "spool", f"{producer}/run",
                           staged=staged)
    assert spool.lock()
    first = spool.first_version()
    ready.wait(120)  # every host starts at once, when all have imported and locked
    for i in range(COMMITS):
        spool.spool(_rows(producer, i * ROWS, ROWS), first + i)
        spool.commit()
    for _ in range(50):  # a commit that failed kept its segment: flushed again
        if not spool.segments():
            break
        spool.commit()
    return {"app_id": spool.app_id, "last": first + COMMITS - 1, "left": len(spool.segments()),
            "failures": spool.write_failures, "rows": spool.rows_written}


def test_concurrent_ledger_writers_lose_and_double_nothing(s3_settings, tmp_path):
    acks = s3_settings.table_path("acks")
    store.write_arrow(acks, "acks", _rows("setup", 0, 1))  # version 0: the table exists
    ctx = multiprocessing.get_context("spawn")  # delta-rs refuses to run in a forked child
    with ctx.Manager() as manager, ctx.Pool(WRITERS) as pool:
        ready = manager.Barrier(WRITERS)
        results = pool.starmap(_host, [
            (s3_settings.warehouse_uri, s3_settings.storage.model_dump(mode="json")
             | {"secret_access_key": s3_settings.storage.secret()},
             str(tmp_path / f"host{n}"), f"host{n}", ready) for n in range(WRITERS)])
    assert [r["left"] for r in results] == [0] * WRITERS
    assert [r["rows"] for r in results] == [COMMITS * ROWS] * WRITERS
    latest = store.latest_version(acks)
    # one version a segment, after version 0; a commit that failed (its retries spent on
    # lost races, on a busy machine) kept its segment, committed with the next in one
    failed = sum(r["failures"] for r in results)
    assert WRITERS * COMMITS - failed <= latest <= WRITERS * COMMITS, (latest, failed)
    gaps = [v for v in range(latest + 1) if store._commit_actions(acks, v) is None]
    assert gaps == []
    t = store.read_table(acks, "acks", ["producer_id", "seq"])
    keys = set(zip(t.column("producer_id").to_pylist(), t.column("seq").to_pylist(),
                   strict=True))
    assert t.num_rows == len(keys) == 1 + WRITERS * COMMITS * ROWS  # none lost, none twice
    assert keys >= {(f"host{n}", seq) for n in range(WRITERS)
                    for seq in range(COMMITS * ROWS)}
    for r in results:  # each host's transaction names its last segment
        assert store.transaction_version(acks, r["app_id"]) == r["last"]
    print("commit retries after a lost race:", [r["failures"] for r in results])


def _history(path: str) -> dict:
    """What the table layer says of a table, in words that do not name where it is."""
    latest = store.latest_version(path)
    version, files, total = store.files_added_since(path, 0)
    return {"exists": store.table_exists(path), "latest": latest,
            "probe": store.probe_version(path, None), "probe_known": store.probe_version(path, 1),
            "added_since_0": (version, len(files), total),
            "rows_of_added": store.read_files(files, "acks", ["seq"]).num_rows,
            "appends": [(v, len(f)) for v, f in store.appends_by_commit(path, 0, latest)],
            "changes": store.data_changes_since(path, 0)[0],
            "commit_time": store.commit_time(path, latest) is not None,
            "max_seq": store.max_in_files(path, "seq"),
            "rows_at_seq_3": store.rows_in_files(path, "seq", 3),
            "read_at_seq_3": store.read_admitting(path, "acks", "seq", 3, ["seq"])
            .column("seq").to_pylist(),
            "seqs": sorted(store.read_table(path, "acks", ["seq"]).column("seq").to_pylist())}


@pytest.mark.parametrize("where", ["local", "s3"])
def test_the_table_layer_answers_alike_on_disk_and_on_the_object_store(where, s3_settings,
                                                                       tmp_path):
    path = s3_settings.table_path("acks") if where == "s3" else str(tmp_path / "w" / "acks")
    assert not store.table_exists(path) and store.probe_version(path, None) is None
    assert store.latest_version(path) == -1
    for i in range(4):
        assert store.append_once(path, "acks", [ledger_row(i * 2), ledger_row(i * 2 + 1)],
                                 "app", i)
    assert not store.append_once(path, "acks", [ledger_row(99)], "app", 3)  # once only
    assert _history(path) == {
        "exists": True, "latest": 3, "probe": 3, "probe_known": 3,
        "added_since_0": (3, 3, 6), "rows_of_added": 6,
        "appends": [(1, 1), (2, 1), (3, 1)], "changes": 3, "commit_time": True,
        "max_seq": 7, "rows_at_seq_3": 2, "read_at_seq_3": [3], "seqs": list(range(8))}
    metrics = store.compact(path)
    assert metrics["numFilesRemoved"] == 4 and metrics["numFilesAdded"] == 1
    # a compaction (version 4) changes no row: nothing appended since, the rows read alike
    assert store.files_added_since(path, 3) == (4, [], 0)
    assert sorted(store.read_table(path, "acks", ["seq"]).column("seq").to_pylist()) == \
        list(range(8))
    foot = store.footprint(path)
    assert (foot.version, foot.live_files, foot.data_files) == (4, 1, 5)
    assert foot.log_bytes > 0 and foot.data_bytes > foot.live_bytes > 0
    assert store.vacuum(path, retention_hours=0) == 4
    assert store.footprint(path).data_files == 1
    # the log before its checkpoint (the compaction wrote one at version 4) trimmed
    before = store.latest_version(path)
    assert store.trim_log(path, keep_hours=0, now=time.time() + 60) >= 4
    assert [store._commit_actions(path, v) is None for v in range(5)] == [True] * 4 + [False]
    assert store.latest_version(path) == store.probe_version(path, None) == before
    assert store.read_table(path, "acks", ["seq"]).num_rows == 8
    assert pc.max(store.read_table(path, "acks", ["seq"]).column("seq")).as_py() == 7


@pytest.mark.parametrize("where", ["local", "s3"])
def test_a_long_run_of_commits_reads_alike_in_order(where, s3_settings, tmp_path):
    """More commits than are read side by side at once on a bucket (the log's reads are
    concurrent there, one after another on disk): the same files, in commit order, a
    skipped app's commits left out, and a commit file gone told as such (None)."""
    path = s3_settings.table_path("acks") if where == "s3" else str(tmp_path / "w" / "acks")
    n = 2 * store._LOG_THREADS + 5
    for v in range(n):
        assert store.append_once(path, "acks", [ledger_row(v)],
                                 "skipped" if v % 7 == 3 else "app", v)
    version, files = store.data_changes_since(path, 1, ("skipped",))
    assert version == n - 1 == store.probe_version(path, 0) == store.probe_version(path, 1)
    seqs = store.read_files(sorted(store._data_file(path, f) for f in files), "acks",
                            ["seq"]).column("seq").to_pylist()
    assert sorted(seqs) == [v for v in range(2, n) if v % 7 != 3]
    appends = store.appends_by_commit(path, 1, n - 1)
    assert [v for v, _ in appends] == list(range(2, n))
    assert [store.read_files(f, "acks", ["seq"]).column("seq").to_pylist()
            for _, f in appends] == [[v] for v in range(2, n)]
    gone = store._commit_name(path, n - 3)  # a commit file gone between two reads
    storage.locate(gone).fs.delete_file(storage.locate(gone).path)
    assert store.appends_by_commit(path, 1, n - 1) is None


def test_the_probe_tells_a_sound_store(s3_settings):
    assert storage.probe(s3_settings.warehouse_uri) is None
    at = storage.locate(f"{s3_settings.warehouse_uri}/_kafka_audit_check")
    assert at.fs.get_file_info(FileSelector(at.path, allow_not_found=True)) == []  # cleaned


def test_the_probe_tells_a_store_that_ignores_conditional_writes(tmp_path):
    """A store that drops If-None-Match: an unsigned s3proxy (a signed request's headers
    cannot be dropped) behind a proxy that drops them."""
    server = S3Server(tmp_path / "s3", S3_PORT + 50, signed=False).start()
    try:
        bucket = server.bucket("unsound")
        with StrippingProxy(server.port) as proxy:
            Settings(home=tmp_path, warehouse=bucket, storage={
                **server.storage(), "endpoint_url": f"http://127.0.0.1:{proxy.port}"})
            said = storage.probe(bucket)
        Settings(home=tmp_path, warehouse=bucket, storage=server.storage())  # directly
        assert storage.probe(bucket) is None  # the store itself is sound
    finally:
        server.stop(discard=True)
    assert said is not None and "ignores If-None-Match" in said


@pytest.mark.parametrize("what", ["wrong secret", "no such bucket"])
def test_check_says_in_one_line_that_the_store_refuses(s3, tmp_path, monkeypatch, capsys,
                                                       what):
    from kafka_audit.app import cli
    from kafka_audit.settings import get_settings

    wrong = "wrong-" + s3.secret[::-1]
    bucket = s3.bucket("check-refused")
    config = {"home": str(tmp_path), "warehouse": f"{bucket}/w", "storage": {
        **s3.storage(), "secret_access_key": wrong if what == "wrong secret" else s3.secret}}
    if what == "no such bucket":
        config["warehouse"] = "s3://no-such-bucket-here/w"
    (tmp_path / "config.yaml").write_text(yaml.safe_dump(config))
    monkeypatch.setenv("KAFKA_AUDIT_CONFIG", str(tmp_path / "config.yaml"))
    get_settings.cache_clear()
    started = time.monotonic()
    assert cli.main(["check"]) == 2
    took = time.monotonic() - started
    out, err = capsys.readouterr()
    get_settings.cache_clear()
    assert out == "" and len(err.splitlines()) == 1 and "Traceback" not in err
    assert err.startswith("kafka-audit: ") and "the warehouse s3://" in err
    assert ("403 Forbidden SignatureDoesNotMatch): the secret access key is wrong"
            if what == "wrong secret" else "NoSuchBucket): the bucket does not exist") in err
    assert s3.secret not in err and wrong not in err
    assert took < 30, took


def test_the_api_answers_alike_from_the_object_store(s3_settings):
    """The REST API's own tests (tests/unit/test_api.py), asked of the same tables written
    to the object store: the API reads them through the table layer, never from a disk."""
    from fastapi.testclient import TestClient

    from kafka_audit.auditor_api.main import create_app

    from ..unit import test_api

    test_api.populate(s3_settings)
    client = TestClient(create_app(s3_settings), base_url="http://localhost")
    test_api.test_filters_and_order(client)
    test_api.test_summary_counts_writes_and_pending(client)
    test_api.test_pagination_by_cursor(client)
    test_api.test_time_range(client)
    assert not Path(s3_settings.home, "warehouse").exists()  # nothing went to the disk


def test_spark_commits_refuse_a_version_another_writer_made(spark, s3_settings):
    """Delta Spark's commits to the bucket go through ``ConditionalPutLogStore``: a commit
    file that exists is refused (Delta then retries at the next version), never
    overwritten; an overwrite asked for (``_last_checkpoint``) is done."""
    from py4j.protocol import Py4JJavaError

    table = s3_settings.table_path("spark_made")
    spark.range(3).write.format("delta").save(storage.spark_uri(table))
    jvm, conf = spark._jvm, spark._jsc.hadoopConfiguration()
    log_store = jvm.kafka_audit.spark.ConditionalPutLogStore(conf)
    first = jvm.org.apache.hadoop.fs.Path(
        storage.spark_uri(f"{table}/_delta_log/00000000000000000000.json"))
    before = store._commit_actions(table, 0)

    def write(line: str, overwrite: bool) -> None:
        lines = jvm.java.util.ArrayList()
        lines.add(line)
        log_store.write(first, lines.iterator(), overwrite, conf)

    with pytest.raises(Py4JJavaError) as refused:
        write('{"commitInfo":{}}', False)
    assert refused.value.java_exception.getClass().getName() == \
        "java.nio.file.FileAlreadyExistsException"
    assert store._commit_actions(table, 0) == before  # untouched
    scratch = jvm.org.apache.hadoop.fs.Path(storage.spark_uri(f"{table}/_scratch.json"))
    lines = jvm.java.util.ArrayList()
    lines.add('{"a":1}')
    log_store.write(scratch, lines.iterator(), False, conf)
    lines.add('{"b":2}')
    log_store.write(scratch, lines.iterator(), True, conf)
    at = storage.locate(f"{table}/_scratch.json")
    with at.fs.open_input_stream(at.path) as f:
        assert f.read() == b'{"a":1}\n{"b":2}\n'


def test_spark_and_delta_rs_writers_of_one_table_lose_nothing(spark, s3_settings, tmp_path):
    """Delta Spark in this process appends to ``acks`` while producer hosts (delta-rs, one
    process each) do: every commit is there once, with no gap and no row lost or doubled."""
    acks = s3_settings.table_path("acks")
    store.write_arrow(acks, "acks", _rows("setup", 0, 1))
    ctx = multiprocessing.get_context("spawn")
    hosts = WRITERS - 1
    with ctx.Manager() as manager, ctx.Pool(hosts) as pool:
        ready = manager.Barrier(hosts + 1)
        pending = pool.starmap_async(_host, [
            (s3_settings.warehouse_uri, s3_settings.storage.model_dump(mode="json")
             | {"secret_access_key": s3_settings.storage.secret()},
             str(tmp_path / f"host{n}"), f"host{n}", ready) for n in range(hosts)])
        schema = spark_schema("acks")
        frames = [spark.createDataFrame(_rows("spark", i * ROWS, ROWS).to_pylist(), schema)
                  for i in range(SPARK_COMMITS)]
        ready.wait(120)
        for df in frames:
            df.write.format("delta").mode("append").save(storage.spark_uri(acks))
        results = pending.get(600)
    assert [r["left"] for r in results] == [0] * hosts
    latest = store.latest_version(acks)
    assert latest == hosts * COMMITS + SPARK_COMMITS
    assert [v for v in range(latest + 1) if store._commit_actions(acks, v) is None] == []
    t = store.read_table(acks, "acks", ["producer_id", "seq"])
    keys = set(zip(t.column("producer_id").to_pylist(), t.column("seq").to_pylist(),
                   strict=True))
    assert t.num_rows == len(keys) == 1 + (hosts * COMMITS + SPARK_COMMITS) * ROWS
    assert {p for p, _ in keys} == {"setup", "spark", *(f"host{n}" for n in range(hosts))}


def test_a_spark_commit_that_loses_the_race_moves_to_the_next_version(spark, s3_settings):
    """The worst moment, made to happen: as Delta Spark sends its commit file of version 1,
    a producer host (delta-rs) commits version 1 first. Spark's create is refused and
    Delta commits at version 2; with Delta's own S3 log store (check, then an
    unconditional write) Spark's file would replace the host's and its rows would be lost
    without an error."""
    acks = s3_settings.table_path("acks")
    bucket = s3_settings.warehouse_uri[len("s3://"):].split("/")[0]
    store.write_arrow(acks, "acks", _rows("setup", 0, 1))
    interloped = []

    def before(method: str, path: str) -> None:
        if method == "PUT" and path.endswith("_delta_log/00000000000000000001.json") \
                and not interloped:
            interloped.append(path)
            store.write_arrow(acks, "acks", _rows("host", 0, ROWS))  # straight to the store

    with StrippingProxy(_port(s3_settings.storage.endpoint_url), strip=False,
                        before=before) as proxy:
        # this bucket's S3A file system (made at its first use) talks through the proxy
        spark._jsc.hadoopConfiguration().set(f"fs.s3a.bucket.{bucket}.endpoint",
                                             f"http://127.0.0.1:{proxy.port}")
        df = spark.createDataFrame(_rows("spark", 0, ROWS).to_pylist(), spark_schema("acks"))
        df.write.format("delta").mode("append").save(storage.spark_uri(acks))
    assert interloped  # the host did commit version 1 while Spark's commit was on its way
    assert store.latest_version(acks) == 2
    t = store.read_table(acks, "acks", ["producer_id"])
    assert sorted(collections.Counter(t.column("producer_id").to_pylist()).items()) == [
        ("host", ROWS), ("setup", 1), ("spark", ROWS)]


def _port(url: str) -> int:
    return int(url.rsplit(":", 1)[1])


def test_staged_hosts_and_one_committer_lose_and_double_nothing(s3_settings, tmp_path):
    """Producer hosts hand their segments over (``ledger_commits: staged``) while the
    service's committer commits every second: every row once, one commit a round, no
    commit lost to a race, each host's transaction at its last segment."""
    from kafka_audit.jobs.upkeep.staged_acks import StagedCommits

    acks = s3_settings.table_path("acks")
    ctx = multiprocessing.get_context("spawn")
    committer = StagedCommits(s3_settings)
    rounds = 0
    with ctx.Manager() as manager, ctx.Pool(WRITERS) as pool:
        ready = manager.Barrier(WRITERS)
        pending = pool.starmap_async(_host, [
            (s3_settings.warehouse_uri, s3_settings.storage.model_dump(mode="json")
             | {"secret_access_key": s3_settings.storage.secret()},
             str(tmp_path / f"host{n}"), f"host{n}", ready, True) for n in range(WRITERS)])
        while not pending.ready():
            committer.round()
            rounds += 1
            pending.wait(1)
        results = pending.get()
    committer.round()
    assert [(r["left"], r["failures"]) for r in results] == [(0, 0)] * WRITERS
    assert committer.failures == 0
    assert store.latest_version(acks) == committer.commits - 1 <= rounds
    assert committer.segments == WRITERS * COMMITS
    t = store.read_table(acks, "acks", ["producer_id", "seq"])
    keys = set(zip(t.column("producer_id").to_pylist(), t.column("seq").to_pylist(),
                   strict=True))
    assert t.num_rows == len(keys) == WRITERS * COMMITS * ROWS
    for r in results:
        assert store.transaction_version(acks, r["app_id"]) == r["last"]
    assert store.staged_segments(acks) == {}


def test_retention_on_the_object_store_keeps_every_total(s3_settings):
    """Retention's round (``jobs/upkeep/retention.py``) on the tables of
    tests/unit/test_retention.py written to the object store: the same rows go, the same
    totals are served, and a filtered read of the file it wrote again works."""
    from ..unit import test_retention as t

    t.warehouse(s3_settings)
    before = t.served(s3_settings)
    done = {d.table: d.rows for d in t.run_retention(s3_settings, now=t.NOW)}
    assert (done["acks"], done["consumed"], done["findings"]) == (4, 5, 4)
    assert t.served(s3_settings) == before
    found = store.read_table(s3_settings.table_path("findings"), "findings", ["kind"],
                             where=pc.field("kind") == "rejected")
    assert found.num_rows == 1
    assert not Path(s3_settings.home, "warehouse").exists()  # nothing went to the disk
