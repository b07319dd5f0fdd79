"""Keeping up under a sustained rate: the consume path's lag against a bare Spark read.

For each rate asked (``--rates 15000 40000``) and round, two cases, interleaved, each on
a freshly wiped local cluster (3 nodes, one topic of 3 partitions, RF 3):

* ``bare``: a Spark Kafka read of the topic into the ``noop`` sink, a process of its own
  (the same Spark settings, trigger and micro-batch cap as the consume job);
* ``audit``: ``kafka-audit run`` (watcher, consume, audit, API), started before the
  topic has any write: the consume stream restarts on it when the producer's first
  commit puts it in the ledger, as in production. With ``--named`` the profile names
  the topic (``topics.include``, as an operator who lists the audited topics does): the
  stream reads it from its start, no restart.

With ``--running`` both readers have read another topic first, as a service that has run
for a while has (its JVM warm, its query reading): ``kafka-audit produce`` writes
``--running-seconds`` at ``--running-rate`` to a topic of its own, and the case waits for
the reader to have read it to its end; the load's topic is then a new one (the service's
stream restarts on it; the bare read subscribed to both from its start).

In both, once the reader runs, ``kafka-audit produce --acks all --rate R --seconds S``
writes the load. Every ``--every`` seconds the lag is sampled: the log ends minus the
offsets of the reader's last committed micro-batch (its checkpoint's ``commits``
and ``offsets`` files), at one instant (the ends read, in one request, between two reads
of the checkpoint that find the same last batch). After the load: the seconds until the
lag is 0 (drained), and for ``audit`` until ``/v1/summary`` has judged every acknowledged
write once.

Reported per rate: each case's worst lag (whole, and past the load's first ``--start``
seconds), drain time, micro-batches and the longest one (from one commit to the next),
the CPU seconds its reader's processes used while the load ran (in ``sustained.json``
by process: the service's Python, its Spark driver JVM, its API and marker children),
and the ratios of the worst lags, audit over bare (goal: <= 1.2).

Run (the demo's ports and ``var`` home, like the other service benchmarks)::

    KAFKA_AUDIT_HOME=var .venv/bin/python bench/sustained.py [--rates 15000 40000] \
        [--seconds 120] [--rounds 1] [--named | --running]
"""

from __future__ import annotations

import argparse
import json
import os
import re
import subprocess
import sys
import time
import urllib.request
import uuid
from pathlib import Path

from steady import (
    cluster_down,
    cpu_by_process,
    cpu_seconds,
    fresh_cluster,
    process_tree,
    say,
)

from kafka_audit.scenarios.cluster import wait_until
from kafka_audit.scenarios.harness import Component, settings_file
from kafka_audit.settings import Settings, get_settings


def committed_offsets(checkpoint: Path, topic: str) -> tuple[int | None, dict[int, int]]:
    """The last micro-batch a streaming checkpoint committed and its end offsets of
    ``topic`` by partition (``(None, {})`` before the first)."""
    commits = checkpoint / "commits"
    try:
        done = sorted(int(p.name) for p in commits.iterdir() if p.name.isdigit())
    except OSError:
        return None, {}
    for batch in reversed(done):
        if (ends := planned_end(checkpoint, batch, topic)) is not None:
            return batch, ends
    return None, {}


def planned_end(checkpoint: Path, batch: int, topic: str) -> dict[int, int] | None:
    """The end offsets of ``topic`` by partition that micro-batch ``batch`` was planned
    with (empty: the batch does not name the topic; None: no such offsets file)."""
    try:
        lines = (checkpoint / "offsets" / str(batch)).read_text().splitlines()
    except OSError:
        return None
    for line in lines[2:]:  # "v1", the batch's metadata, then one line per source
        offsets = json.loads(line) if line.startswith("{") else {}
        if topic in offsets:
            return {int(p): int(o) for p, o in offsets[topic].items()}
    return {}


def commit_times(checkpoint: Path) -> list[float]:
    """When each micro-batch of a checkpoint was committed (its commit file's mtime)."""
    commits = checkpoint / "commits"
    try:
        return sorted(p.stat().st_mtime for p in commits.iterdir() if p.name.isdigit())
    except OSError:
        return []


