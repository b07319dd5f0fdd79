"""Consume job: what is really in the audited topics, into the ``consumed`` table.

* source: Spark Kafka source, reaching the cluster through the connection
  profile, ``subscribePattern`` (default: the audited topics, :func:`audited_pattern`:
  the profile's include/exclude patterns, or else the topics the instrumented
  producers wrote to, from the ack ledger; never a topic starting with ``_``
  unless included by name), ``startingOffsets=earliest``,
  ``includeHeaders=true``, ``failOnDataLoss=false`` (truncated offsets are what we
  audit, not an error);
* sink: ``<warehouse>/consumed`` (Delta), one row per run of records
  (:func:`~kafka_audit.jobs.consume.transforms.fold_read_runs`: one pass per task on the
  JVM, equal to the SQL definition in ``read_runs``; each task reads its micro-batch's
  offset ranges with the source's consumers and folds the Kafka client's records, never
  the rows the source would make of them), appended in ``foreachBatch``
  (with delta-rs: collected to the driver in one Spark job when the batch's offsets
  are few, else streamed from the tasks as they end; over ``spark.stream_rows``
  offsets with Spark's Delta writer: :func:`_write_fold`);
  each commit names its query and batch in Delta's ``userMetadata``;
* exactly once: Spark re-runs a micro-batch only when the process died after its
  sink ran and before the checkpoint recorded it, so only the first batch a run
  executes can be a replay. That one is skipped if the table's history already holds
  this query's commit of it. (Delta's own idempotent append, ``txnAppId``, rebuilds the
  table state for every commit: 0.4-0.5 s a micro-batch here, measured);
* checkpoint: ``<home>/checkpoints/consume``, or ``<warehouse>/_checkpoints/consume`` in
  an object store (``Settings.checkpoint_uri``);
* trigger: ``processingTime`` every ``spark.consume_trigger_seconds``, or
  ``availableNow`` with ``--once`` (read to the current end, then stop);
* outages: :func:`run_consume` restarts a query that stopped on an error (every
  broker unreachable for longer than the Kafka source retries) with a capped
  doubling wait, logged once when it starts failing and once when it reads
  again; ``<home>/status/consume.json`` holds the last progress and the offset of
  each partition its last micro-batch committed (health measures the lag with them
  against the log ends the watcher samples: :func:`kafka_audit.status.consume_lag`;
  Spark's own figure, the latest offsets it knew when it planned the last batch, says
  0 for as long as the next batch runs, however far behind it is);
* stop: the query is stopped between micro-batches when it can be (a batch running
  then is interrupted, and re-run at the next start: the checkpoint has not recorded
  it); the interruption's errors are expected then, and said in one line.

Command: ``kafka-audit consume [--once] [--topics PATTERN]``.
"""

from __future__ import annotations

import json
import logging
import threading
import time
from collections.abc import Callable
from pathlib import Path

from kafka_audit.jobs.consume.transforms import fold_read_runs, offset_span
from kafka_audit.jobs.sink import write_delta, write_spark, write_stream
from kafka_audit.jobs.spark import raise_if_jvm_died
from kafka_audit.profile import spark_kafka_options, topic_pattern
from kafka_audit.schemas.systems import kafka_topics
from kafka_audit.settings import Settings
from kafka_audit.store import check_table, commit_metadata

__all__ = ["start_consume", "run_consume", "consume_app_id", "last_batch_written",
           "stop_quietly", "Backlog", "QUERY_NAME", "DEFAULT_PATTERN"]

log = logging.getLogger(__name__)

QUERY_NAME = "kafka_audit_consume"
#: every topic whose name does not start with "_" (internal and the auditor's own topics).
#: Anchored: Spark finds a subscribe pattern anywhere in a name, so "[^_].*" alone
#: matched "_kafka_audit_probe" from its second character
DEFAULT_PATTERN = "^[^_].*$"


#: seconds after the consume thread last said its query runs (every 2 s at most; as often
#: as it looks for new topics, ``spark.topic_refresh_seconds``, if less) that
#: a query still starting no longer holds the passes
BEAT_STALE = 10.0


