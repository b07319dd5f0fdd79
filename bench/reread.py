"""How long a direct re-read of a range near a partition's end takes, per records asked of
one ``consume`` call: the offsets left (``jobs/reread.batch_size``, since 2026-11-26) against
5,000 a call as before.

A cluster of its own (ports 23091-23393, under ``/tmp/kafka-audit-reread``), one topic of 3
partitions written at ``--rate`` msg/s by the project's load generator (stamped records, as
the audit re-reads them); each round re-reads, with each
way in turn (interleaved, one warm consumer as the audit loop keeps), the ``--records``
offsets that end ``--behind`` offsets before partition 0's end, as ``jobs/audit/lookups.py``
does after a kill. Wall time per re-read (the pass waits for it), medians:

    .venv/bin/python bench/reread.py --rounds 10

``--checksum`` compares instead the two XXH64s of the plugin's stamps (the records of
the load generator carry them): the ``xxhash`` package against the pure-Python reference
(``schemas/stamp.py``), by this process's CPU time per re-read, e.g. of a fail-over's
range: ``--checksum --records 100000 --behind 0 --rounds 6``.
"""

from __future__ import annotations

import argparse
import statistics
import threading
import time
from pathlib import Path

from steady import cluster_of_its_own, settings_of_its_own

from kafka_audit.jobs.audit import reread as rr
from kafka_audit.jobs.core.model import Reread
from kafka_audit.producers.load import LoadSpec, run_load
from kafka_audit.scenarios.cluster import wait_until
from kafka_audit.schemas import stamp

OFFSET = 4000
WAYS = {"offsets left": rr.batch_size, "5,000 a call": lambda pos, stop: rr.MAX_BATCH}
CHECKSUMS = {"xxhash package": stamp.xxh64, "pure Python": stamp.xxh64_reference}


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    ap.add_argument("--rounds", type=int, default=10)
    ap.add_argument("--rate", type=float, default=5000, help="msg/s into the topic")
    ap.add_argument("--records", type=int, default=300, help="offsets re-read")
    ap.add_argument("--behind", type=int, default=100,
                    help="offsets between the range's end and the partition's end")
    ap.add_argument("--checksum", action="store_true",
                    help="compare the XXH64s (CPU time) instead of the batch sizes")
    args = ap.parse_args()
    ways = CHECKSUMS if args.checksum else WAYS
    from confluent_kafka import Consumer, TopicPartition

    settings = settings_of_its_own(Path("/tmp/kafka-audit-reread"), OFFSET)
    cluster = cluster_of_its_own(settings)
    stop, producer = threading.Event(), None
    times: dict[str, list[float]] = {k: [] for k in ways}
    try:
        cluster.up(print)
        cluster.create_topic("t", partitions=3, replication=3)
        bootstrap = cluster.bootstrap
        producer = threading.Thread(target=run_load, args=(
            settings, LoadSpec("t", args.rate, acks="1", producer_id="bench-reread"), stop),
            daemon=True)
        producer.start()
        c = Consumer({"bootstrap.servers": bootstrap, "group.id": "bench-reread",
                      "enable.auto.commit": False, "auto.offset.reset": "error",
                      "enable.partition.eof": True})
        tp = TopicPartition("t", 0)
        enough = (1 if args.checksum else 10) * (args.records + args.behind)
        wait_until(lambda: c.get_watermark_offsets(tp, timeout=10)[1] >= enough, 600,
                   "records in partition 0 before the first round")
        if args.checksum:  # a range that stays put: the load stops
            stop.set()
            producer.join(60)
        clock = time.process_time if args.checksum else time.monotonic
        for r in range(args.rounds):
            for name, way in ways.items():
                if args.checksum:
                    stamp.xxh64 = way
                else:
                    rr.batch_size = way
                _low, high = c.get_watermark_offsets(tp, timeout=10)
                end = high - args.behind
                t0 = clock()
                runs = rr._reread_one(c, Reread("t", 0, end - args.records, end, "bench"), 60)
                times[name].append(clock() - t0)
                answered = sum(x.count for x in runs)
                assert answered == args.records, f"{answered} offsets answered"
                print(f"round {r + 1} {name}: {times[name][-1] * 1000:.0f} ms", flush=True)
        c.close()
    finally:
        stop.set()
        if producer is not None:
            producer.join(60)  # flushed and closed before its cluster goes
        cluster.down()
    what = "CPU" if args.checksum else "wall"
    for name, t in times.items():
        print(f"{name}: median {statistics.median(t) * 1000:.0f} ms {what}, "
              f"{min(t) * 1000:.0f}-{max(t) * 1000:.0f} ms over {len(t)} re-reads")


if __name__ == "__main__":
    main()