def log_ends(admin, topic: str, partitions: int) -> dict[int, int]:
    """Every partition's log end (high watermark), in one request of ``admin`` (the
    case's one client: a client a call costs a connect and its metadata)."""
    from confluent_kafka import TopicPartition
    from confluent_kafka.admin import OffsetSpec

    futures = admin.list_offsets(
        {TopicPartition(topic, p): OffsetSpec.latest() for p in range(partitions)},
        request_timeout=5)
    return {tp.partition: int(f.result(timeout=10).offset) for tp, f in futures.items()}


def lag(admin, checkpoint: Path, topic: str, partitions: int, tries: int = 5) -> int:
    """The log ends minus the last committed micro-batch's end offsets, at one instant:
    the ends are read between two reads of the checkpoint that find the same last batch,
    so its offsets held all the while the ends were read (a read the loaded machine
    stalls for seconds, with a batch committed before it and the ends read after, would
    count the seconds' writes as lag). A batch committed in between: read again (after
    ``tries``, the last read, whose ends can only be later than its offsets)."""
    for _ in range(tries):
        batch, done = committed_offsets(checkpoint, topic)
        ends = log_ends(admin, topic, partitions)
        if committed_offsets(checkpoint, topic)[0] == batch:
            break
    return sum(end - done.get(p, 0) for p, end in ends.items())


def bare_reader(settings: Settings, topic: str, checkpoint: str) -> None:
    """The bare read (a process of its own, ``--bare-reader``) of ``topic`` (names
    separated by commas: each is read): until SIGTERM."""
    from kafka_audit.jobs.spark import get_spark

    spark = get_spark(settings, "kafka-audit-bench-bare")
    query = (spark.readStream.format("kafka")
             .option("kafka.bootstrap.servers", settings.cluster.bootstrap)
             .option("subscribe", topic).option("startingOffsets", "earliest")
             .option("includeHeaders", "true").option("failOnDataLoss", "false")
             .option("maxOffsetsPerTrigger", settings.spark.max_offsets_per_trigger)
             .option("kafka.metadata.max.age.ms", "2000").load()
             .writeStream.format("noop").option("checkpointLocation", checkpoint)
             .trigger(processingTime=f"{settings.spark.consume_trigger_seconds} seconds")
             .start())
    print("bare reader started", flush=True)
    query.awaitTermination()


def summary(api: str, topic: str) -> dict | None:
    try:
        with urllib.request.urlopen(f"{api}/v1/summary?topic={topic}", timeout=10) as r:
            return json.load(r)
    except Exception:  # noqa: BLE001 - not up yet, or the topic not known yet
        return None


class Reader:
    """The case's reader as a process: the bare Spark read or ``kafka-audit run``."""

    def __init__(self, kind: str, settings: Settings, topics: list[str]) -> None:
        self.kind = kind
        if kind == "audit":
            self.checkpoint = Path(settings.checkpoint_uri("consume"))
            self.component = Component(settings, "run")
            self.proc = self.component.proc
        else:
            self.checkpoint = settings.home_dir / "noop-checkpoint"
            settings.home_dir.mkdir(parents=True, exist_ok=True)
            env = {k: v for k, v in os.environ.items() if not k.startswith("KAFKA_AUDIT_")}
            env["KAFKA_AUDIT_CONFIG"] = str(settings_file(settings,
                                                          settings.home_dir / "bare.yaml"))
            self.log = open(settings.home_dir / "bare.log", "ab")  # noqa: SIM115
            self.proc = subprocess.Popen(
                [sys.executable, __file__, "--bare-reader", ",".join(topics),
                 str(self.checkpoint)],
                env=env, stdout=self.log, stderr=subprocess.STDOUT)
            self.component = None

    def ready(self, settings: Settings) -> bool:
        if self.proc.poll() is not None:
            raise RuntimeError(f"the {self.kind} reader exited ({self.proc.returncode})")
        if self.kind == "bare":
            return (settings.home_dir / "bare.log").read_bytes().count(b"reader started") > 0
        status = settings.home_dir / "status" / "consume.json"
        return status.exists()

    def batches(self, settings: Settings, into: dict[int, dict]) -> None:
        """The consume job's last micro-batch as its status file says it (records,
        seconds, seconds in the sink), into ``into`` by batch id (audit only)."""
        if self.kind != "audit":
            return
        try:
            detail = json.loads((settings.home_dir / "status" / "consume.json").read_text()
                                )["detail"]
        except (OSError, ValueError, KeyError):
            return
        if "batch" in detail:
            into[detail["batch"]] = {k: detail.get(k) for k in
                                     ("progress_at", "records", "seconds", "sink_seconds")}

    def stop(self) -> None:
        if self.component is not None:
            self.component.stop(60)
            return
        self.proc.terminate()
        try:
            self.proc.wait(60)
        except subprocess.TimeoutExpired:
            self.proc.kill()
            self.proc.wait(10)
        self.log.close()