class Backlog:
    """What the consume query's last micro-batch left to read: the records Spark knew were
    in the topics past the batch's end when it planned it (0: it read to the end it knew,
    or the query is failing; None: the query started, by the service or again after an
    error or on new topics, and no batch it planned has ended yet: a batch planned before
    a restart and run again after it says nothing), and whether that is fewer than the
    batch before left, or the query's first batch left it (the reading gains on it).
    ``kafka-audit run``'s audit loop reads it
    (:func:`~kafka_audit.jobs.audit.audit_job.run_audit_loop`): while a backlog is read its
    passes wait, and the reading has the machine."""

    def __init__(self) -> None:
        # one tuple, set by the consume thread, read by the audit loop's: never torn
        self._state: tuple[int | None, bool] = (None, False)
        # while a backlog is read: since when (time.monotonic()) and the records read
        self._reading: tuple[float, int] | None = None
        # when the consume thread last said its query runs (time.monotonic())
        self._beat_at = float("-inf")

    def update(self, records: int | None, detail: dict | None = None) -> str | None:
        """The latest micro-batch's progress left ``records`` to read (None: it does not
        say, as a batch planned before a restart and run again after it: the state stays
        as it was). ``detail``: the batch's progress (:func:`_progress_detail`); with it,
        returns the line to log, if any: each batch that leaves records to read (a
        catch-up after an outage, or a rate the reading does not keep up with), and the
        batch that ends a backlog, with the records and seconds from the first batch of
        this query that left records to read (a failed query's reading is not summed)."""
        if records is None:
            return None
        # a query's first batch that leaves records gains on them until a later one says
        # otherwise: its backlog may have taken longer than steady.backlog_pass_seconds to
        # plan and read (a 10-minute outage's, bench/catchup.py), and a pass begun then
        # judged beside the rest of the reading
        before = self._state[0]
        self._state = (records, 0 < records and (before is None or records < before))
        if detail is None:
            return None
        read = detail.get("records") or 0
        if records > 0:
            since, total = self._reading or (time.monotonic() - detail["seconds"], 0)
            self._reading = (since, total + read)
            return (f"consume: batch {detail['batch']} read {read:,} records in "
                    f"{detail['seconds']:.1f} s ({detail['sink_seconds']:.1f} s of it "
                    f"folding and committing); {records:,} left to read")
        if self._reading is None:
            return None
        since, total = self._reading
        self._reading = None
        took = time.monotonic() - since
        return (f"consume: backlog read: {total + read:,} records in {took:.1f} s "
                f"({(total + read) / max(took, 1e-3):,.0f}/s), up to the log ends of "
                f"batch {detail['batch']}'s planning")

    def reset(self, known: bool = True) -> None:
        """Nothing to wait for (``known``: the query is not reading), or unknown again (a
        query started, before its first progress)."""
        self._state = (0 if known else None, False)
        self._reading = None
        if not known:
            self.beat()

    def beat(self) -> None:
        """The consume thread's query runs (it says so every few seconds)."""
        self._beat_at = time.monotonic()

    def starting(self) -> bool:
        """Whether a query the consume thread still runs has not yet ended a batch it
        planned (what is left: unknown): its first batch may take minutes after an
        outage, and passes wait for it. False once the thread has not said it runs for
        :data:`BEAT_STALE` seconds (it died, or hangs outside its query)."""
        return self._state[0] is None and time.monotonic() - self._beat_at < BEAT_STALE

    def state(self) -> tuple[int | None, bool]:
        """(records left, or None if unknown; whether the reading gains on them)."""
        return self._state


class LedgerTopics:
    """The topics the ack ledger holds, kept from one look to the next: a look reads the
    topic column of the files appended since the last one, not the whole ledger (the
    consume job looks every ``spark.topic_refresh_seconds``, and a day's ledger at 5,000
    msg/s is millions of rows). ``files_read`` and ``full_reads`` count the two kinds of
    read (for tests)."""

    def __init__(self, path: str) -> None:
        self.path, self.version, self.topics = path, -1, set()
        self.files_read = self.full_reads = 0

    def read(self) -> set[str]:
        from kafka_audit.store import (
            files_added_since,
            latest_version,
            read_file,
            read_table,
            table_exists,
        )

        if not table_exists(self.path) or latest_version(self.path, self.version) == \
                self.version:
            return self.topics
        try:
            version, files, _ = files_added_since(self.path, self.version)
            for f in files:  # topics are never removed: what was seen stays
                self.topics.update(kafka_topics(
                    read_file(f, columns=["topic"]).column("topic").unique().to_pylist()))
            self.files_read += len(files)
        except Exception as exc:  # noqa: BLE001 - a file vacuumed meanwhile: read it all
            log.info("ledger topics read whole (%s)", exc)
            version = latest_version(self.path)
            ledger = read_table(self.path, "acks", columns=["topic"], version=version)
            self.topics = kafka_topics(ledger.column("topic").unique().to_pylist())
            self.full_reads += 1
        self.version = version
        return self.topics


