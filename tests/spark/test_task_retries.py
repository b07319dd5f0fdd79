"""A task that fails once is tried again in local mode (``spark.local_task_attempts``).

Spark's ``local[N]`` gives a task one try: a Kafka read that timed out while its
partition's leader failed over failed the whole consume micro-batch and restarted the
stream (bench/latency.py, 2026-11-26). The session is started as ``local[N,F]``.
"""

from pyspark import TaskContext

from kafka_audit.jobs.spark import local_master


def test_the_session_is_started_with_task_attempts(spark):
    assert spark.sparkContext.master == "local[2,6]"


def test_a_task_failing_on_its_first_attempt_is_tried_again(spark):
    def fail_first_attempt(rows):
        ctx = TaskContext.get()
        if ctx.partitionId() == 1 and ctx.attemptNumber() == 0:
            raise RuntimeError("a read that timed out while its leader failed over")
        yield sum(1 for _ in rows), ctx.attemptNumber()

    out = spark.sparkContext.parallelize(range(100), 2).mapPartitions(fail_first_attempt)
    counts = out.collect()
    assert sum(n for n, _ in counts) == 100  # every row, once
    assert sorted(a for _, a in counts) == [0, 1]  # partition 1 needed its second attempt


def test_local_masters_get_attempts_and_others_stay():
    assert local_master("local[2]", 6) == "local[2,6]"
    assert local_master("local[*]", 4) == "local[*,4]"
    assert local_master("local", 3) == "local[1,3]"
    assert local_master(" local[2] ", 3) == "local[2,3]"
    assert local_master("local[2,9]", 6) == "local[2,9]"  # the operator's own F
    assert local_master("spark://10.0.0.1:7077", 6) == "spark://10.0.0.1:7077"
    assert local_master("local[2]", 1) == "local[2]"
