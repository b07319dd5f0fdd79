"""Where the consume job's time goes: the same streaming read of one topic, ten ways.

Fills one RF=3 topic on the local cluster with the instrumented producer, then
runs, in interleaved rounds with fresh checkpoints (the first round is a
warm-up), each as an ``availableNow`` stream with the consume job's batch size:

* ``bare``: the Spark Kafka source (headers included) into the ``noop`` sink;
* ``count``: ``foreachBatch`` walking every row on the JVM (the cost of the
  Python callback and of handing the rows out);
* ``fold``: ``foreachBatch`` folding them into read runs (``ReadRuns.java``),
  into ``noop``;
* ``fold-source``: the same folded from the batch's offset ranges, the Kafka client's
  records read with the source's consumers (``ReadRuns.foldSource``: the consume job's
  way), into ``noop``;
* ``spark-write``: the fold written by Spark's Delta writer (the consume job's way for a
  micro-batch over ``spark.stream_rows`` offsets; until 2026-12-02 over
  ``spark.driver_rows``);
* ``spark-write-nostats``: the same with Delta's per-file column statistics off
  (``spark.databricks.delta.stats.collect``), to weigh what they cost;
* ``counted``: the same, stored (``localCheckpoint``) and counted first (that way's
  path until 2026-12-02);
* ``arrow-write``: the fold collected to the driver as Arrow and committed with delta-rs
  (its way for a micro-batch of at most ``spark.driver_rows`` offsets);
* ``stream-write``: the fold handed from the tasks to delta-rs as Arrow record batches
  as the tasks end, in one commit (its way for one up to ``spark.stream_rows``);
* ``consume``: the consume job itself.

Prints each one's wall time, the CPU seconds of the Spark JVM (local mode: the tasks
run in it) and of this Python process (the ``foreachBatch`` callbacks, delta-rs's
appends), and its micro-batches' ``addBatch`` milliseconds. With ``--producers N`` the
topic is filled by N instrumented producers in turn, each sending batches of ``--batch``
records, so their runs interleave on every partition as in ``bench/catchup.py`` (the
fold's worst case: a row every ``--batch`` records). Deletes its topic at the end. Run:
``.venv/bin/python bench/consume_profile.py [--messages 10000000] [--rounds 2]
[--producers 20 --batch 5] [--keep]``; ``--keep`` leaves the filled topic (its name is
printed) and ``--topic NAME`` profiles such a kept one again without filling (a change
to the JVM fold measured on the same records); ``--ways bare,spark-write`` runs only those.
"""

from __future__ import annotations

import argparse
import shutil
import sys
import tempfile
import time
from pathlib import Path

import pyarrow as pa

from kafka_audit.jobs.consume.consume_job import start_consume
from kafka_audit.jobs.consume.transforms import fold_read_runs
from kafka_audit.jobs.sink import write_collected, write_delta, write_spark, write_stream
from kafka_audit.jobs.spark import get_spark
from kafka_audit.settings import Settings

sys.path.insert(0, str(Path(__file__).resolve().parent))
from audit_bench import bare_source, bench_topic, drop_topic, fill, jvm_pid  # noqa: E402
from steady import _cpu_s  # noqa: E402 - shared


def main() -> int:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--messages", type=int, default=10_000_000)
    ap.add_argument("--rounds", type=int, default=2)
    ap.add_argument("--producers", type=int, default=1)
    ap.add_argument("--batch", type=int, default=10_000)
    ap.add_argument("--keep", action="store_true", help="leave the filled topic")
    ap.add_argument("--topic", help="profile this kept topic again (no fill)")
    ap.add_argument("--ways", help="comma-separated: only these ways (default: all)")
    args = ap.parse_args()
    base, cluster, topic = bench_topic("profile", existing=args.topic)
    root = Path(tempfile.mkdtemp(prefix="kafka-audit-profile-"))
    settings = Settings(home=root / "fill", cluster=base.cluster.model_dump())
    spark = None
    try:
        if not args.topic:
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

        def fold_source(df, batch_id):
            fold_read_runs(df, batch_id, source=True).write.format("noop").mode("overwrite") \
                .save()

        def spark_write(df, batch_id):  # the dense batch's way (consume_job._write_fold)
            folded = fold_read_runs(df, batch_id)
            write_spark(folded, str(root / f"spark-write-{time.time_ns()}"))

        def spark_write_nostats(df, batch_id):  # the same, no per-file column statistics
            spark.conf.set("spark.databricks.delta.stats.collect", "false")
            try:
                spark_write(df, batch_id)
            finally:
                spark.conf.unset("spark.databricks.delta.stats.collect")

        def counted_write(df, batch_id):  # the dense batch's way before: stored, counted
            write_delta(fold_read_runs(df, batch_id), str(root / f"counted-{time.time_ns()}"),
                        "consumed", settings.spark.driver_rows)

        def arrow_write(df, batch_id):  # the same rows through the driver and delta-rs
            rows = pa.table(fold_read_runs(df, batch_id).toArrow())
            write_collected(rows, str(root / f"arrow-write-{time.time_ns()}"), "consumed")

        def stream_write(df, batch_id):  # the same rows handed to delta-rs as tasks end
            write_stream(fold_read_runs(df, batch_id), str(root / f"stream-{time.time_ns()}"),
                         "consumed")

        ways = {
            "bare": lambda work: stream(work),
            "count": lambda work: stream(work, count),
            "fold": lambda work: stream(work, fold),
            "fold-source": lambda work: stream(work, fold_source),
            "spark-write": lambda work: stream(work, spark_write),
            "spark-write-nostats": lambda work: stream(work, spark_write_nostats),
            "counted": lambda work: stream(work, counted_write),
            "arrow-write": lambda work: stream(work, arrow_write),
            "stream-write": lambda work: stream(work, stream_write),
            "consume": lambda work: start_consume(
                spark, Settings(home=work, cluster=base.cluster.model_dump()), topic,
                once=True),
        }
        if args.ways:
            chosen = args.ways.split(",")
            if unknown := set(chosen) - set(ways):
                ap.error(f"unknown ways {sorted(unknown)}; known: {sorted(ways)}")
            ways = {name: ways[name] for name in chosen}
        for r in range(args.rounds + 1):
            for name, run in ways.items():
                t, cpu = time.perf_counter(), (_cpu_s(jvm), time.process_time())
                query = run(root / f"{name}-{r}")
                query.awaitTermination()
                took = time.perf_counter() - t
                jvm_s, py_s = _cpu_s(jvm) - cpu[0], time.process_time() - cpu[1]
                batches = [p["durationMs"].get("addBatch", 0) for p in query.recentProgress]
                label = "warm-up" if r == 0 else f"round {r}"
                print(f"{label:<8} {name:<11} {took:6.1f}s  cpu jvm {jvm_s:6.1f}s python "
                      f"{py_s:5.1f}s  addBatch ms {batches}", flush=True)
    finally:
        if spark is not None:
            spark.stop()
        shutil.rmtree(root, ignore_errors=True)
        if args.keep or args.topic:
            print(f"kept {topic}", flush=True)
        else:
            drop_topic(cluster, topic)
    return 0


if __name__ == "__main__":
    sys.exit(main())
