"""Where the consume job's time goes: the same streaming read of one topic, four ways.

Fills one RF=3 topic on the local cluster with the instrumented producer, then
runs, in interleaved rounds with fresh checkpoints (the first round is a
warm-up), each as an ``availableNow`` stream with the consume job's batch size:

* ``bare``: the Spark Kafka source (headers included) into the ``noop`` sink;
* ``count``: ``foreachBatch`` walking every row on the JVM (the cost of the
  Python callback and of handing the rows out);
* ``fold``: ``foreachBatch`` folding them into read runs (``ReadRuns.java``),
  into ``noop``;
* ``consume``: the consume job itself (fold plus the Delta append).

Prints each one's wall time, the CPU seconds of the Spark JVM (local mode: the tasks
run in it) and of this Python process (the ``foreachBatch`` callbacks, delta-rs's
appends), and its micro-batches' ``addBatch`` milliseconds. With ``--producers N`` the
topic is filled by N instrumented producers in turn, each sending batches of ``--batch``
records, so their runs interleave on every partition as in ``bench/catchup.py`` (the
fold's worst case: a row every ``--batch`` records). Deletes its topic at the end. Run:
``.venv/bin/python bench/consume_profile.py [--messages 10000000] [--rounds 2]
[--producers 20 --batch 5]``.
"""

from __future__ import annotations

import argparse
import shutil
import sys
import tempfile
import time
from pathlib import Path

from kafka_audit.jobs.consume.consume_job import start_consume
from kafka_audit.jobs.consume.transforms import fold_read_runs
from kafka_audit.jobs.spark import get_spark
from kafka_audit.settings import Settings

sys.path.insert(0, str(Path(__file__).resolve().parent))
from audit_bench import bare_source, bench_topic, drop_topic, fill  # noqa: E402 - shared
from steady import _cpu_s  # noqa: E402 - shared


def jvm_pid(spark) -> int:
    """The Spark driver JVM's pid (pyspark's gateway process execs java)."""
    return int(spark.sparkContext._jvm.java.lang.ProcessHandle.current().pid())


def main() -> int:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--messages", type=int, default=10_000_000)
    ap.add_argument("--rounds", type=int, default=2)
    ap.add_argument("--producers", type=int, default=1)
    ap.add_argument("--batch", type=int, default=10_000)
    args = ap.parse_args()
    base, cluster, topic = bench_topic("profile")
    root = Path(tempfile.mkdtemp(prefix="kafka-audit-profile-"))
    settings = Settings(home=root / "fill", cluster=base.cluster.model_dump())
    spark = None
    try:
        t = time.perf_counter()
        fill(settings, topic, args.messages, args.producers, args.batch)
        print(f"filled {topic}: {args.messages} in {time.perf_counter() - t:.1f}s",
              flush=True)
        spark = get_spark(settings, "kafka-audit-profile")
        jvm = jvm_pid(spark)

        def stream(work: Path, each_batch=None):
            src = bare_source(spark, settings, topic)
            w = src.writeStream.format("noop") if each_batch is None \
                else src.writeStream.foreachBatch(each_batch)
            return (w.option("checkpointLocation", str(work / "checkpoint"))
                    .trigger(availableNow=True).start())

        def count(df, batch_id):
            df._jdf.queryExecution().toRdd().count()

        def fold(df, batch_id):
            fold_read_runs(df, batch_id).write.format("noop").mode("overwrite").save()

        ways = {
            "bare": lambda work: stream(work),
            "count": lambda work: stream(work, count),
            "fold": lambda work: stream(work, fold),
            "consume": lambda work: start_consume(
                spark, Settings(home=work, cluster=base.cluster.model_dump()), topic,
                once=True),
        }
        for r in range(args.rounds + 1):
            for name, run in ways.items():
                t, cpu = time.perf_counter(), (_cpu_s(jvm), time.process_time())
                query = run(root / f"{name}-{r}")
                query.awaitTermination()
                took = time.perf_counter() - t
                jvm_s, py_s = _cpu_s(jvm) - cpu[0], time.process_time() - cpu[1]
                batches = [p["durationMs"].get("addBatch", 0) for p in query.recentProgress]
                label = "warm-up" if r == 0 else f"round {r}"
                print(f"{label:<8} {name:<8} {took:6.1f}s  cpu jvm {jvm_s:6.1f}s python "
                      f"{py_s:5.1f}s  addBatch ms {batches}", flush=True)
    finally:
        if spark is not None:
            spark.stop()
        shutil.rmtree(root, ignore_errors=True)
        drop_topic(cluster, topic)
    return 0


if __name__ == "__main__":
    sys.exit(main())
