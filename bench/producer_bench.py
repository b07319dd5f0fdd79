"""Producer benchmark: what the instrumentation costs on the delivery path.

One process, one local 3-node cluster, one RF=3 topic, acks=all, same payload
and producer settings for all three variants, run in interleaved rounds:

* ``bare+cb``: confluent-kafka Producer with a minimal error-checking callback;
* ``bare``: the same without a callback;
* ``audited``: AuditedProducer (stamp header, CRC32, delivery record) with its
  ledger writing every delivery report to the Delta ``acks`` table.

Each round produces N messages as fast as possible and ends when every
delivery report is in (and, for ``audited``, when the ledger has committed
them). Prints the median messages/s per variant and the ratios.

It also reports where the ledger's writer spends its time per message
(converting reports to Arrow, spooling, committing to Delta), by timing those
three methods: they share the GIL with the producing thread.

Run: ``bash dev.sh bench [--messages 200000] [--rounds 3]``.
"""

from __future__ import annotations

import argparse
import collections
import statistics
import sys
import tempfile
import time
import uuid
from pathlib import Path

from confluent_kafka import Producer

from kafka_audit.clients import client_logger
from kafka_audit.deploy.cluster import LocalCluster
from kafka_audit.producers import ledger
from kafka_audit.producers.instrumented import AuditedProducer
from kafka_audit.settings import Settings, get_settings

sys.path.insert(0, str(Path(__file__).resolve().parent))
from audit_bench import drop_topic  # noqa: E402 - shared with it

PAYLOAD = b"x" * 100


def conf(bootstrap: str) -> dict:
    return {"bootstrap.servers": bootstrap, "acks": "all", "linger.ms": 5,
            "batch.num.messages": 10000, "queue.buffering.max.messages": 2_000_000,
            "logger": client_logger()}


def run_bare(bootstrap: str, topic: str, n: int, callback: bool) -> float:
    p = Producer(conf(bootstrap))
    errors = [0]

    def on_delivery(err, _msg):
        if err is not None:
            errors[0] += 1

    produce = p.produce
    t = time.perf_counter()
    if callback:
        for i in range(n):
            produce(topic, PAYLOAD, on_delivery=on_delivery)
            if i % 1000 == 0:
                p.poll(0)
    else:
        for i in range(n):
            produce(topic, PAYLOAD)
            if i % 1000 == 0:
                p.poll(0)
    left = p.flush(120)
    dt = time.perf_counter() - t
    if left or errors[0]:
        raise RuntimeError(f"bare producer: {left} undelivered, {errors[0]} errors")
    return n / dt


LEDGER_PHASES = {"to Arrow": (ledger.AckLedger, "_to_table"),
                 "spool": (ledger.SpoolCommitter, "spool"),
                 "Delta commit": (ledger.SpoolCommitter, "commit")}
ledger_seconds: collections.Counter = collections.Counter()


def time_ledger_phases() -> None:
    for phase, (cls, name) in LEDGER_PHASES.items():
        method = getattr(cls, name)

        def timed(*a, _method=method, _phase=phase, **k):
            t = time.perf_counter()
            try:
                return _method(*a, **k)
            finally:
                ledger_seconds[_phase] += time.perf_counter() - t

        setattr(cls, name, timed)


def run_audited(settings: Settings, topic: str, n: int) -> float:
    p = AuditedProducer(conf(settings.cluster.bootstrap), "bench", settings)
    produce = p.produce
    t = time.perf_counter()
    for i in range(n):
        produce(topic, PAYLOAD)
        if i % 1000 == 0:
            p.poll(0)
    p.close()
    dt = time.perf_counter() - t
    if p.acked != n or p.ledger.reports_written != n:
        raise RuntimeError(f"audited: acked {p.acked}, ledgered {p.ledger.reports_written} of {n}")
    return n / dt


def main() -> int:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--messages", type=int, default=200_000)
    ap.add_argument("--rounds", type=int, default=3)
    args = ap.parse_args()

    time_ledger_phases()
    base = get_settings()
    cluster = LocalCluster(base)
    was_running = bool(cluster.running())
    cluster.up(print)
    topic = f"bench-{uuid.uuid4().hex[:6]}"
    cluster.create_topic(topic, partitions=3, replication=3)
    work = Path(tempfile.mkdtemp(prefix="kafka-audit-bench-"))
    settings = Settings(home=work, cluster=base.cluster.model_dump())
    results: dict[str, list[float]] = {"bare+cb": [], "bare": [], "audited": []}
    try:
        run_bare(cluster.bootstrap, topic, args.messages // 4, True)  # warm-up
        for r in range(args.rounds):
            results["bare+cb"].append(run_bare(cluster.bootstrap, topic, args.messages, True))
            results["bare"].append(run_bare(cluster.bootstrap, topic, args.messages, False))
            results["audited"].append(run_audited(settings, topic, args.messages))
            print(f"round {r + 1}: " + ", ".join(f"{k} {v[-1]:,.0f}/s"
                                                 for k, v in results.items()), flush=True)
    finally:
        drop_topic(cluster, topic)
        if not was_running:
            cluster.down()
    med = {k: statistics.median(v) for k, v in results.items()}
    print(f"\nmedian of {args.rounds} rounds x {args.messages:,} messages "
          f"(100-byte values, acks=all, RF=3, 3 partitions)")
    for k, v in med.items():
        print(f"  {k:<8} {v:>10,.0f} msg/s")
    print(f"  audited / bare+cb = {med['audited'] / med['bare+cb']:.3f}   (target >= 0.97)")
    print(f"  audited / bare    = {med['audited'] / med['bare']:.3f}")
    print(f"  bare+cb / bare    = {med['bare+cb'] / med['bare']:.3f}")
    total = args.messages * args.rounds
    print("ledger writer time per audited message: " + ", ".join(
        f"{phase} {ledger_seconds[phase] / total * 1e6:.2f} us" for phase in LEDGER_PHASES))
    return 0


if __name__ == "__main__":
    sys.exit(main())