def audited_pattern(settings: Settings, ledger: LedgerTopics | None = None) -> str:
    """The subscribe pattern of the audited topics: the profile's ``topics.include``
    patterns less its ``exclude`` ones, or, with no ``include``, the topics the ack ledger
    holds (a pattern naming each; it grows as producers write to new topics), as
    ``ledger`` has seen them (a fresh read without). Topics starting with ``_`` are
    audited only when an include pattern names them."""
    from kafka_audit.profile import audited, topic_pattern

    sel = settings.profile.topics
    if sel.include:
        inc = "|".join(f"(?:{p})" for p in sel.include)
        exc = "|".join(f"(?:{p})" for p in sel.exclude)
        return f"^(?!(?:{exc})$)(?:{inc})$" if exc else f"^(?:{inc})$"
    ledger = ledger or LedgerTopics(settings.table_path("acks"))
    return topic_pattern(audited(sel, sorted(ledger.read())))


def consume_app_id(settings: Settings) -> str:
    """The consume query's name in the commits it writes (one per checkpoint)."""
    return f"{QUERY_NAME}:{settings.checkpoint_uri('consume')}"


def _marker(app_id: str, batch_id: int) -> str:
    return json.dumps({"app": app_id, "batch": batch_id})


def last_batch_written(table: str, app_id: str) -> int | None:
    """The last micro-batch of query ``app_id`` committed to ``table`` (newest commit first;
    None if it never wrote one)."""
    for meta in commit_metadata(table):
        try:
            mark = json.loads(meta or "null")
        except ValueError:
            continue
        if isinstance(mark, dict) and mark.get("app") == app_id:
            return int(mark["batch"])
    return None


def start_consume(spark, settings: Settings, pattern: str | None = None, once: bool = False,
                  on_commit: Callable[[], None] | None = None,
                  halting: threading.Event | None = None):
    """Start the consume query on ``pattern`` (default: :func:`audited_pattern`); return the
    StreamingQuery. ``on_commit`` is called after each micro-batch committed to the table
    (``kafka-audit run`` wakes the audit loop with it). ``halting`` is set before the query
    is stopped: a micro-batch the stop interrupts then fails with a short
    :class:`BatchInterrupted`, which Spark takes for the interruption it is."""
    from kafka_audit.stamp_key import stamp_mac

    _quiet_expected_interruptions()
    pattern = pattern or audited_pattern(settings)
    table = settings.table_path("consumed")
    check_table(table, "consumed")
    app_id = consume_app_id(settings)
    mac = stamp_mac(settings)  # the stamp key, read once a query: a stamp without its MAC
    # is forged (None: no key)
    first = [True]

    def write_batch(batch_df, batch_id: int) -> None:
        if halting is not None and halting.is_set():
            # stopping: a batch that has not begun its work is not begun (no task to
            # interrupt); failed, it is not committed and is read again at the next start
            raise BatchInterrupted(f"micro-batch {batch_id} not started: the query is stopping")
        if first[0]:
            first[0] = False
            done = last_batch_written(table, app_id)
            if done is not None and done >= batch_id:
                log.warning("consume batch %d was written before a restart: not again",
                            batch_id)
                return
        began = time.monotonic()
        try:
            how = _write_fold(batch_df, batch_id, mac, table, settings.spark.driver_rows,
                              settings.spark.stream_rows, _marker(app_id, batch_id))
            # a batch over spark.driver_rows (a catch-up's) is rare and slow: say how
            (log.debug if how in ("bounded", "counted") else log.info)(
                "consume batch %d written (%s) in %.1f s", batch_id, how,
                time.monotonic() - began)
        except Exception as exc:
            raise _interruption(exc, halting) from None
        if on_commit is not None:
            on_commit()

    source = (
        spark.readStream.format("kafka")
        # a request to a broker that is up but not serving yet (restarting after a crash)
        # waits out request.timeout.ms (30 s by default) before the client asks another: the
        # whole micro-batch with it, and every loss of that fault for as long. The profile's
        # java properties (below) override these
        .option("kafka.request.timeout.ms", "2000")
        # the driver asks each micro-batch's end offsets with an admin client whose call,
        # once its partition's leader is SIGKILLed, keeps trying that dead node until this
        # timeout, however soon a new leader is elected: with 15 s here every leader kill
        # stalled the stream (and delayed its losses) 15 s (bench/latency.py), with 5 s a
        # kill of the leader that was also the active controller (elected 7-9 s later)
        # waited out two calls: its first read came 11-13 s after the kill. A call that
        # fails is made again half a second later (fetchOffset.retryIntervalMs) by a new
        # admin client, with fresh metadata, up to fetchOffset.numRetries times (20: about
        # 50 s) before the query fails (and is restarted). On the executors the same
        # timeout bounds a consumer's wait for a partition's position; a task that fails on
        # it is tried again (spark.local_task_attempts), not the whole micro-batch
        .option("kafka.default.api.timeout.ms", "2000")
        .option("fetchOffset.numRetries", "20")
        .option("fetchOffset.retryIntervalMs", "500")
        .options(**spark_kafka_options(settings.profile, settings.cluster.bootstrap))
        .option("subscribePattern", pattern)
        .option("startingOffsets", "earliest")
        .option("includeHeaders", "true")
        .option("failOnDataLoss", "false")
        .option("maxOffsetsPerTrigger", settings.spark.max_offsets_per_trigger)
        # find new topics and partitions quickly
        .option("kafka.metadata.max.age.ms", "2000")
        .load()
    )
    writer = (source.writeStream.queryName(QUERY_NAME).foreachBatch(write_batch)
              .option("checkpointLocation", settings.checkpoint_uri("consume")))
    if once:
        writer = writer.trigger(availableNow=True)
    else:
        writer = writer.trigger(processingTime=f"{settings.spark.consume_trigger_seconds} seconds")
    return writer.start()


