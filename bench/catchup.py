"""Catch-up after an outage: ``kafka-audit run`` reading a backlog, against a bare read.

On a freshly wiped local cluster, one topic of 3 partitions (RF 3):

1. ``--producers`` instrumented producers (acks=all, one process) write ``--rate`` msg/s
   in total, in turn, so their writes interleave on every partition and the consume
   job's runs are short (the fold's worst case: about a row per record);
2. ``kafka-audit run`` audits them for ``--steady`` minutes: the steady-state RSS of the
   service's Python process and of its Spark driver JVM (their highest over the second
   half of the phase);
3. the service is stopped for ``--outage`` minutes while the producers go on;
4. it is started again: the seconds until its consume checkpoint has passed the log
   ends of the restart (caught up), of which the start-up (until the first micro-batch
   was planned: Python, the Spark driver, the tables, and a batch the stop interrupted,
   run again first) and the reading (the rest: its first batch warms the JVM), the
   reading's rate (of the records past that re-run batch), and the peak RSS of both processes
   meanwhile (goal: <= 1.5x steady);
5. the service stopped again, a bare Spark read of the same offsets into the ``noop``
   sink, a process of its own with the same Spark settings, while the producers still
   write: timed after its JVM's start and a small warm-up read (goal: the reading's rate
   >= 0.8x its rate), and as a whole process (its start-up and warm-up too: the second
   ratio, against the catch-up's whole time); both ratios again by CPU per record (the
   service's process tree, sampled with its RSS, against the bare read's JVM and Python:
   wall rates swing here, CPU far less); then the service started again;
6. the producers stop (idempotent: a retry writes nothing twice); once ``/v1/summary``
   holds every delivery report and has nothing pending, each must have exactly one
   verdict, every acknowledged write ``confirmed`` (no fault was injected).

Run (the demo's ports and ``var`` home)::

    KAFKA_AUDIT_HOME=var .venv/bin/python bench/catchup.py [--outage 30] [--steady 5]
"""

from __future__ import annotations

import argparse
import json
import os
import subprocess
import sys
import time
import uuid
from pathlib import Path

from audit_bench import jvm_pid
from steady import _cpu_s, cluster_down, fresh_cluster, process_tree, rss_by_process, say
from sustained import committed_offsets, log_ends, planned_end, summary

from kafka_audit.scenarios.cluster import wait_until
from kafka_audit.scenarios.harness import Component, settings_file
from kafka_audit.settings import Settings, get_settings

PARTITIONS = 3


def bare_range(settings: Settings, topic: str, start: dict[int, int], end: dict[int, int]
               ) -> None:
    """The bare read (a process of its own, ``--bare-range``): ``topic`` from ``start``
    to ``end`` (offsets by partition) into ``noop``; prints its seconds."""
    from kafka_audit.jobs.spark import get_spark

    spark = get_spark(settings, "kafka-audit-bench-bare")
    jvm = jvm_pid(spark)
    # a first small read: the JVM's warm-up, as the service's is (not timed)
    few = {p: min(end[p], o + 1000) for p, o in start.items()}
    for lo, hi, timed in ((start, few, False), (start, end, True)):
        t, cpu = time.perf_counter(), _cpu_s(jvm) + time.process_time()
        (spark.read.format("kafka")
         .option("kafka.bootstrap.servers", settings.cluster.bootstrap)
         .option("subscribe", topic).option("includeHeaders", "true")
         .option("startingOffsets", json.dumps({topic: {str(p): o for p, o in lo.items()}}))
         .option("endingOffsets", json.dumps({topic: {str(p): o for p, o in hi.items()}}))
         .load().write.format("noop").mode("overwrite").save())
        if timed:
            print(f"bare seconds {time.perf_counter() - t:.3f}", flush=True)
            # its CPU (the JVM's and this process's): the timed read's, and the whole
            # process's since its start (the JVM started in it)
            whole = _cpu_s(jvm) + time.process_time()
            print(f"bare cpu {whole - cpu:.2f} whole {whole:.2f}", flush=True)


def first_batch_after(checkpoint: Path, since: float) -> tuple[int, float]:
    """The first micro-batch planned at or after ``since`` (epoch seconds), and when: the
    mtime of its offsets file (Spark writes it before the batch reads anything)."""
    planned = []
    for p in (checkpoint / "offsets").iterdir():
        try:
            if p.name.isdigit() and (t := p.stat().st_mtime) >= since:
                planned.append((int(p.name), t))
        except OSError:  # an old one Spark removed meanwhile
            continue
    if not planned:
        raise RuntimeError(f"no micro-batch planned in {checkpoint} since the restart")
    return min(planned)


