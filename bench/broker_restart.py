"""How long a SIGKILLed broker takes to come back, per set of JVM options.

A cluster of its own (ports 22091-22393, under ``/tmp/kafka-audit-broker-restart``), 20
topics of 3 partitions; each round SIGKILLs node 1 and restarts it with each set of
options in turn (interleaved), timing until it is registered and back in every ISR.
``--busy N`` keeps N cores busy meanwhile, as the test suite's producer and Spark do.

    .venv/bin/python bench/broker_restart.py --rounds 3 --busy 1
"""

from __future__ import annotations

import argparse
import multiprocessing
import statistics
import time
from pathlib import Path

from steady import cluster_of_its_own, settings_of_its_own

from kafka_audit.scenarios.cluster import wait_until

OFFSET = 3000
TOPICS = 20
VARIANTS = {"default": "", "c1 (-XX:TieredStopAtLevel=1)": "-XX:TieredStopAtLevel=1"}


def _spin() -> None:
    while True:
        pass


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    ap.add_argument("--rounds", type=int, default=3)
    ap.add_argument("--busy", type=int, default=0, help="cores kept busy meanwhile")
    args = ap.parse_args()
    home = Path("/tmp/kafka-audit-broker-restart")
    cluster = cluster_of_its_own(settings_of_its_own(home, OFFSET))
    spinners = [multiprocessing.Process(target=_spin, daemon=True) for _ in range(args.busy)]
    times: dict[str, list[tuple[float, float]]] = {k: [] for k in VARIANTS}
    try:
        cluster.up(print)
        for i in range(TOPICS):
            cluster.create_topic(f"t{i}", partitions=3, replication=3)
        for s in spinners:
            s.start()
        node = 1
        for r in range(args.rounds):
            for name, options in VARIANTS.items():
                cluster.cfg = cluster.cfg.model_copy(update={"jvm_options": options})
                cluster.kill(node)
                wait_until(lambda: node not in cluster.registered_brokers(), 60, "fenced")
                t0 = time.monotonic()
                cluster.start(node)
                wait_until(lambda: node in cluster.registered_brokers(), 120, "registered",
                           every=0.2)
                registered = time.monotonic() - t0
                wait_until(lambda: all(node in p.isr for i in range(TOPICS)
                                       for p in cluster.partitions(f"t{i}")),
                           120, "back in every ISR", every=0.2)
                times[name].append((registered, time.monotonic() - t0))
                print(f"round {r + 1} {name}: registered {registered:.1f} s, in every ISR "
                      f"{times[name][-1][1]:.1f} s", flush=True)
    finally:
        for s in spinners:
            s.terminate()
        cluster.down()
    for name, t in times.items():
        print(f"{name}: median registered {statistics.median(a for a, _ in t):.1f} s, in "
              f"every ISR {statistics.median(b for _, b in t):.1f} s ({len(t)} rounds)")


if __name__ == "__main__":
    main()