def _write_fold(batch_df, batch_id: int, mac, table: str, driver_rows: int, stream_rows: int,
                marker: str) -> str:
    """Fold the micro-batch ``batch_df`` and append its rows to ``table`` in one commit;
    return how: ``bounded``, ``streamed``, ``written`` or ``counted``.

    Its offsets (:func:`offset_span`) bound its rows: at ``driver_rows`` or under they are
    collected to the driver in one Spark job and committed with delta-rs (``bounded``); up
    to ``stream_rows`` (a catch-up's batches: producers interleave, a row a record) they
    are handed from the tasks to delta-rs as Arrow record batches as the tasks end
    (``streamed``: :func:`~kafka_audit.jobs.sink.write_stream`), so the driver's Python never
    holds the whole; over it, or when the streamed tasks' results outgrow
    ``spark.driver.maxResultSize``, they go through Spark's Delta writer (``written``). Through
    Spark's writer a catch-up read at 0.43x a bare read, its first batch after the restart
    69 s (28 s of it Delta's snapshot of the table before the write and its jobs after the
    commit), the next ones 13-17 s; streamed 0.78x (``bench/catchup.py``, docs/benchmarks.md:
    a cold write through delta-rs pays none of that). A batch whose offsets are not
    known is counted first (``counted``)."""
    span = offset_span(batch_df)
    folded = fold_read_runs(batch_df, batch_id, mac, source=True)
    if span is None or span <= driver_rows:
        write_delta(folded, table, "consumed", driver_rows, at_most=span, user_metadata=marker)
        return "counted" if span is None else "bounded"
    if span <= stream_rows:
        try:
            write_stream(folded, table, "consumed", user_metadata=marker)
            return "streamed"
        except Exception as exc:
            # the tasks' results over spark.driver.maxResultSize (ids far longer than a
            # catch-up's): Spark's writer, which hands nothing to the driver, every time
            if "maxResultSize" not in str(exc):
                raise
            log.warning("consume batch %d: its rows outgrow spark.driver.maxResultSize "
                        "when streamed (spark.stream_rows %d); written through Spark",
                        batch_id, stream_rows)
    write_spark(folded, table, user_metadata=marker)
    return "written"