def produce_many(settings: Settings, topic: str, n: int, rate: float, stop_file: Path
                 ) -> None:
    """The producers (a process of their own, ``--producers-of``): ``n`` instrumented
    producers in turn, one write each, ``rate`` writes a second in all, until
    ``stop_file`` exists; then each is closed (its ledger committed). One process: twenty
    of ``kafka-audit produce`` (a Python interpreter each) starved the brokers of the
    two cores here."""
    from kafka_audit.producers.instrumented import AuditedProducer
    from kafka_audit.producers.load import LoadSpec, Pacer, producer_config

    spec = LoadSpec(topic=topic, rate=rate, acks="all", idempotence=True,
                    retries=2147483647, producer_id="catchup")
    producers = [AuditedProducer(producer_config(settings, spec), f"catchup-{i}", settings)
                 for i in range(n)]
    pacer, sent, pad = Pacer(rate), 0, os.urandom(88)
    while True:
        if sent % 1000 == 0:
            for p in producers:
                p.poll(0)
            if stop_file.exists():
                break
            print(f"sent {sent} acked {sum(p.acked for p in producers)}", flush=True) \
                if sent % 100_000 == 0 else None
        if pacer.ahead(sent):
            time.sleep(0.002)
            continue
        p = producers[sent % n]
        try:
            p.produce(topic, sent.to_bytes(12, "big") + pad)
        except BufferError:
            p.poll(0.05)
            continue
        sent += 1
    for p in producers:
        p.close()
    print(f"closed: sent {sent} acked {sum(p.acked for p in producers)} failed "
          f"{sum(p.failed for p in producers)}", flush=True)
    (stop_file.parent / "produced.json").write_text(json.dumps(
        {"sent": sent, "acked": sum(p.acked for p in producers),
         "failed": sum(p.failed for p in producers)}))


class Producers:
    """:func:`produce_many` as a process of its own."""

    def __init__(self, settings: Settings, topic: str, n: int, rate: float) -> None:
        # staged ledgers (the service commits them, as for a fleet of producers: twenty
        # committing each their own every second spent a core here, in conflicts),
        # batches of a few writes a producer
        settings = settings.model_copy(update={"producer": settings.producer.model_copy(
            update={"ledger_commits": "staged", "ledger_flush_seconds": 5.0,
                    "linger_ms": 20})})
        env = {k: v for k, v in os.environ.items() if not k.startswith("KAFKA_AUDIT_")}
        env["KAFKA_AUDIT_CONFIG"] = str(settings_file(settings,
                                                      settings.home_dir / "produce.yaml"))
        self.stop_file = settings.home_dir / "produce.stop"
        self.log = open(settings.home_dir / "produce.log", "ab")  # noqa: SIM115
        self.proc = subprocess.Popen(
            [sys.executable, __file__, "--producers-of", topic, str(n), f"{rate:g}",
             str(self.stop_file)], env=env, stdout=self.log, stderr=subprocess.STDOUT)

    def stop(self) -> None:
        self.stop_file.touch()
        try:
            self.proc.wait(300)
        except subprocess.TimeoutExpired:
            self.proc.kill()
        self.log.close()

    def alive(self) -> bool:
        return self.proc.poll() is None


def peak_rss(service: Component, seconds: float | None, until=None, every: float = 2.0,
             cpu_log: list | None = None) -> dict[str, float]:
    """The highest RSS (MB) of the service's Python process and its Spark driver JVM,
    sampled every ``every`` seconds for ``seconds`` or until ``until()`` holds; with
    ``cpu_log``, each sample's time (epoch seconds) and the CPU seconds the service's
    processes (its tree: Python, API, driver JVM, Python workers) have used are appended
    to it, a last sample once ``until()`` holds."""
    peak = {"service": 0.0, "driver": 0.0}
    end = time.monotonic() + seconds if seconds is not None else None
    while True:
        done = (end is not None and time.monotonic() >= end) or bool(until and until())
        tree = process_tree(service.proc.pid)  # one walk a sample, for both figures
        if cpu_log is not None:
            cpu_log.append((time.time(), sum(_cpu_s(p) for pids in tree.values()
                                              for p in pids)))
        if done:
            return peak
        rss = rss_by_process(tree)
        peak["service"] = max(peak["service"], rss.get("kafka-audit run (Python)", 0.0))
        peak["driver"] = max(peak["driver"], rss.get("spark driver (JVM)", 0.0))
        time.sleep(every)


def cpu_at(cpu_log: list, when: float) -> float:
    """The service's CPU seconds at ``when`` (epoch seconds), interpolated between the
    :func:`peak_rss` samples around it (the first or last one outside them)."""
    after = next((i for i, (t, _c) in enumerate(cpu_log) if t > when), len(cpu_log))
    if after in (0, len(cpu_log)):
        return cpu_log[min(after, len(cpu_log) - 1)][1]
    (t0, c0), (t1, c1) = cpu_log[after - 1], cpu_log[after]
    return c0 + (c1 - c0) * (when - t0) / (t1 - t0)


