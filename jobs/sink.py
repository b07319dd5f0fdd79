"""Delta writes (and deletes) of Spark DataFrames, small ones committed from the driver
with delta-rs: besides the table layer (``kafka_audit/store.py``), the one path into the
tables.

Spark's Delta writer costs 0.4-0.9 s a write here whatever the size of the data:
a job, then the commit work on the driver (measured with Spark's event log over
``bench/audit_bench.py``'s tables; see docs/benchmarks.md). The range ledger keeps the
outputs of a consume micro-batch or an audit pass small (thousands of runs for
millions of records), so those are collected as Arrow and committed with
delta-rs, in tens of milliseconds. An output over ``spark.driver_rows`` rows (runs as many as
records: no batching, interleaved producers) goes through Spark's writer, so the
driver never holds more than that; a consume micro-batch up to ``spark.stream_rows``
offsets is streamed to delta-rs instead (:func:`write_stream`), record batches as they come.

Both paths write one commit, with the same ``userMetadata``, into tables of the
declared schema; the tables stay readable and writable by both engines. On an
object-store warehouse both create their commit files with ``If-None-Match: *``
(delta-rs itself; Spark through ``jobs/ConditionalPutLogStore.java``), so they may
commit to one table at once.
"""

from __future__ import annotations

import uuid
from collections.abc import Iterator

import pyarrow as pa

from kafka_audit.storage import spark_uri
from kafka_audit.store import forget, write_arrow, write_arrow_stream

__all__ = ["write_delta", "write_spark", "write_stream", "write_collected", "delete_where",
           "release", "ArrowBatches"]


def write_delta(df, path: str, table: str, max_driver_rows: int, *, rows: int | None = None,
                at_most: int | None = None, mode: str = "append",
                user_metadata: str | None = None) -> int:
    """Write ``df`` (columns of the declared ``table``) to the Delta table at ``path`` in
    one commit; return the rows written. ``rows``: the row count when the caller knows it
    (``df`` should then be cheap to compute twice, e.g. checkpointed); ``at_most``: a bound
    of it (a micro-batch's offsets), which at ``max_driver_rows`` or under sends ``df``
    through the driver in one Spark job; otherwise ``df`` is materialized once and
    counted. An empty append commits nothing."""
    if rows is None and at_most is not None and at_most <= max_driver_rows:
        if at_most == 0 and mode == "append":
            return 0
        return write_collected(pa.table(df.toArrow()), path, table, mode, user_metadata)
    checkpointed = None
    if rows is None:
        df = checkpointed = df.localCheckpoint(eager=True)
        rows = stored_rows(df)
    try:
        if rows == 0 and mode == "append":
            return 0
        if rows <= max_driver_rows:
            write_collected(pa.table(df.toArrow()), path, table, mode, user_metadata)
        else:
            write_spark(df, path, mode, user_metadata)
        return rows
    finally:
        if checkpointed is not None:
            release(checkpointed)


def write_spark(df, path: str, mode: str = "append", user_metadata: str | None = None) -> None:
    """Write ``df`` with Spark's Delta writer in one commit, computing it once (its job is
    the write), whatever its size; an empty append commits too."""
    writer = df.write.format("delta").mode(mode)
    if user_metadata is not None:
        writer = writer.option("userMetadata", user_metadata)
    if mode == "overwrite":  # the declared columns, as the delta-rs path writes them
        writer = writer.option("overwriteSchema", "true")
    forget(path)
    writer.save(spark_uri(path))


def write_stream(df, path: str, table: str, user_metadata: str | None = None) -> int:
    """Append ``df`` (columns of the declared ``table``) with delta-rs in one commit, its
    rows handed from Spark's tasks as they end (:class:`ArrowBatches`) and written as they
    come: the driver's Python holds what delta-rs has not written yet (a few record
    batches and the Parquet file it fills), never the whole; its JVM the results of the
    tasks not yet handed (up to ``spark.driver.maxResultSize``, 1 GiB by default).
    Returns the rows written; an empty append commits too. A commit refused by a
    concurrent one computes ``df`` again."""
    return write_arrow_stream(path, table, lambda: ArrowBatches(df), user_metadata)