def run_consume(spark, settings: Settings, pattern: str | None = None, once: bool = False,
                stop: threading.Event | None = None,
                on_commit: Callable[[], None] | None = None,
                backlog: Backlog | None = None) -> None:
    """Run the consume query until ``stop`` (or, with ``once``, until it has read to the
    end), restarting it after an error; its progress goes to the status file. Without a
    ``pattern``, the audited topics are looked up every ``spark.topic_refresh_seconds``:
    when they change (a producer wrote to a new topic), the query restarts on the new
    pattern from its checkpoint (the new topic's partitions start at their beginning).
    ``on_commit``: see :func:`start_consume`; ``backlog`` is kept up to date with each
    progress (:class:`Backlog`)."""
    from kafka_audit.stamp_key import stamp_mac
    from kafka_audit.status import Outage, StatusWriter

    stamp_mac(settings)  # a stamp key file that is no key: an error now, not an outage
    stop = stop or threading.Event()
    if backlog is not None:
        backlog.reset(known=False)  # unknown until this run's first progress
    restarts = 0  # queries started again after an error, shown in the status file
    # how often the query's state and, without a pattern, the ledger's topics are looked at:
    # every 2 s the look at the topics came 2-4 s apart, the new topic's reading up to 4 s
    # after its first acks were in the ledger (40,000 msg/s: 160,000 records behind more)
    glance = 2.0 if pattern is not None else min(2.0, settings.spark.topic_refresh_seconds)
    outage = Outage("consume", StatusWriter(settings.home_dir, "consume"), log,
                    settings.outage.retry_seconds, settings.outage.max_backoff_seconds)
    ledger = LedgerTopics(settings.table_path("acks"))

    def nothing_to_read() -> bool:
        return audited_pattern(settings, ledger) == topic_pattern([])

    if not once and settings.spark.warm_up and pattern is None and nothing_to_read():
        # the first batch is a new topic's; the warm-up ends when one comes
        _warm_up(spark, settings, lambda: stop.is_set() or not nothing_to_read())
    while not stop.is_set():
        query = None
        try:
            current = pattern or audited_pattern(settings, ledger)
            halting = threading.Event()  # set before this query is stopped
            if backlog is not None:
                # unknown again until this query's first batch: after an error, a batch
                # interrupted then is run again first and says nothing of what is left
                backlog.reset(known=False)
            query = start_consume(spark, settings, current, once=once, on_commit=on_commit,
                                  halting=halting)
            seen, looked = None, time.monotonic()
            changed = None  # the progress seen when the audited topics were found changed
            while not stop.is_set():
                # raises the query's error, if it failed; often while a restart waits for
                # the gap between two micro-batches
                done = query.awaitTermination(0.25 if changed else glance)
                if backlog is not None:
                    backlog.beat()
                progress = query.lastProgress
                if progress is not None and progress["timestamp"] != seen:
                    seen = progress["timestamp"]
                    detail = _progress_detail(progress)
                    if backlog is not None and \
                            (line := backlog.update(detail["behind"], detail)):
                        log.info(line)
                    outage.succeeded(restarts=restarts, **detail)
                elif progress is None and backlog is not None and backlog.state()[0] is None \
                        and _idle(query):
                    backlog.reset()  # no batch to wait for: nothing to read yet
                if done:
                    if once:
                        return  # read to the end
                    raise RuntimeError("the consume query stopped")  # restarted below
                if changed and _between_batches(query, changed[0], seen):
                    log.warning("consume: the audited topics changed; restarting on them")
                    halting.set()
                    query.stop()
                    break
                if pattern is None and not changed and time.monotonic() - looked > \
                        settings.spark.topic_refresh_seconds:
                    looked = time.monotonic()
                    if audited_pattern(settings, ledger) != current:
                        changed = (seen,)
            else:
                stop_quietly(spark, query, halting)
                return
        except Exception as exc:  # noqa: BLE001 - restarted after a wait, never dies of it
            if backlog is not None:
                backlog.reset()  # not reading: the passes need not wait for it
            if once:
                raise
            raise_if_jvm_died(spark, exc)  # but of its JVM: the service gives it a new one
            if query is not None:
                halting.set()
                try:
                    query.stop()
                except Exception:  # noqa: BLE001 - it is being replaced anyway
                    pass
            stop.wait(outage.failed(exc))
            restarts += 1