def main() -> None:
    if len(sys.argv) == 6 and sys.argv[1] == "--producers-of":
        produce_many(get_settings(), sys.argv[2], int(sys.argv[3]), float(sys.argv[4]),
                     Path(sys.argv[5]))
        return
    if len(sys.argv) == 5 and sys.argv[1] == "--bare-range":
        start, end = json.loads(sys.argv[3]), json.loads(sys.argv[4])
        bare_range(get_settings(), sys.argv[2], {int(p): o for p, o in start.items()},
                   {int(p): o for p, o in end.items()})
        return
    ap = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    ap.add_argument("--outage", type=float, default=30, help="minutes the service is stopped")
    ap.add_argument("--steady", type=float, default=5, help="minutes of steady state first")
    ap.add_argument("--producers", type=int, default=20)
    ap.add_argument("--rate", type=float, default=5000, help="msg/s of all producers")
    ap.add_argument("--judge-wait", type=float, default=900)
    args = ap.parse_args()
    base = get_settings()
    cluster = fresh_cluster(base)
    home = base.home_dir / f"catchup-{time.strftime('%H%M%S')}"
    settings = base.model_copy(update={"home": home})
    home.mkdir(parents=True, exist_ok=True)
    topic = f"catchup-{uuid.uuid4().hex[:6]}"
    cluster.create_topic(topic, partitions=PARTITIONS, replication=3)
    api = f"http://{settings.api.host}:{settings.api.port}"
    checkpoint = Path(settings.checkpoint_uri("consume"))
    result: dict = {"topic": topic, "home": str(home), "args": vars(args)}
    say(f"topic {topic}, home {home}: {args.producers} producers, {args.rate:g} msg/s")
    producers = Producers(settings, topic, args.producers, args.rate)
    service = None
    try:
        service = Component(settings, "run")
        wait_until(lambda: (s := summary(api, topic)) and s["verdicts"]["confirmed"] > 0,
                   600, "the first confirmed writes over REST", every=1)
        say(f"steady state for {args.steady:g} min")
        time.sleep(args.steady * 30)
        steady = peak_rss(service, args.steady * 30)
        service.stop(120)
        _batch, stopped_at = committed_offsets(checkpoint, topic)
        say(f"service stopped (steady RSS {steady}); outage of {args.outage:g} min")
        time.sleep(args.outage * 60)
        if not producers.alive():
            raise RuntimeError("the producers died during the outage")
        restart = log_ends(cluster.admin(), topic, PARTITIONS)
        backlog = sum(restart[p] - stopped_at.get(p, 0) for p in restart)
        say(f"backlog {backlog:,} records; kafka-audit run again")
        t0, t0_wall = time.monotonic(), time.time()
        service = Component(settings, "run")

        def caught_up() -> bool:
            _b, done = committed_offsets(checkpoint, topic)
            return all(done.get(p, 0) >= end for p, end in restart.items())

        cpu_log: list = []
        catch = peak_rss(service, None, until=caught_up, cpu_log=cpu_log)
        took = time.monotonic() - t0
        # the start-up (Python, the Spark driver, the tables) until the first micro-batch
        # was planned: its offsets file's time; the reading is what follows
        first, planned_at = first_batch_after(checkpoint, t0_wall)
        start_up = planned_at - t0_wall
        reading = took - start_up
        # a batch the stop interrupted was planned before it and is run again first, in
        # the start-up: its records are not the reading's
        begun = planned_end(checkpoint, first - 1, topic) or stopped_at
        read = sum(end - begun.get(p, 0) for p, end in restart.items())
        say(f"caught up in {took:.1f}s ({start_up:.1f}s of start-up, {backlog - read:,} "
            f"records of it run again; then {reading:.1f}s reading {read:,}: "
            f"{read / reading:,.0f} msg/s); peak RSS {catch}")
        # the bare read alone beside the producers, as the catch-up was (the service's
        # audit passes, still judging the backlog, took a core from it in a first run)
        service.stop(120)
        bare_log = home / "bare.log"
        env = {k: v for k, v in os.environ.items() if not k.startswith("KAFKA_AUDIT_")}
        env["KAFKA_AUDIT_CONFIG"] = str(settings_file(base.model_copy(
            update={"home": home / "bare"}), home / "bare.yaml"))
        t_bare = time.monotonic()
        with open(bare_log, "wb") as log:
            subprocess.run([sys.executable, __file__, "--bare-range", topic,
                            json.dumps(stopped_at), json.dumps(restart)],
                           env=env, stdout=log, stderr=subprocess.STDOUT, check=True)
        bare_whole = time.monotonic() - t_bare  # its process: start-up and warm-up too
        lines = bare_log.read_text().splitlines()
        bare_s = float(next(line.split()[-1] for line in lines
                            if line.startswith("bare seconds")))
        bare_cpu, bare_cpu_whole = (float(x) for x in next(
            line.split()[2::2] for line in lines if line.startswith("bare cpu")))
        # the service's CPU: the reading's (from the first batch planned on), and the whole
        # catch-up's (its processes started at t0)
        service_cpu_whole = cpu_log[-1][1]
        service_cpu_reading = service_cpu_whole - cpu_at(cpu_log, planned_at)
        service = Component(settings, "run")  # to judge what is left
        producers.stop()
        total = sum(log_ends(cluster.admin(), topic, PARTITIONS).values())
        produced = json.loads((home / "produced.json").read_text())
        say(f"producers stopped: {produced}, {total:,} in the log; waiting for every verdict")

        def judged() -> bool:  # every delivery report in the ledger, each judged
            s = summary(api, topic)
            return bool(s) and s["acked"] == produced["sent"] and s["pending"] == 0

        t1, deadline = time.monotonic(), time.monotonic() + args.judge_wait
        while not judged() and time.monotonic() < deadline:
            time.sleep(2)
        judged_in = time.monotonic() - t1 if judged() else None
        final = summary(api, topic)
        say(f"judged: {final} ({'all' if judged_in is not None else 'NOT all'} after "
            f"{time.monotonic() - t1:.0f}s)")
        service.stop(120)
        result.update({
            "backlog": backlog, "catch_up_seconds": round(took, 1),
            "catch_up_rate": round(backlog / took), "start_up_seconds": round(start_up, 1),
            "reading_seconds": round(reading, 1), "reading_records": read,
            "reading_rate": round(read / reading),
            "bare_seconds": bare_s, "bare_rate": round(backlog / bare_s),
            "bare_whole_seconds": round(bare_whole, 1),
            "cpu_us_per_record": {
                "reading": round(service_cpu_reading / read * 1e6, 2),
                "bare": round(bare_cpu / backlog * 1e6, 2),
                "catch_up_whole": round(service_cpu_whole / backlog * 1e6, 2),
                "bare_whole": round(bare_cpu_whole / backlog * 1e6, 2)},
            "cpu_ratio": round(bare_cpu / backlog / (service_cpu_reading / read), 3),
            "cpu_ratio_whole": round(bare_cpu_whole / service_cpu_whole, 3),
            "ratio": round(read / reading / (backlog / bare_s), 3),
            "ratio_whole": round(bare_whole / took, 3),
            "steady_rss": steady, "catch_up_rss": catch,
            "rss_ratio": {k: round(catch[k] / max(1.0, steady[k]), 2) for k in steady},
            "log_end": total, "produced": produced, "summary": final,
            "judged_after_load": judged_in and round(judged_in),
            "judged_once": judged_in is not None
            and sum(final["verdicts"].values()) == final["acked"],
            "all_confirmed": final["verdicts"].get("confirmed") == produced["acked"],
        })
    finally:
        if service is not None:
            service.stop(120)
        if producers.alive():
            producers.stop()
        cluster_down(cluster)
    (home / "catchup.json").write_text(json.dumps(result, indent=1, default=str))
    print()
    print(f"backlog {result['backlog']:,} records after {args.outage:g} min at "
          f"{args.rate:g} msg/s ({args.producers} producers)")
    print(f"caught up in {result['catch_up_seconds']}s ({result['start_up_seconds']}s of "
          f"start-up, then {result['reading_seconds']}s reading {result['reading_records']:,}: "
          f"{result['reading_rate']:,} msg/s); bare read of the same offsets "
          f"{result['bare_rate']:,} msg/s: ratio "
          f"{result['ratio']} (goal >= 0.8)")
    print(f"with the start-up on both sides: {result['catch_up_seconds']}s against the bare "
          f"read's process {result['bare_whole_seconds']}s (its JVM and warm-up read too): "
          f"ratio {result['ratio_whole']}")
    cpu = result["cpu_us_per_record"]
    print(f"CPU per record: reading {cpu['reading']} µs (the service's processes) against "
          f"the bare read's {cpu['bare']} µs: ratio {result['cpu_ratio']}; whole processes "
          f"{cpu['catch_up_whole']} against {cpu['bare_whole']} µs: ratio "
          f"{result['cpu_ratio_whole']}")
    for k in ("service", "driver"):
        print(f"peak RSS {k}: steady {result['steady_rss'][k]:.0f} MB, catching up "
              f"{result['catch_up_rss'][k]:.0f} MB: {result['rss_ratio'][k]}x (goal <= 1.5)")
    print(f"every write judged once: {result['judged_once']} (all judged "
          f"{result['judged_after_load']}s after the load; --judge-wait {args.judge_wait:g}); "
          f"all confirmed: {result['all_confirmed']} ({result['produced']}; "
          f"{result['log_end']:,} in the log)")


if __name__ == "__main__":
    main()