def run_case(kind: str, rate: int, args, base: Settings) -> dict:
    cluster = fresh_cluster(base)
    admin = cluster.admin()  # the lag samples' one client
    home = base.home_dir / f"sustained-{kind}-{rate}-{time.strftime('%H%M%S')}"
    settings = base.model_copy(update={"home": home})
    topic = f"sus-{kind}-{uuid.uuid4().hex[:6]}"
    parts = 3
    cluster.create_topic(topic, partitions=parts, replication=3)
    earlier = f"sus-{kind}-running-{uuid.uuid4().hex[:6]}" if args.running else None
    if earlier:
        cluster.create_topic(earlier, partitions=parts, replication=3)
    if args.named and kind == "audit":
        # the profile names the topic: the consume stream reads it from its start, no
        # restart when the ledger first names it
        topics = settings.profile.topics.model_copy(update={"include": [re.escape(topic)]})
        settings = settings.model_copy(update={"profile": settings.profile.model_copy(
            update={"topics": topics})})
    api = f"http://{settings.api.host}:{settings.api.port}"
    say(f"{kind} at {rate} msg/s: topic {topic}, home {home}")
    reader = Reader(kind, settings, [topic] + ([earlier] if earlier else []))
    samples: list[tuple[float, int]] = []
    try:
        wait_until(lambda: reader.ready(settings), 300, f"the {kind} reader", every=1)
        time.sleep(args.warm)  # the reader's first triggers before any load
        if earlier:
            read_earlier_topic(settings, admin, reader, earlier, parts, args)
        producer = Component(settings, "produce", topic, "--rate", str(rate), "--seconds",
                             str(args.seconds), "--acks", "all", "--size", "100")
        t0 = time.time()
        procs = process_tree(reader.proc.pid, f"{kind} reader (Python)")
        cpu0 = cpu_by_process(procs)
        batches: dict[int, dict] = {}
        while producer.alive():
            samples.append((time.time() - t0, lag(admin, reader.checkpoint, topic, parts)))
            reader.batches(settings, batches)
            time.sleep(args.every)
        load_end = time.time() - t0
        cpu = {k: round(v, 1) for k, v in cpu_seconds(cpu0, cpu_by_process(procs)).items()}
        produced = producer.output()
        producer.stop()
        ends = log_ends(admin, topic, parts)
        say(f"load over after {load_end:.0f}s: {sum(ends.values()):,} in the log; "
            f"worst lag so far {max((s for _t, s in samples), default=0):,}")
        drained = None
        deadline = time.time() + args.drain
        while time.time() < deadline:
            now = lag(admin, reader.checkpoint, topic, parts)
            samples.append((time.time() - t0, now))
            reader.batches(settings, batches)
            if now <= 0:
                drained = time.time() - t0 - load_end
                break
            time.sleep(1)
        judged = None
        if kind == "audit" and drained is not None:
            total = sum(ends.values())
            deadline = time.time() + args.drain

            def all_judged() -> bool:
                s = summary(api, topic)
                return bool(s) and s["acked"] >= total and s["pending"] == 0

            while time.time() < deadline and not all_judged():
                time.sleep(1)
            judged = time.time() - t0 - load_end if all_judged() else None
            final = summary(api, topic)
        else:
            final = None
    finally:
        reader.stop()
        cluster_down(cluster)
    commits = [t - t0 for t in commit_times(reader.checkpoint)]
    during = [c for c in commits if 0 <= c <= load_end + (drained or 0)]
    gaps = [b - a for a, b in zip(during, during[1:], strict=False)]
    result = {
        "kind": kind, "rate": rate, "topic": topic, "home": str(home),
        "log_end": sum(ends.values()), "load_seconds": round(load_end, 1),
        "worst_lag": max(s for _t, s in samples),
        # past the start (the bare read's cold first batch; the audit's look at the ledger,
        # restart on the topic and cold first batch)
        "worst_lag_after_start": max((s for t, s in samples if t >= args.start), default=0),
        "drained_after": drained and round(drained, 1),
        "judged_after": judged and round(judged, 1),
        "batches": len(during), "longest_batch": round(max(gaps, default=0.0), 1),
        # the reader's processes' CPU seconds while the load ran (the service's: the
        # consume job, the audit passes, the watcher, the API)
        "reader_cpu_seconds": round(sum(cpu.values()), 1), "reader_cpu": cpu,
        "samples": samples, "batch_detail": batches, "summary": final,
        "producer": produced.strip().splitlines()[-3:],
    }
    (home / "sustained.json").write_text(json.dumps(result, indent=1, default=str))
    say(f"{kind} at {rate}: worst lag {result['worst_lag']:,}, drained "
        f"{result['drained_after']}s after the load, {result['batches']} batches, longest "
        f"{result['longest_batch']}s")
    return result