#: how a query's status message begins while it starts, before its first trigger (Spark's
#: StreamExecution: "Initializing StreamExecution", "Initializing sources"), its two flags
#: off as when a trigger found nothing to read ("Waiting for data to arrive", then
#: "Waiting for next trigger" until the next)
STARTING = "Initializing"


def _idle(query) -> bool:
    """Whether a query that has run no batch yet waits for data (none to read). Its flags
    alone said so while it was still starting, before its first look: after an outage
    that let the audit's first pass begin with the whole backlog unread beside the
    reading (bench/catchup.py, 2026-12-01: a 143 s pass over 9.2 M pending writes)."""
    try:
        status = query.status
        return not status["isDataAvailable"] and not status["isTriggerActive"] \
            and not status["message"].startswith(STARTING)
    except Exception:  # noqa: BLE001 - the query is ending: its error comes next
        return False


def _between_batches(query, seen_then, seen_now) -> bool:
    """Whether a query may be stopped without throwing away a micro-batch's work: no
    batch runs now, or one has ended since ``seen_then`` (the next just began: little
    lost). A restart on new topics waits for this: one that interrupted a running batch
    made it start over, and topics appearing faster than a batch of a backlog took would
    have starved the stream."""
    if seen_now != seen_then:
        return True
    try:
        return not query.status["isTriggerActive"]
    except Exception:  # noqa: BLE001 - the query is ending: its error comes next
        return True


_warmed: set[int] = set()  # the JVMs (by their py4j gateway's id) the warm-up ran in


def _warm_up(spark, settings: Settings, until: Callable[[], bool]) -> None:
    """:func:`~kafka_audit.jobs.consume.transforms.warm_up_fold` in a micro-batch of its own
    (:func:`_one_batch`), once a JVM, ``WARM_UP_ROUNDS`` rounds or until ``until()`` (a topic to
    read, or the stop: checked between rounds); never fatal: the first batch is only slower
    without it. Of a new topic's first micro-batch beside a 40,000 msg/s load, Java Flight
    Recorder showed the JIT compiling the fold of the client's records and the client's record
    decoding, which a fold of rows never ran; and about 1.5 s passed between the batch's start
    in Spark (its ``addBatch``, in Spark's event log) and the first line of its Python function
    (a temporary log line, once): the first call of a ``foreachBatch`` (docs/benchmarks.md, the
    sustained rows of 2026-12-04)."""
    from kafka_audit.jobs.consume.transforms import WARM_UP_ROUNDS, warm_up_fold
    from kafka_audit.stamp_key import stamp_mac

    jvm = id(spark.sparkContext._gateway)
    if jvm in _warmed:
        return
    _warmed.add(jvm)
    t = time.monotonic()
    folded: list[int] = []
    try:
        mac = stamp_mac(settings)
        _one_batch(spark, settings, lambda batch, _id: folded.append(
            warm_up_fold(batch.sparkSession, mac, WARM_UP_ROUNDS, until)))
    except Exception as exc:  # noqa: BLE001 - a warm-up only
        log.warning("consume: the warm-up failed (the first micro-batch is slower): %s",
                    str(exc).splitlines()[0][:300] if str(exc) else type(exc).__name__)
        return
    log.info("consume: warmed up in %.1fs (%d made-up records folded)",
             time.monotonic() - t, sum(folded))


def _one_batch(spark, settings: Settings, work: Callable) -> None:
    """Run ``work`` as the ``foreachBatch`` function of a streaming query of one
    micro-batch (a file of one row, read once), as a micro-batch of the consume query runs:
    the query's start, its planning, the call into Python and a session of the batch's own
    are warmed with it. Its files are thrown away after."""
    import shutil
    import tempfile

    import pyarrow as pa
    import pyarrow.parquet as pq

    settings.home_dir.mkdir(parents=True, exist_ok=True)
    folder = Path(tempfile.mkdtemp(prefix="warm-up-", dir=settings.home_dir))
    try:
        (folder / "in").mkdir()
        pq.write_table(pa.table({"n": [0]}), folder / "in" / "one.parquet")
        query = (spark.readStream.schema("n long").parquet(str(folder / "in"))
                 .writeStream.foreachBatch(work).trigger(availableNow=True)
                 .option("checkpointLocation", str(folder / "checkpoint")).start())
        if not query.awaitTermination(600):
            query.stop()
            raise TimeoutError("the warm-up query ran 600 s")
    finally:
        shutil.rmtree(folder, ignore_errors=True)


