"""The consume job's JVM fold (``jobs/consume/ReadRuns.java``) hands each run out as it
closes, instead of collecting a task's runs in a list first: a backlog of one-record runs
(producers interleaving on a partition) is then never held whole in a task.

The fold is called on the JVM with an iterator over an ``ArrayList`` of the Kafka source's
rows; adding to the list after the first run came out makes the list's iterator throw on
its next step. A fold that reads ahead of the run it hands out (the whole task) would
have finished reading before: it would not throw. The same rows come out either way
(``tests/spark/test_stamp_rule.py`` and the pipeline tests hold the fold's rows)."""

from datetime import UTC, datetime

import pytest
from py4j.java_gateway import JavaMember
from py4j.protocol import Py4JJavaError

from .test_stamp_rule import KAFKA

OFFSETS = [0, 2, 4, 6, 8]  # gaps between them: each record a run of its own


def source_rows(spark):
    """A Java ``ArrayList`` of the Kafka source's rows (``InternalRow``), unstamped records
    of one partition at ``OFFSETS``."""
    t = datetime(2026, 11, 28, tzinfo=UTC)
    df = spark.createDataFrame([("t", 0, o, t, 0, None, b"v%d" % o, []) for o in OFFSETS],
                               KAFKA)
    rows = spark._jvm.java.util.ArrayList()
    for r in df._jdf.queryExecution().executedPlan().executeCollect():
        rows.add(r)
    return rows


def fold(spark, rows):
    jvm = spark._jvm
    idx = spark.sparkContext._gateway.new_array(jvm.int, 6)
    for i, name in enumerate(("topic", "partition", "offset", "timestamp", "value", "headers")):
        idx[i] = KAFKA.fieldNames().index(name)
    return jvm.kafka_audit.spark.ReadRuns.fold(rows.iterator(), idx, 7, 1_000_000, None)


def test_each_run_comes_out_once_it_closes_not_after_the_task(spark):
    rows = source_rows(spark)
    runs = fold(spark, rows)
    first = runs.next()  # read: the first record, and the second that closed its run
    assert (first.getLong(2), first.getLong(3)) == (0, 1)  # offset, count
    rows.add(rows.get(0))  # the list changes under its iterator: its next step throws
    # Java's own next (py4j's Python iterator turns every error into StopIteration)
    java_next = JavaMember("next", runs, runs._target_id, runs._gateway_client)
    with pytest.raises(Py4JJavaError) as raised:
        java_next()
    assert raised.value.java_exception.getClass().getName() == \
        "java.util.ConcurrentModificationException"


def test_every_record_is_in_one_run_in_order(spark):
    runs = fold(spark, source_rows(spark))
    got = []
    while runs.hasNext():
        r = runs.next()
        got.append((r.getString(0), r.getInt(1), r.getLong(2), r.getLong(3), r.getString(6)))
    assert got == [("t", 0, o, 1, "no kaudit header") for o in OFFSETS]
    assert not runs.hasNext()


def test_the_warm_up_folds_its_made_up_records_one_run_each(spark):
    """The consume job's warm-up (``warm_up_fold``) goes through the real fold: seven
    producers take turns on each partition, so every record is a run of its own; a
    warm-up that did not reach the fold (or a stamp the fold refused) gives another
    count."""
    from kafka_audit.jobs.consume.transforms import WARM_UP_RECORDS, warm_up_fold

    assert warm_up_fold(spark) == WARM_UP_RECORDS


def test_the_warm_up_begins_no_round_once_a_topic_has_come(spark):
    """The service's warm-up runs its rounds until ``until()`` says a topic has come (the
    consume job asks the ledger between rounds), so a new topic waits for one round at
    most: here the third look says so, after two rounds of the twenty asked. A warm-up
    that ran its rounds regardless, or looked only before the first, folds another
    count."""
    from kafka_audit.jobs.consume.transforms import WARM_UP_RECORDS, warm_up_fold

    looks = []

    def until() -> bool:
        looks.append(1)
        return len(looks) == 3

    assert warm_up_fold(spark, rounds=20, until=until) == 2 * WARM_UP_RECORDS
    assert len(looks) == 3
    assert warm_up_fold(spark, rounds=20, until=lambda: True) == 0


@pytest.mark.parametrize("key", [None, b"k" * 32], ids=["no stamp key", "stamp key"])
def test_the_warm_up_reads_its_records_back_as_the_kafka_client_does(spark, key):
    """The warm-up writes its records as the client's record batches and folds what the
    Kafka client decodes of them (``ReadRuns.warmUp``): the same rows as the fold of the
    same records as the source's rows. A read-back that lost, reordered or changed a
    record, a header or a timestamp would give other rows."""
    from pyspark.sql import DataFrame

    from kafka_audit.jobs.consume.transforms import WARM_UP_RECORDS, _fold_args, warm_up_records
    from kafka_audit.schemas.stamp import StampMac

    kafka = warm_up_records(spark)
    args = _fold_args(kafka, 3, None if key is None else StampMac(key))
    folds = spark._jvm.kafka_audit.spark.ReadRuns

    def rows(jdf):
        return sorted((r.asDict() for r in DataFrame(jdf, spark).collect()),
                      key=lambda r: (r["partition"], r["offset"]))

    read_back = rows(folds.warmUp(*args))
    assert sum(r["count"] for r in read_back) == WARM_UP_RECORDS
    if key is None:  # each record a run of its own
        assert len(read_back) == WARM_UP_RECORDS
    else:  # every stamp lacks its MAC: forged records, sharing runs
        assert all(r["stamp_error"] for r in read_back) and len(read_back) < 10
    assert read_back == rows(folds.fold(*args))


def test_the_warm_up_runs_its_work_as_one_micro_batch_and_leaves_no_file(spark, settings):
    """The consume job's warm-up runs in the ``foreachBatch`` function of a query of one
    micro-batch (``_one_batch``), as the consume query's batches run; its input and
    checkpoint are removed after."""
    from kafka_audit.jobs.consume.consume_job import _one_batch

    seen = []
    _one_batch(spark, settings, lambda batch, batch_id: seen.append((batch_id, batch.count())))
    assert seen == [(0, 1)]
    assert not list(settings.home_dir.glob("warm-up-*"))
