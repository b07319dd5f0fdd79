"""Ground truth independent of the auditor: a plain confluent-kafka full read of a topic.

Used by the demo and the tests to check the audit's verdicts: an ack is truly
lost when a full read of the topic, after the fault has healed, cannot find its
stamp anywhere. This deliberately shares nothing with the Spark path but the
stamp rule (``schemas/stamp.py``).
"""

from __future__ import annotations

from collections.abc import Iterator

from kafka_audit.jobs.audit.reread import record_headers
from kafka_audit.schemas.stamp import StampError, stamp_of_headers

__all__ = ["end_offsets", "scan_log", "full_read", "full_read_stamps", "acked_but_missing",
           "Written", "written_by", "secondary_truth", "secondary_findings"]


Stamp = tuple[str, str, int]


def full_read_stamps(bootstrap: str, topic: str, timeout: float = 60
                     ) -> dict[Stamp, list[tuple[int, int]]]:
    """Every stamp in the topic now -> the (partition, offset) places it was found."""
    found: dict[Stamp, list[tuple[int, int]]] = {}
    for place, stamp in sorted(full_read(bootstrap, topic, timeout).items()):
        if stamp is not None:
            found.setdefault(stamp, []).append(place)
    return found


#: answers of a partition that has just changed leader: asked again until the deadline
_SETTLING = frozenset({"OFFSET_NOT_AVAILABLE", "LEADER_NOT_AVAILABLE",
                       "NOT_LEADER_FOR_PARTITION", "NOT_LEADER_OR_FOLLOWER", "_TIMED_OUT"})


def end_offsets(consumer, topic: str, parts: list[int], within: float = 60) -> dict[int, int]:
    """Each partition's high watermark, asked again while its leader has just changed.

    A new leader answers OFFSET_NOT_AVAILABLE ("Leader high watermark is not caught up")
    until its followers' fetches have moved its high watermark past the epoch's start: a
    full read right after a leader kill met it in CI. Any other error, or one that
    outlasts ``within`` seconds, is raised."""
    import time

    from confluent_kafka import KafkaException, TopicPartition

    deadline = time.monotonic() + within
    ends: dict[int, int] = {}
    for p in parts:
        while p not in ends:
            try:
                ends[p] = consumer.get_watermark_offsets(TopicPartition(topic, p), timeout=10)[1]
            except KafkaException as exc:
                err = exc.args[0] if exc.args else None
                name = err.name() if hasattr(err, "name") else ""
                if name not in _SETTLING or time.monotonic() >= deadline:
                    raise
                time.sleep(0.2)
    return ends


def scan_log(bootstrap: str, topic: str, timeout: float = 60
             ) -> Iterator[tuple[int, int, Stamp | None]]:
    """Every record in the topic now, once: ``(partition, offset, stamp)`` (None: not
    stamped; the stamp rule: no stamp and malformed ones are both "not stamped"), up to
    the end offsets found when the scan starts. Offsets never yielded hold no record
    (transaction markers, compaction). ``timeout``: the longest the scan may go without
    a record (its whole length grows with the topic: a CI run's 1.9 million records took
    longer than 60 s on a loaded machine)."""
    import time

    from confluent_kafka import OFFSET_BEGINNING, Consumer, TopicPartition

    from kafka_audit.clients import consumer_config

    c = Consumer(consumer_config(bootstrap, "groundtruth", **{"auto.offset.reset": "earliest"}))
    try:
        md = c.list_topics(topic, timeout=10)
        parts = sorted(md.topics[topic].partitions)
        ends = end_offsets(c, topic, parts)
        c.assign([TopicPartition(topic, p, OFFSET_BEGINNING) for p in parts])
        remaining = {p for p in parts if ends[p] > 0}
        positions = {p: -1 for p in parts}
        deadline = time.monotonic() + timeout
        while remaining:
            if time.monotonic() > deadline:
                raise TimeoutError(f"full read of {topic} did not reach the end offsets {ends}"
                                   f" (no record for {timeout:.0f}s; at {positions})")
            for m in c.consume(10000, timeout=1):
                if m.error():
                    continue
                deadline = time.monotonic() + timeout  # a record: the scan moves
                p, o = m.partition(), m.offset()
                positions[p] = max(positions[p], o)
                try:
                    s = stamp_of_headers(record_headers(m))  # as the re-read reads them
                except StampError:
                    s = None
                yield p, o, None if s is None else (s.producer_id, s.run_id, s.seq)
            # the consumer's position, not the last record: it moves past transaction markers
            at = c.position([TopicPartition(topic, p) for p in remaining])
            remaining = {tp.partition for tp in at if max(tp.offset, positions[tp.partition] + 1)
                         < ends[tp.partition]}
    finally:
        c.close()


