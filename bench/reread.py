"""How long a direct re-read of a range near a partition's end takes, per records asked of
one ``consume`` call: the offsets left (``jobs/reread.batch_size``, since 2026-11-26) against
5,000 a call as before.

A cluster of its own (ports 23091-23393, under ``/tmp/kafka-audit-reread``), one topic of 3
partitions written at ``--rate`` msg/s by a plain producer; each round re-reads, with each
way in turn (interleaved, one warm consumer as the audit loop keeps), the ``--records``
offsets that end ``--behind`` offsets before partition 0's end, as ``jobs/lookups.py``
does after a kill. Wall time per re-read (the pass waits for it), medians:

    .venv/bin/python bench/reread.py --rounds 10
"""

from __future__ import annotations

import argparse
import os
import statistics
import threading
import time
from pathlib import Path

from steady import cluster_of_its_own

from kafka_audit.jobs import reread as rr
from kafka_audit.jobs.model import Reread

OFFSET = 4000
WAYS = {"offsets left": rr.batch_size, "5,000 a call": lambda pos, stop: rr.MAX_BATCH}


def _produce(bootstrap: str, topic: str, rate: float, stop: threading.Event) -> None:
    from confluent_kafka import Producer

    p, pad, start, i = Producer({"bootstrap.servers": bootstrap, "acks": "1",
                                 "linger.ms": 5}), os.urandom(100), time.monotonic(), 0
    while not stop.is_set():
        if i > (time.monotonic() - start) * rate:
            p.poll(0.005)
            continue
        try:
            p.produce(topic, pad)
            i += 1
        except BufferError:
            p.poll(0.05)
    p.flush(10)


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    ap.add_argument("--rounds", type=int, default=10)
    ap.add_argument("--rate", type=float, default=5000, help="msg/s into the topic")
    ap.add_argument("--records", type=int, default=300, help="offsets re-read")
    ap.add_argument("--behind", type=int, default=100,
                    help="offsets between the range's end and the partition's end")
    args = ap.parse_args()
    from confluent_kafka import Consumer, TopicPartition

    home = Path("/tmp/kafka-audit-reread")
    cluster = cluster_of_its_own(home, OFFSET)
    stop = threading.Event()
    times: dict[str, list[float]] = {k: [] for k in WAYS}
    try:
        cluster.up(print)
        cluster.create_topic("t", partitions=3, replication=3)
        bootstrap = cluster.bootstrap
        producer = threading.Thread(target=_produce, args=(bootstrap, "t", args.rate, stop),
                                    daemon=True)
        producer.start()
        c = Consumer({"bootstrap.servers": bootstrap, "group.id": "bench-reread",
                      "enable.auto.commit": False, "auto.offset.reset": "error",
                      "enable.partition.eof": True})
        time.sleep(5)  # the log holds some seconds of writes before the first round
        for r in range(args.rounds):
            for name, way in WAYS.items():
                rr.batch_size = way
                _low, high = c.get_watermark_offsets(TopicPartition("t", 0), timeout=10)
                end = high - args.behind
                t0 = time.monotonic()
                runs = rr._reread_one(c, Reread("t", 0, end - args.records, end, "bench"), 30)
                times[name].append(time.monotonic() - t0)
                answered = sum(x.count for x in runs)
                assert answered == args.records, f"{answered} offsets answered"
                print(f"round {r + 1} {name}: {times[name][-1] * 1000:.0f} ms", flush=True)
        c.close()
    finally:
        stop.set()
        cluster.down()
    for name, t in times.items():
        print(f"{name}: median {statistics.median(t) * 1000:.0f} ms, {min(t) * 1000:.0f}-"
              f"{max(t) * 1000:.0f} ms over {len(t)} re-reads")


if __name__ == "__main__":
    main()