def read_earlier_topic(settings: Settings, admin, reader: Reader,
                       earlier: str, parts: int, args) -> None:
    """``--running``: the earlier topic written (``--running-seconds`` at
    ``--running-rate``), then read by ``reader`` to its end."""
    producer = Component(settings, "produce", earlier, "--rate", str(args.running_rate),
                         "--seconds", str(args.running_seconds), "--acks", "all",
                         "--size", "100")
    wait_until(lambda: not producer.alive(), args.running_seconds + 120,
               "the earlier topic's producer", every=1)
    producer.stop()
    wait_until(lambda: lag(admin, reader.checkpoint, earlier, parts) == 0, 300,
               f"the {reader.kind} reader to read the earlier topic", every=1)
    say(f"{reader.kind}: the earlier topic {earlier} read to its end")


def main() -> None:
    if len(sys.argv) == 4 and sys.argv[1] == "--bare-reader":
        bare_reader(get_settings(), sys.argv[2], sys.argv[3])
        return
    ap = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    ap.add_argument("--rates", type=int, nargs="+", default=[15000, 40000])
    ap.add_argument("--seconds", type=float, default=120, help="how long the load runs")
    ap.add_argument("--rounds", type=int, default=1)
    ap.add_argument("--every", type=float, default=5, help="seconds between lag samples")
    ap.add_argument("--warm", type=float, default=10,
                    help="seconds between the reader's start and the load's")
    ap.add_argument("--drain", type=float, default=600,
                    help="most seconds to wait, after the load, for the lag to reach 0")
    ap.add_argument("--start", type=float, default=30,
                    help="seconds of load that count as its start (the worst lag is also "
                    "given without them)")
    # --named's profile would leave --running's earlier topic unaudited, never read
    start = ap.add_mutually_exclusive_group()
    start.add_argument("--named", action="store_true",
                       help="the audit's profile names the topic (topics.include): no "
                       "restart on it when the ledger first names it")
    start.add_argument("--running", action="store_true",
                       help="both readers read another topic first (a service that has run "
                       "a while: a warm JVM); the load's topic is then new to the service")
    ap.add_argument("--running-seconds", type=float, default=20,
                    help="how long --running's earlier topic is written")
    ap.add_argument("--running-rate", type=int, default=5000,
                    help="msg/s written to --running's earlier topic")
    ap.add_argument("--kinds", nargs="+", choices=["bare", "audit"], default=["bare", "audit"])
    args = ap.parse_args()
    base = get_settings()
    results = []
    for rate in args.rates:
        for r in range(args.rounds):
            kinds = args.kinds if r % 2 == 0 else list(reversed(args.kinds))
            results.extend(run_case(kind, rate, args, base) for kind in kinds)
    print()
    for rate in args.rates:
        mine = [r for r in results if r["rate"] == rate]
        for r in mine:
            print(f"{rate:>6} msg/s {r['kind']:>5}: worst lag {r['worst_lag']:>10,} "
                  f"({r['worst_lag_after_start']:,} after the first {args.start:g}s)  drained "
                  f"{r['drained_after']}s after the load  judged {r['judged_after']}s  "
                  f"{r['batches']} batches, longest {r['longest_batch']}s  "
                  f"reader CPU {r['reader_cpu_seconds']}s  "
                  f"({r['log_end']:,} in {r['load_seconds']}s)")
        for key, what in (("worst_lag", "worst lag"),
                          ("worst_lag_after_start", f"after the first {args.start:g}s")):
            bare = sorted(r[key] for r in mine if r["kind"] == "bare")
            audit = sorted(r[key] for r in mine if r["kind"] == "audit")
            if bare and audit:
                ratio = audit[len(audit) // 2] / max(1, bare[len(bare) // 2])
                print(f"{rate:>6} msg/s: {what} audit/bare {ratio:.2f} (goal <= 1.2)")


if __name__ == "__main__":
    main()
