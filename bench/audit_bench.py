"""Audit benchmark: the full consume + audit path against a bare Spark Kafka read.

One process, one local 3-node cluster, one RF=3 topic filled once by the
instrumented producer (acks=all, batched: ``linger.ms`` 5). Then, in
interleaved rounds over the same data, each with fresh checkpoints and tables:

* ``bare``: the Spark Kafka source (headers included) into Spark's ``noop``
  sink, ``availableNow``: the cost of reading the topic at all;
* ``audit``: the consume job (stamp parsing, read runs, Delta append) followed
  by one audit pass (settle 0, so every write is judged in that pass; the
  great-expectations check of the new acks included).

A first round of each is a warm-up and not counted. Prints the median
messages/s of each, the ratio audit/bare (target >= 0.8),
the ack ledger's rows per message (target <= 0.01) and the consumed table's.
Beside the wall rates, each path's CPU: the Spark driver JVM's (local mode: the
tasks run in it; ``/proc/<pid>/stat``) and this Python process's (delta-rs, the
audit pass), per message, and the median of the rounds' own CPU ratios bare/audit:
wall rates swing 30-40% between rounds on a shared 2-core machine, CPU per message
of the process under test far less (FIELD-NOTES), so the CPU ratio is the steady
measure of what the audit path costs beyond a bare read.

Run: ``bash dev.sh bench-audit [--messages 1000000] [--rounds 3]``.
"""

from __future__ import annotations

import argparse
import shutil
import statistics
import sys
import tempfile
import time
import uuid
from pathlib import Path

from kafka_audit.jobs.audit.audit_pass import run_audit_pass
from kafka_audit.jobs.consume.consume_job import start_consume
from kafka_audit.jobs.spark import get_spark
from kafka_audit.producers.instrumented import AuditedProducer
from kafka_audit.scenarios.cluster import LocalCluster
from kafka_audit.settings import Settings, get_settings
from kafka_audit.store import read_table

sys.path.insert(0, str(Path(__file__).resolve().parent))
from steady import _cpu_s  # noqa: E402 - shared


def fill(settings: Settings, topic: str, n: int, producers: int = 1,
         batch: int = 10_000) -> AuditedProducer:
    """``n`` writes of 100 bytes by ``producers`` instrumented producers in turn, each
    batching at most ``batch`` records (several: their runs interleave on every
    partition, idempotent so that a retry under the load writes nothing twice); the
    first producer."""
    conf = {"bootstrap.servers": settings.cluster.bootstrap, "acks": "all", "linger.ms": 5,
            "batch.num.messages": batch, "queue.buffering.max.messages": 2_000_000}
    if producers > 1:
        conf.update({"enable.idempotence": True, "message.timeout.ms": 600_000,
                     "queue.buffering.max.messages": 20_000})
    ps = [AuditedProducer(conf, "bench" if producers == 1 else f"bench-{i}", settings)
          for i in range(producers)]
    payload = b"x" * 100
    for i in range(n):
        p = ps[i % producers]
        while True:
            try:
                p.produce(topic, payload)
                break
            except BufferError:
                p.poll(0.05)
        if i % 1000 == 0:
            for q in ps:
                q.poll(0)
    for p in ps:
        p.close()
    acked = sum(p.acked for p in ps)
    if acked != n:
        raise RuntimeError(f"acked {acked} of {n}")
    return ps[0]


def bench_topic(kind: str, existing: str | None = None
                ) -> tuple[Settings, LocalCluster, str]:
    """The local cluster (started if need be) and a new RF=3, 3-partition topic, or the
    ``existing`` one (a topic an earlier run kept)."""
    base = get_settings()
    cluster = LocalCluster(base)
    cluster.up(print)
    if existing:
        return base, cluster, existing
    topic = f"bench-{kind}-{uuid.uuid4().hex[:6]}"
    cluster.create_topic(topic, partitions=3, replication=3)
    return base, cluster, topic


def drop_topic(cluster: LocalCluster, topic: str) -> None:
    """Delete a benchmark's topic (3 copies of every message: do not let them pile up)."""
    admin = cluster.admin()  # referenced until the futures resolve
    for fut in admin.delete_topics([topic]).values():
        fut.result()


def bare_source(spark, settings: Settings, topic: str):
    """The Spark Kafka source as the benchmarks' bare read uses it: headers included, the
    consume job's micro-batch size."""
    return (spark.readStream.format("kafka")
            .option("kafka.bootstrap.servers", settings.cluster.bootstrap)
            .option("subscribe", topic).option("startingOffsets", "earliest")
            .option("includeHeaders", "true")
            .option("maxOffsetsPerTrigger", settings.spark.max_offsets_per_trigger).load())


def bare_read(spark, settings: Settings, topic: str, work: Path) -> float:
    t = time.perf_counter()
    (bare_source(spark, settings, topic)
     .writeStream.format("noop").option("checkpointLocation", str(work / "noop"))
     .trigger(availableNow=True).start().awaitTermination())
    return time.perf_counter() - t


