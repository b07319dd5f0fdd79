"""Kafka holds a partition's high watermark while its ISR is below ``min.insync.replicas``
(3.7+, KIP-966), however many ``acks=1`` writes its leader acknowledges above it: the fact
``rules.beyond_end`` waits on (a write there is on the leader, not past the log's end).

On a fresh local cluster (its own home and ports: see the command): a topic of one
partition, RF 3, ``min.insync.replicas=2``; 100 ``acks=1`` writes, then the leader's
replication listener cut (``scenarios/faults.py``) while ``acks=1`` writes go on. Every
2 s it prints the ISR, the highest offset acknowledged and the high watermark the leader
answers (a consumer's ``get_watermark_offsets``, asked anew); then the cut is healed and
the same once the ISR is whole.

Run (root: the cut is an iptables rule)::

    KAFKA_AUDIT_HOME=var/held KAFKA_AUDIT_CLUSTER__BROKER_BASE_PORT=24091 \\
    KAFKA_AUDIT_CLUSTER__CONTROLLER_BASE_PORT=24191 \\
    KAFKA_AUDIT_CLUSTER__REPLICATION_BASE_PORT=24291 \\
        .venv/bin/python bench/held_watermark.py [--seconds 24]
"""

from __future__ import annotations

import argparse
import time

from confluent_kafka import Consumer, Producer, TopicPartition
from steady import say

from kafka_audit.scenarios.cluster import LocalCluster, wait_until
from kafka_audit.scenarios.faults import cut_port
from kafka_audit.settings import get_settings

TOPIC = "held-watermark"


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    ap.add_argument("--seconds", type=float, default=24, help="how long the cut lasts")
    args = ap.parse_args()
    cluster = LocalCluster(get_settings())
    cluster.discard()
    cluster.up(say)
    try:
        cluster.create_topic(TOPIC, 1, 3, config={"min.insync.replicas": "2"})
        acked: list[int] = []
        p = Producer({"bootstrap.servers": cluster.bootstrap, "acks": "1", "linger.ms": 5})

        def write(n: int) -> None:
            for _ in range(n):
                p.produce(TOPIC, b"x", on_delivery=lambda err, m: err or acked.append(
                    m.offset()))
            p.flush(10)

        def watermark() -> int:
            c = Consumer({"bootstrap.servers": cluster.bootstrap, "group.id": TOPIC})
            try:
                return c.get_watermark_offsets(TopicPartition(TOPIC, 0), timeout=5,
                                               cached=False)[1]
            finally:
                c.close()

        def line(when: str) -> None:
            say(f"{when}: isr {cluster.partitions(TOPIC)[0].isr}, acknowledged up to "
                f"{max(acked)}, high watermark {watermark()}")

        write(100)
        line("before the cut")
        leader = cluster.leader_of(TOPIC, 0)
        with cut_port(cluster.cfg.replication_port(leader)):
            end = time.monotonic() + args.seconds
            while time.monotonic() < end:
                write(50)  # a follower falls out of sync only while it misses writes
                line(f"cut, {args.seconds - (end - time.monotonic()):.0f} s")
                time.sleep(2)
        wait_until(lambda: len(cluster.partitions(TOPIC)[0].isr) == 3, 60, "the ISR whole")
        line("healed")
    finally:
        cluster.discard()


if __name__ == "__main__":
    main()