def full_read(bootstrap: str, topic: str, timeout: float = 60
              ) -> dict[tuple[int, int], Stamp | None]:
    """Every record in the topic now: (partition, offset) -> its stamp (None: not stamped).

    Offsets missing from the answer hold no record (transaction markers, compaction)."""
    return {(p, o): stamp for p, o, stamp in scan_log(bootstrap, topic, timeout)}


def acked_but_missing(record: list[tuple[int, str, int, int]], producer_id: str, run_id: str,
                      found: dict) -> list[tuple[int, int, int]]:
    """Acked writes (seq, partition, offset) whose stamp the full read cannot find."""
    return sorted((p, o, seq) for seq, _t, p, o in record
                  if (producer_id, run_id, seq) not in found)


#: one write of a producer's own record: (producer, run, seq, partition, acked offset or None)
Written = tuple[str, str, int, int, int | None]


def written_by(producer) -> list[Written]:
    """An ``AuditedProducer``'s own record (``keep_record``) of its acked and failed writes."""
    pid, run = producer.producer_id, producer.run_id
    return ([(pid, run, seq, part, off) for seq, _t, part, off in producer.record]
            + [(pid, run, seq, part, None) for seq, _t, part, _e in producer.failures])


def secondary_truth(log: dict[tuple[int, int], Stamp | None], writes: list[Written]
                    ) -> tuple[list[tuple], list[tuple]]:
    """The duplicates and reorders in the log as a full read finds it (``log``: what
    :func:`full_read` returns), for the producers' own ``writes``:

    * duplicate: a write whose stamp sits at two or more offsets: ``(producer, run, seq,
      partition, acked offset or None, the other offsets)``;
    * reordered: a write that sits at its acked offset while a lower-seq write of its
      producer run sits at its own acked offset, higher in the partition:
      ``(producer, run, seq, partition, offset)``.
    """
    places: dict[Stamp, list[tuple[int, int]]] = {}
    for place, stamp in sorted(log.items()):
        if stamp is not None:
            places.setdefault(stamp, []).append(place)
    dups = []
    for pid, run, seq, part, off in writes:
        found = places.get((pid, run, seq), [])
        if len(found) >= 2:
            dups.append((pid, run, seq, part, off,
                         tuple(o for p, o in found if (p, o) != (part, off))))
    in_place: dict[tuple[str, str, int], list[tuple[int, int]]] = {}
    for pid, run, seq, part, off in writes:
        if off is not None and log.get((part, off)) == (pid, run, seq):
            in_place.setdefault((pid, run, part), []).append((off, seq))
    reorders = []
    for (pid, run, part), sitting in in_place.items():
        lowest = None  # the lowest seq sitting above, walking down from the top
        for off, seq in sorted(sitting, reverse=True):
            if lowest is not None and lowest < seq:
                reorders.append((pid, run, seq, part, off))
            lowest = seq if lowest is None else min(lowest, seq)
    return sorted(dups), sorted(reorders)


def secondary_findings(findings: list[dict]) -> tuple[list[tuple], list[tuple]]:
    """The ``duplicate`` and ``reordered`` findings (rows of the table) in the form of
    :func:`secondary_truth`, one tuple per write."""
    import json

    dups, reorders = [], []
    for r in findings:
        for k in range(r["count"]):
            off = None if r["offset"] is None else r["offset"] + k
            if r["kind"] == "duplicate":
                also = json.loads(r["evidence"])["also_read_at"]
                dups.append((r["producer_id"], r["run_id"], r["seq"] + k, r["partition"], off,
                             tuple(sorted(o + k for o in also))))
            elif r["kind"] == "reordered":
                reorders.append((r["producer_id"], r["run_id"], r["seq"] + k, r["partition"],
                                 off))
    return sorted(dups), sorted(reorders)