def jvm_pid(spark) -> int:
    """The Spark driver JVM's pid (pyspark's gateway process execs java)."""
    return int(spark.sparkContext._jvm.java.lang.ProcessHandle.current().pid())


def cpu_of(jvm: int, run, *args):
    """``run(*args)``'s result and the CPU seconds the driver JVM and this process spent
    in it."""
    before = _cpu_s(jvm) + time.process_time()
    out = run(*args)
    return out, _cpu_s(jvm) + time.process_time() - before


def audit_path(spark, settings: Settings, topic: str, n: int) -> tuple[float, dict]:
    t = time.perf_counter()
    start_consume(spark, settings, topic, once=True).awaitTermination()
    consumed = time.perf_counter() - t
    summary = run_audit_pass(spark, settings)
    total = time.perf_counter() - t
    confirmed = summary.findings.get("confirmed", 0)
    if confirmed != n:
        raise RuntimeError(f"audit confirmed {confirmed} of {n}: {summary.line()}")
    return total, {"consume": consumed, **summary.seconds}


def main() -> int:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--messages", type=int, default=1_000_000)
    ap.add_argument("--rounds", type=int, default=3)
    args = ap.parse_args()

    base, cluster, topic = bench_topic("audit")
    root = Path(tempfile.mkdtemp(prefix="kafka-audit-bench-"))
    cfg = {"cluster": base.cluster.model_dump(), "audit": {"settle_seconds": 0}}
    fill_settings = Settings(home=root / "fill", **cfg)
    t = time.perf_counter()
    p = fill(fill_settings, topic, args.messages)
    print(f"filled {topic}: {args.messages} messages in {time.perf_counter() - t:.1f}s; "
          f"ledger {p.ledger.rows_written} rows for {p.ledger.reports_written} reports")
    spark = get_spark(fill_settings, "kafka-audit-bench")
    jvm = jvm_pid(spark)
    times: dict[str, list[float]] = {"bare": [], "audit": []}
    cpus: dict[str, list[float]] = {"bare": [], "audit": []}
    phases = []
    consumed_rows = 0
    try:
        # warm-up, not counted: JIT, connections, Python workers of both paths
        bare_read(spark, fill_settings, topic, root / "warm")
        warm = Settings(home=root / "warm", **cfg)
        shutil.copytree(fill_settings.table_path("acks"), warm.table_path("acks"))
        audit_path(spark, warm, topic, args.messages)
        for r in range(args.rounds):
            work = root / f"round{r}"
            took, cpu = cpu_of(jvm, bare_read, spark, fill_settings, topic, work)
            times["bare"].append(took)
            cpus["bare"].append(cpu)
            s = Settings(home=work, **cfg)
            shutil.copytree(fill_settings.table_path("acks"), s.table_path("acks"))
            (dt, ph), cpu = cpu_of(jvm, audit_path, spark, s, topic, args.messages)
            times["audit"].append(dt)
            cpus["audit"].append(cpu)
            phases.append(ph)
            consumed_rows = read_table(s.table_path("consumed"), "consumed").num_rows
            print(f"round {r + 1}: bare {times['bare'][-1]:.1f}s cpu {cpus['bare'][-1]:.1f}s, "
                  f"audit {dt:.1f}s cpu {cpu:.1f}s "
                  f"({', '.join(f'{k} {v:.1f}s' for k, v in ph.items())})", flush=True)
    finally:
        spark.stop()
        shutil.rmtree(root, ignore_errors=True)
        drop_topic(cluster, topic)
    n = args.messages
    bare = n / statistics.median(times["bare"])
    audit = n / statistics.median(times["audit"])
    print()
    print(f"bare Spark Kafka read -> noop : {bare:10,.0f} msg/s")
    print(f"consume + audit               : {audit:10,.0f} msg/s")
    print(f"ratio audit/bare              : {audit / bare:10.2f}   (target >= 0.8)")
    wall = [b / a for b, a in zip(times["bare"], times["audit"], strict=True)]
    cpu = [b / a for b, a in zip(cpus["bare"], cpus["audit"], strict=True)]
    print(f"the rounds' wall ratios       : {' '.join(f'{x:.2f}' for x in wall)}"
          f"   (median {statistics.median(wall):.2f})")
    for path in ("bare", "audit"):
        print(f"CPU per message, {path:<13}: "
              f"{statistics.median(cpus[path]) / n * 1e6:10.2f} µs (JVM + Python, median)")
    print(f"the rounds' CPU ratios        : {' '.join(f'{x:.2f}' for x in cpu)}"
          f"   (median {statistics.median(cpu):.2f}, bare/audit)")
    print(f"ack ledger rows per message   : {p.ledger.rows_written / n:10.4f}   (target <= 0.01)")
    print(f"consumed rows per message     : {consumed_rows / n:10.4f}")
    return 0


if __name__ == "__main__":
    sys.exit(main())
