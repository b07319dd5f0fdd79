"""Ground truth independent of the auditor: a plain confluent-kafka full read of a topic.

Used by the demo and the tests to check the audit's verdicts: an ack is truly
lost when a full read of the topic, after the fault has healed, cannot find its
stamp anywhere. This deliberately shares nothing with the Spark path but the
stamp parser.
"""

from __future__ import annotations

import uuid

from kafka_audit.schemas.stamp import HEADER, StampError, parse_stamp

__all__ = ["full_read", "full_read_stamps", "acked_but_missing"]


Stamp = tuple[str, str, int]


def full_read_stamps(bootstrap: str, topic: str, timeout: float = 60
                     ) -> dict[Stamp, list[tuple[int, int]]]:
    """Every stamp in the topic now -> the (partition, offset) places it was found."""
    found: dict[Stamp, list[tuple[int, int]]] = {}
    for place, stamp in sorted(full_read(bootstrap, topic, timeout).items()):
        if stamp is not None:
            found.setdefault(stamp, []).append(place)
    return found


def full_read(bootstrap: str, topic: str, timeout: float = 60
              ) -> dict[tuple[int, int], Stamp | None]:
    """Every record in the topic now: (partition, offset) -> its stamp (None: not stamped).

    Offsets missing from the answer hold no record (transaction markers, compaction)."""
    import time

    from confluent_kafka import OFFSET_BEGINNING, Consumer, TopicPartition

    from kafka_audit.clients import client_logger

    c = Consumer({"bootstrap.servers": bootstrap, "group.id": f"groundtruth-{uuid.uuid4()}",
                  "enable.auto.commit": False, "auto.offset.reset": "earliest",
                  "logger": client_logger(), "isolation.level": "read_uncommitted"})
    try:
        md = c.list_topics(topic, timeout=10)
        parts = sorted(md.topics[topic].partitions)
        ends = {p: c.get_watermark_offsets(TopicPartition(topic, p), timeout=10)[1] for p in parts}
        c.assign([TopicPartition(topic, p, OFFSET_BEGINNING) for p in parts])
        found: dict[tuple[int, int], Stamp | None] = {}
        remaining = {p for p in parts if ends[p] > 0}
        positions = {p: -1 for p in parts}
        deadline = time.monotonic() + timeout
        while remaining:
            if time.monotonic() > deadline:
                raise TimeoutError(f"full read of {topic} did not reach the end offsets {ends}")
            for m in c.consume(10000, timeout=1):
                if m.error():
                    continue
                p, o = m.partition(), m.offset()
                positions[p] = max(positions[p], o)
                found[(p, o)] = None
                for k, v in m.headers() or []:
                    if k == HEADER:
                        try:
                            s = parse_stamp(v)
                        except StampError:
                            break
                        found[(p, o)] = (s.producer_id, s.run_id, s.seq)
                        break
            # the consumer's position, not the last record: it moves past transaction markers
            at = c.position([TopicPartition(topic, p) for p in remaining])
            remaining = {tp.partition for tp in at if max(tp.offset, positions[tp.partition] + 1)
                         < ends[tp.partition]}
        return found
    finally:
        c.close()


def acked_but_missing(record: list[tuple[int, str, int, int]], producer_id: str, run_id: str,
                      found: dict) -> list[tuple[int, int, int]]:
    """Acked writes (seq, partition, offset) whose stamp the full read cannot find."""
    return sorted((p, o, seq) for seq, _t, p, o in record
                  if (producer_id, run_id, seq) not in found)
