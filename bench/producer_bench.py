"""Producer benchmark: what auditing costs the producing process, per message.

One local 3-node cluster, one RF=3 topic of 3 partitions, acks=all, the same producer
settings for every variant; each round of each variant runs in a process of its own
(nothing left over from the others: threads, memory, a promoted library) and measures
that process's CPU time (``getrusage``: every thread, librdkafka's included) from just
before the producer is created until it is closed, its ledger committed. CPU time is
far steadier than wall throughput on 2 cores shared with three brokers (FIELD-NOTES:
Measuring on 2 cores); wall rates are printed beside it. Rounds are interleaved
(variant after variant, then again), medians reported.

Variants:

* ``bare+cb``: confluent-kafka ``Producer`` with a minimal error-checking callback;
* ``bare+cb+hdr``: the same, every record with a constant ``kaudit`` header of the
  stamp's size (the stamp's own cost on the wire and inside librdkafka);
* ``bare+cb+chdr``: ``bare+cb`` with the same constant header added in C, by an
  interceptor that does nothing else (``bench/const_header.c``): librdkafka's own cost
  of a header, without confluent-kafka's conversion of a Python header list;
* ``bare+cb+chdr+ack``: the same interceptor also reading the header back in
  on_acknowledgement: the floor of any ledger that maps each stamp to its offset from the
  delivery report (the header of a message sent milliseconds before is out of the cache);
* ``plugin``: ``bare+cb`` with the kaudit plugin loaded (stamp + spool), fsync as the
  default (1000 ms), no shipper: the plugin's share;
* ``plugin-nosync``: the same with ``kaudit.spool.fsync.ms=-1`` (the page cache only);
* ``audited``: ``AuditedProducer`` on the native path (the default): plugin + shipper
  thread committing the ``acks`` table every second;
* ``audited+staged``: the same with ``producer.ledger_commits: staged``: the shipper
  hands a batch file a second to the service's committer instead of committing it;
* ``python``: ``AuditedProducer`` on the pure-Python path (the fallback);
* ``audited+mac``, ``python+mac``: the same two with a stamp key (``stamp.key_file``): a
  ``kaudit-mac`` header (HMAC-SHA256 of the stamp, 16 bytes) beside every stamp, the cost
  of forged-stamp detection (``schemas/stamp.py``, The stamp MAC).

Every variant passes the same minimal error-checking delivery callback with each record
(an application's own; ``AuditedProducer`` calls it as confluent-kafka does).

Target (issue 40): ``audited`` >= 0.97 x ``bare+cb+chdr`` at both sizes (issue 12's was
against ``bare+cb+hdr``, whose header conversion in Python flatters). Ratios are of
messages per CPU second (the inverse of CPU per message). A run's medians move by
10-30% from run to run on the shared 2 cores: pool the rounds of several runs, each
round paired with its own ``bare+cb+chdr`` (``bench/README.md``). After each audited
round the ledger is compacted, as the service's minute rounds do.

Run: ``bash dev.sh bench [--messages 200000] [--rounds 5] [--sizes 100,1024]``.
"""

from __future__ import annotations

import argparse
import json
import os
import resource
import statistics
import subprocess
import sys
import tempfile
import time
import uuid
from pathlib import Path

VARIANTS = ["bare+cb", "bare+cb+hdr", "bare+cb+chdr", "bare+cb+chdr+ack", "plugin",
            "plugin-nosync", "audited", "audited+staged", "python", "audited+mac",
            "python+mac"]


def conf(bootstrap: str) -> dict:
    from kafka_audit.clients import client_logger

    return {"bootstrap.servers": bootstrap, "acks": "all", "linger.ms": 5,
            "batch.num.messages": 10000, "queue.buffering.max.messages": 2_000_000,
            "logger": client_logger()}


def usage() -> tuple[float, int]:
    """The process's CPU seconds (every thread) and minor page faults so far, from one
    ``getrusage``. Each minor fault is a fresh page the kernel zeroes (``clear_page``:
    11-24% of a round's samples at 1 KiB, perf, 2026-12-03), a share that follows how far
    the producer runs ahead of the brokers (bench/README.md)."""
    r = resource.getrusage(resource.RUSAGE_SELF)
    return r.ru_utime + r.ru_stime, r.ru_minflt


def cpu_seconds() -> float:
    return usage()[0]


def header_interceptor(home: Path, ack: bool = False) -> Path:
    """``bench/const_header.c`` built with the plugin's gcc flags (once per bench run), with
    the wheel's librdkafka promoted so that it loads; ``ack``: the build that also reads
    the header back in on_acknowledgement."""
    from kafka_audit.jars import PLUGIN_CFLAGS
    from kafka_audit.producers.native import promote_librdkafka

    lib = home / ("libconstheader-ack.so" if ack else "libconstheader.so")
    if not lib.exists():
        subprocess.run(["gcc", *PLUGIN_CFLAGS, *(["-DWITH_ACK"] if ack else []), "-o", str(lib),
                        str(Path(__file__).with_name("const_header.c"))], check=True)
    promote_librdkafka()
    return lib