class BatchInterrupted(Exception):  # noqa: N818 - named for what happened, not "Error"
    """Raised when a micro-batch is interrupted by the query's stop: short, so that the JVM
    reads it. Spark takes a batch function's failure for an interruption when its text
    holds py4j's ``Py4JJavaError: An error occurred while calling ...`` and an
    ``InterruptedException`` after it; it matches that with a regular expression whose
    recursion overflowed the stream thread's stack on the whole error (a thousand lines
    of Java stack: ``StackOverflowError`` printed to stderr at every stop that
    interrupted a batch). This one carries the error's first two lines."""


def _first_lines(exc: BaseException) -> str:
    """``exc`` as a traceback would end: its class and the first two lines of its text
    (a Py4JJavaError's: the call, then the Java exception's class and message)."""
    from py4j.protocol import Py4JJavaError

    name = "py4j.protocol.Py4JJavaError" if isinstance(exc, Py4JJavaError) else \
        f"{type(exc).__module__}.{type(exc).__name__}"
    try:
        text = str(exc)  # a Py4JJavaError asks the JVM for the Java exception's text
    except Exception:  # noqa: BLE001 - the JVM may not answer any more
        text = ""
    return f"{name}: " + "\n".join(text.splitlines()[:2])[:500]


def _interruption(exc: Exception, halting: threading.Event | None) -> Exception:
    """What a failed batch write raises to Spark: the error itself, unless the query is
    being stopped (``halting`` set), when it is the interruption it is, short: a
    :class:`BatchInterrupted` holding the first lines of the JVM's error, which py4j hands
    the JVM whole (a thousand frames otherwise) and does not log."""
    if halting is None or not halting.is_set():
        return exc
    return BatchInterrupted(_first_lines(exc))


class _ExpectedInterruption(logging.Filter):
    """py4j logs, with its stack, every exception a Python function called by the JVM
    raises: not a :class:`BatchInterrupted`, which is expected."""

    def filter(self, record: logging.LogRecord) -> bool:
        exc = record.exc_info[1] if record.exc_info else None
        return not isinstance(exc, BatchInterrupted)


def _quiet_expected_interruptions() -> None:
    py4j = logging.getLogger("py4j.clientserver")
    if not any(isinstance(f, _ExpectedInterruption) for f in py4j.filters):
        py4j.addFilter(_ExpectedInterruption())


#: where the JVM logs a query that ended with an error (Spark 4.1 moved the classes to
#: ``.runtime``; the prefix holds both)
_STREAMING_LOGGER = "org.apache.spark.sql.execution.streaming"
#: where a task interrupted while it turned rows into Arrow logs the buffers it had not
#: freed ("Memory was leaked by query", an error with its stack; the JVM is going: 2026-12-01)
_INTERRUPTED_TASK_LOGGERS = ("org.apache.arrow.memory.BaseAllocator",
                             "org.apache.spark.TaskContextImpl")
#: how long a stop waits for the micro-batch running then to end before it interrupts it
STOP_BATCH_WAIT_SECONDS = 10.0


def stop_quietly(spark, query, halting: threading.Event | None = None,
                 wait: float = STOP_BATCH_WAIT_SECONDS) -> None:
    """Stop ``query`` for good (the service or the command is stopping), in one log line.

    Between micro-batches the stop is clean. A micro-batch running then is given ``wait``
    seconds to end (``halting`` set, the next one fails before it begins: :func:`start_consume`):
    its work is kept, and no task is interrupted. One still running after that is
    interrupted: its checkpoint has not recorded it, so the next start reads it again (and
    skips its write if that was committed). Its errors are expected, and were printed as
    a thousand lines of Java and Python stack: the batch fails with a short
    :class:`BatchInterrupted` (``halting`` set) that py4j does not log, the JVM's log of a
    query ending with an error, and of a task interrupted in its Arrow buffers, is silenced
    from here on, and this one line says what happened."""
    # silenced first: a batch that begins once ``halting`` is set fails at once, and the JVM
    # logged that failure with its stack while the call that silences it was on its way
    # (CI, 2026-12-02: a 0.2 s trigger, a loaded machine)
    _silence_jvm_loggers(spark, (_STREAMING_LOGGER,))
    if halting is not None:
        halting.set()
    batch = None
    try:
        # without ``halting`` the next batch would begin meanwhile: one look, no wait
        running = not _batch_ended(query, wait if halting is not None else 0)
        progress = query.lastProgress
        batch = None if progress is None else progress["batchId"] + 1
        if running:
            _silence_jvm_loggers(spark, _INTERRUPTED_TASK_LOGGERS)
        query.stop()
        # with ``halting``, an error is the next batch's refusal to begin, not a loss of work
        interrupted = running or (halting is None and query.exception() is not None)
    except Exception as exc:  # noqa: BLE001 - stopping anyway: the JVM may be going
        interrupted = True
        log.debug("consume query stop: %s", exc)
    if interrupted:
        log.info("consume: stopped; micro-batch %s was interrupted and is read again at the "
                 "next start", "?" if batch is None else batch)
    else:
        log.info("consume: stopped between micro-batches")


