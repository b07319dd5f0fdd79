"""Where the consume job's time goes: the same Kafka records read as one Spark batch, three ways.

Fills one RF=3 topic on the local cluster with the instrumented producer, then
times (each twice, in one SparkSession):

* ``bare``: ``spark.read.format("kafka")`` (headers included) into the ``noop`` sink;
* ``fold``: the same plus the JVM read-run fold the consume job runs;
* ``fold+delta``: the same plus the Delta append of the runs.

Deletes its topic at the end. Run: ``.venv/bin/python bench/consume_profile.py
[--messages 10000000]``.
"""

from __future__ import annotations

import argparse
import shutil
import sys
import tempfile
import time
from pathlib import Path

from kafka_audit.jobs.spark import get_spark
from kafka_audit.jobs.transforms import fold_read_runs
from kafka_audit.settings import Settings

sys.path.insert(0, str(Path(__file__).resolve().parent))
from audit_bench import bench_topic, drop_topic, fill  # noqa: E402 - shared with it


def main() -> int:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--messages", type=int, default=10_000_000)
    args = ap.parse_args()
    base, cluster, topic = bench_topic("profile")
    root = Path(tempfile.mkdtemp(prefix="kafka-audit-profile-"))
    settings = Settings(home=root, cluster=base.cluster.model_dump())
    spark = None
    try:
        fill(settings, topic, args.messages)
        spark = get_spark(settings, "kafka-audit-profile")

        def source():
            return (spark.read.format("kafka")
                    .option("kafka.bootstrap.servers", settings.cluster.bootstrap)
                    .option("subscribe", topic).option("startingOffsets", "earliest")
                    .option("includeHeaders", "true").load())

        ways = {
            "bare": lambda: source().write.format("noop").mode("overwrite").save(),
            "fold": lambda: fold_read_runs(source(), 1).write.format("noop")
            .mode("overwrite").save(),
            "fold+delta": lambda: fold_read_runs(source(), 1).write.format("delta")
            .mode("append").save(str(root / "runs")),
        }
        for name, run in ways.items():
            took = []
            for _ in range(2):
                t = time.perf_counter()
                run()
                took.append(time.perf_counter() - t)
            print(f"{name:<11} {' '.join(f'{s:6.1f}s' for s in took)}   "
                  f"({args.messages:,} records)", flush=True)
    finally:
        if spark is not None:
            spark.stop()
        shutil.rmtree(root, ignore_errors=True)
        drop_topic(cluster, topic)
    return 0


if __name__ == "__main__":
    sys.exit(main())