def produce_all(p, topic: str, n: int, value: bytes, **kw) -> None:
    # the topic's partitions first: a producer that has no metadata yet queues its records
    # unassigned and spreads them one by one when it learns them (not the steady state)
    getattr(p, "_producer", p).list_topics(topic, timeout=30)
    produce = p.produce
    poll = p.poll
    for i in range(n):
        while True:
            try:
                produce(topic, value, **kw)
                break
            except BufferError:  # librdkafka's queue is full (1 GiB): let the brokers catch up
                poll(0.05)
        if i % 1000 == 0:
            poll(0)


def worker(variant: str, bootstrap: str, topic: str, n: int, size: int, home: str) -> dict:
    """One round of one variant in this process, after a warm-up round of 2,000 messages
    (what a process pays once: delta-rs's runtime, the first read of the table's log, the
    plugin's load); its CPU seconds and wall seconds, from creating the producer to closing
    it (for the audited ones: its ledger committed)."""
    one_round(variant, bootstrap, topic, 2000, size, home)
    return one_round(variant, bootstrap, topic, n, size, home)


def one_round(variant: str, bootstrap: str, topic: str, n: int, size: int, home: str) -> dict:
    import shutil

    import deltalake  # noqa: F401 - imports are the process's, not the messages' cost
    import numpy  # noqa: F401
    import pyarrow  # noqa: F401
    from confluent_kafka import Producer

    from kafka_audit.producers.instrumented import AuditedProducer
    from kafka_audit.producers.native import load_plugin, plugin_properties
    from kafka_audit.settings import Settings

    value = os.urandom(size)
    settings = Settings(home=home)
    if variant.endswith("+mac"):  # a stamp key: a MAC beside every stamp
        key = Path(home) / "stamp.key"
        if not key.exists():
            key.write_bytes(os.urandom(32))
            key.chmod(0o600)
        settings = Settings(home=home, stamp={"key_file": str(key)})
        variant = variant.removesuffix("+mac")
    if variant.endswith("+staged"):  # the commits left to the service: a file a ship
        settings = Settings(home=home, producer={"ledger_commits": "staged"})
        variant = variant.removesuffix("+staged")
    errors = [0]

    def on_delivery(err, _msg):
        if err is not None:
            errors[0] += 1

    extra: dict = {}
    plugin = load_plugin() if variant in ("plugin", "plugin-nosync", "audited") else None
    run_id = f"{time.strftime('%Y%m%dT%H%M%S')}-{uuid.uuid4().hex[:8]}"
    stamp_len = 19 + len("bench") + len(run_id)
    t0, (c0, f0) = time.perf_counter(), usage()
    if variant in ("audited", "python"):
        p = AuditedProducer(conf(bootstrap), "bench", settings, run_id=run_id,
                            native=variant == "audited")
        # the same minimal error-checking callback as the bare variants: an application's
        # own callback, which AuditedProducer calls as confluent-kafka does
        produce_all(p, topic, n, value, on_delivery=on_delivery)
        p.close()
        if errors[0] or p.acked != n or p.ledger.reports_written != n:
            raise RuntimeError(f"{variant}: acked {p.acked}, ledgered "
                               f"{p.ledger.reports_written} of {n}")
        extra["ledger_rows"] = p.ledger.rows_written
    else:
        c = conf(bootstrap)
        spool = Path(home) / "spool-unshipped"  # never shipped: apart from the ledger's
        if plugin is not None:
            c.update(plugin_properties(plugin, spool, "bench", run_id,
                                       -1 if variant == "plugin-nosync" else None))
        if variant.startswith("bare+cb+chdr"):
            c["plugin.library.paths"] = str(header_interceptor(Path(home),
                                                               variant.endswith("+ack")))
        p = Producer(c)
        kw = {"on_delivery": on_delivery}
        if variant == "bare+cb+hdr":
            kw["headers"] = [("kaudit", b"\0" * stamp_len)]
        produce_all(p, topic, n, value, **kw)
        left = p.flush(120)
        p.close()
        if left or errors[0]:
            raise RuntimeError(f"{variant}: {left} undelivered, {errors[0]} errors")
        (c1, f1), wall = usage(), time.perf_counter() - t0
        shutil.rmtree(spool, ignore_errors=True)
        return {"cpu": c1 - c0, "wall": wall, "faults": f1 - f0}
    (c1, f1), wall = usage(), time.perf_counter() - t0
    return {"cpu": c1 - c0, "wall": wall, "faults": f1 - f0, **extra}


def run_round(variant: str, bootstrap: str, topic: str, n: int, size: int, home: Path) -> dict:
    out = subprocess.run([sys.executable, __file__, "--worker", variant, "--bootstrap",
                          bootstrap, "--topic", topic, "--messages", str(n), "--size",
                          str(size), "--home", str(home)], capture_output=True, text=True)
    if out.returncode != 0:
        raise RuntimeError(f"{variant} round failed:\n{out.stderr[-3000:]}")
    return json.loads(out.stdout.strip().splitlines()[-1])