def _batch_ended(query, wait: float) -> bool:
    """Whether no micro-batch of ``query`` runs, waited for up to ``wait`` seconds (0: one
    look; the query may end meanwhile: the next batch refused to begin)."""
    deadline = time.monotonic() + wait
    while True:
        try:
            if not query.isActive or not query.status["isTriggerActive"]:
                return True
        except Exception:  # noqa: BLE001 - the query is ending: nothing runs
            return True
        if time.monotonic() >= deadline:
            return False
        time.sleep(0.05)


def _silence_jvm_loggers(spark, names) -> None:
    try:
        jvm = spark.sparkContext._jvm
        for name in names:
            jvm.org.apache.logging.log4j.core.config.Configurator.setLevel(
                name, jvm.org.apache.logging.log4j.Level.OFF)
    except Exception as exc:  # noqa: BLE001 - a JVM without log4j 2: its lines stay
        log.debug("cannot silence %s: %s", names, exc)


def _progress_detail(progress) -> dict:
    """Batch, time and the offsets committed (the batch's end, ``{topic: {partition:
    offset}}``) of a progress.

    With them the batch's records and seconds (whole, and in the sink: the fold and its
    commit). Read from the progress's own JSON: pyspark 4's ``SourceProgress`` holds each offset
    map as ``str(dict)``, Python's repr, which is not JSON (the lag computed from it here
    before was 0 whatever the backlog: every parse failed and was skipped)."""
    raw = progress
    text = getattr(progress, "json", None)
    if isinstance(text, str):
        try:
            raw = json.loads(text)
        except ValueError:
            pass
    committed: dict[str, dict[str, int]] = {}
    behind: int | None = 0
    for source in raw["sources"] or []:
        end = _offsets(source["endOffset"])
        latest = _offsets(source.get("latestOffset"))
        for topic, parts in end.items():
            if isinstance(parts, dict):
                ends = {str(p): int(o) for p, o in parts.items()}
                committed.setdefault(str(topic), {}).update(ends)
                known = latest.get(topic)
                if not isinstance(known, dict):
                    # no latest offsets: a batch planned before a restart, run again after
                    # it, says nothing of what is left (0 here let the audit's first pass
                    # judge a whole outage's backlog beside its reading)
                    behind = None
                elif behind is not None:
                    behind += sum(max(0, int(o) - ends[str(p)]) for p, o in known.items()
                                  if str(p) in ends)
    durations = raw.get("durationMs") or {}
    return {"batch": raw["batchId"], "progress_at": raw["timestamp"], "committed": committed,
            # how long the batch took, and in the sink (the fold and its commit)
            "records": raw.get("numInputRows"),
            "seconds": round(durations.get("triggerExecution", 0) / 1000, 3),
            "sink_seconds": round(durations.get("addBatch", 0) / 1000, 3),
            # what the batch left for the next ones: the records Spark knew were there when
            # it planned it, past its end (more than spark.max_offsets_per_trigger waited);
            # None: not known (a batch run again from the checkpoint)
            "behind": behind}


def _offsets(value) -> dict:
    """A source's offsets as a map: given as one, as JSON, or as the repr of one."""
    if isinstance(value, dict):
        return value
    if isinstance(value, str | bytes) and value:
        try:
            out = json.loads(value)
        except ValueError:
            import ast

            try:
                out = ast.literal_eval(value if isinstance(value, str) else value.decode())
            except (ValueError, SyntaxError):
                return {}
        return out if isinstance(out, dict) else {}
    return {}