class ArrowBatches:
    """The rows of ``df`` as Arrow record batches (``spark.sql.execution.arrow.
    maxRecordsPerBatch`` rows each), handed over as Spark's tasks end, in no set order,
    none kept here (``DataFrame.toArrow`` holds them all first). The JVM serves them as
    for ``toArrow`` (pyspark's ``_collect_as_arrow``, pinned with pyspark).

    The job starts here, in the caller's thread, with its properties (a streaming query's
    micro-batch: the query's stop cancels it), whichever thread then reads the batches
    (delta-rs reads them on one of its own). A failed job raises its error before the
    batches end: a reader of them never takes a part for the whole. :meth:`close` before
    the end cancels the job; Spark hands each task's batches over on its scheduler's
    thread, which waits while the reader is behind (a reader that never reads again stalls
    the driver's jobs until it is closed)."""

    def __init__(self, df) -> None:
        from pyspark.traceback_utils import SCCallSiteSync
        from pyspark.util import _create_local_socket

        self._sc = df.sparkSession.sparkContext
        self._tag = f"kafka-audit-stream-{uuid.uuid4().hex}"
        self._sc.addJobTag(self._tag)  # the serving thread made now takes the thread's tags
        try:
            with SCCallSiteSync(self._sc):
                port, secret, self._server = df._jdf.collectAsArrowToPython()
        finally:
            self._sc.removeJobTag(self._tag)
        self._sock = _create_local_socket((port, secret))
        self._ended = False

    def __iter__(self) -> Iterator[pa.RecordBatch]:
        from pyspark.errors.exceptions.captured import unwrap_spark_exception
        from pyspark.sql.pandas.serializers import ArrowCollectSerializer

        # the JVM's error, if the job failed, is raised here (as the stream's last item)
        for item in ArrowCollectSerializer().load_stream(self._sock):
            if isinstance(item, pa.RecordBatch):  # not the last item: the batches' order
                yield item
        self._ended = True
        self._sock.close()
        with unwrap_spark_exception():
            self._server.getResult()  # raises what the serving thread met, if anything

    def close(self) -> None:
        """Stop reading: the job, if still running, is cancelled, and the JVM's next write
        to the closed socket fails rather than waits."""
        if not self._ended:
            self._ended = True
            self._sc.cancelJobsWithTag(self._tag)
            self._sock.close()


def write_collected(rows: pa.Table, path: str, table: str, mode: str = "append",
                    user_metadata: str | None = None) -> int:
    """Write ``rows``, collected to the driver, as :func:`write_delta` writes a small
    DataFrame: one delta-rs commit, none for an empty append. Returns the rows written."""
    if rows.num_rows == 0 and mode == "append":
        return 0
    write_arrow(path, table, rows, mode, user_metadata)
    return rows.num_rows


def stored_rows(df) -> int:
    """The rows of ``df``, a DataFrame made by ``localCheckpoint``, counted over its stored
    blocks in one Spark job. ``df.count()`` plans an aggregate with a shuffle (two stages):
    0.48-0.86 s a consume micro-batch of 400-2,000 records against 0.08-0.43 s this way,
    idle here (four micro-batches each way, timed with a throw-away script around
    ``start_consume``); a micro-batch counts once, beside a load that shares the cores."""
    return int(df._jdf.queryExecution().toRdd().count())


def delete_where(spark, path: str, condition) -> None:
    """Delete the rows of the Delta table at ``path`` that ``condition`` (a Spark column)
    holds for, with Spark's Delta engine (one commit)."""
    from delta.tables import DeltaTable

    forget(path)
    DeltaTable.forPath(spark, spark_uri(path)).delete(condition)


def release(df) -> None:
    """Free the blocks behind a DataFrame made by ``localCheckpoint`` once nothing will read
    it again. Spark would keep them until the JVM's next full garbage collection noticed
    the DataFrame gone (``spark.cleaner.periodicGC.interval``: 30 min): in a process that
    runs a pass every few seconds, that is memory growing for half an hour."""
    try:
        plan = df._jdf.queryExecution().logical()
        if plan.getClass().getSimpleName() == "LogicalRDD":
            plan.rdd().unpersist(False)
    except Exception:  # noqa: BLE001 - freeing early is an optimisation, never a failure
        pass