def main() -> int:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--messages", type=int, default=200_000)
    ap.add_argument("--rounds", type=int, default=5)
    ap.add_argument("--sizes", default="100,1024", help="value sizes in bytes, comma-separated")
    ap.add_argument("--variants", default=",".join(VARIANTS))
    ap.add_argument("--worker", help=argparse.SUPPRESS)
    ap.add_argument("--bootstrap", help=argparse.SUPPRESS)
    ap.add_argument("--topic", help=argparse.SUPPRESS)
    ap.add_argument("--size", type=int, help=argparse.SUPPRESS)
    ap.add_argument("--home", help=argparse.SUPPRESS)
    args = ap.parse_args()
    if args.worker:
        print(json.dumps(worker(args.worker, args.bootstrap, args.topic, args.messages,
                                args.size, args.home)))
        return 0

    from kafka_audit.jobs.upkeep.maintenance import LEDGER_ROUND_TARGET_MB
    from kafka_audit.scenarios.cluster import LocalCluster
    from kafka_audit.settings import Settings, get_settings
    from kafka_audit.store import compact

    sys.path.insert(0, str(Path(__file__).resolve().parent))
    from audit_bench import drop_topic

    base = get_settings()
    cluster = LocalCluster(base)
    was_running = bool(cluster.running())
    cluster.up(print)
    home = Path(tempfile.mkdtemp(prefix="kafka-audit-bench-"))
    ledger = Settings(home=home).table_path("acks")
    variants = args.variants.split(",")
    sizes = [int(s) for s in args.sizes.split(",")]
    results: dict[tuple[int, str], list[dict]] = {}

    def fresh_round(v: str, messages: int, size: int) -> dict:
        # a topic of its own, dropped after: 2M records of 1 KiB are 6 GB with RF=3, and
        # rounds must not fill the disk (nor find a longer log than the round before)
        topic = f"bench-{uuid.uuid4().hex[:6]}"
        cluster.create_topic(topic, partitions=3, replication=3)
        try:
            got = run_round(v, cluster.bootstrap, topic, messages, size, home)
        finally:
            drop_topic(cluster, topic)
        if v.startswith("audited"):
            # as the service's ledger rounds do (steady.ledger_compact_every_seconds): a
            # commit's CPU grows with the table's live files (bench/commit_cost.py), and
            # without them each round would meet every earlier round's files
            compact(ledger, int(LEDGER_ROUND_TARGET_MB * 2**20))
        return got

    try:
        fresh_round("bare+cb", args.messages // 4, 100)  # warm-up
        for r in range(args.rounds):
            for size in sizes:
                line = []
                for v in variants:
                    got = fresh_round(v, args.messages, size)
                    results.setdefault((size, v), []).append(got)
                    line.append(f"{v} {got['cpu'] / args.messages * 1e6:.2f}us")
                print(f"round {r + 1} {size:>5} B: " + ", ".join(line), flush=True)
    finally:
        if not was_running:
            cluster.down()
    n = args.messages
    print(f"\nmedians of {args.rounds} interleaved rounds x {n:,} messages (acks=all, RF=3, "
          "3 partitions); CPU of the producing process, all threads")
    for size in sizes:
        cpu = {v: statistics.median(x["cpu"] for x in results[(size, v)]) / n * 1e6
               for v in variants}
        wall = {v: n / statistics.median(x["wall"] for x in results[(size, v)])
                for v in variants}
        faults = {v: statistics.median(x["faults"] for x in results[(size, v)]) / n
                  for v in variants}
        print(f"\n{size} B values")
        for v in variants:
            print(f"  {v:<17} {cpu[v]:6.2f} us/msg   {wall[v]:>10,.0f} msg/s wall   "
                  f"{faults[v]:.3f} page faults/msg")
        for v in ("audited", "audited+staged", "plugin", "bare+cb+chdr+ack"):
            for base_v in ("bare+cb+chdr", "bare+cb+chdr+ack", "bare+cb+hdr", "bare+cb"):
                if v in cpu and base_v in cpu and base_v != v:
                    print(f"  {v} vs {base_v:<17} {cpu[base_v] / cpu[v]:.3f}")
        if "python" in cpu and "bare+cb" in cpu:
            print(f"  python  vs bare+cb      {cpu['bare+cb'] / cpu['python']:.3f}")
        for path in ("audited", "python"):  # what the stamp MAC costs each path
            if f"{path}+mac" in cpu and path in cpu:
                print(f"  {path}+mac vs {path:<8} {cpu[path] / cpu[path + '+mac']:.3f} "
                      f"({cpu[path + '+mac'] - cpu[path]:+.2f} us/msg)")
        rows = [x.get("ledger_rows") for x in results.get((size, "audited"), [])]
        if rows and rows[0]:
            print(f"  ledger rows per message (audited): {statistics.median(rows) / n:.5f}")
    return 0


if __name__ == "__main__":
    sys.exit(main())
