"""Direct re-reads of suspect offset ranges, with a plain Kafka consumer.

The audit asks for a re-read before it reports a loss (so a consumer miss is
never reported as broker loss) and for writes acked near a leader change (so
truncation is caught even where the consume job read the write before it was
destroyed). A re-read answers for *every* offset asked:

* records found become read runs (``status = record``) with their leader epoch;
* offsets below the log start are ``expired`` (retention deleted them);
* offsets inside the log that returned no record (compaction, transaction
  markers) are ``absent``;
* offsets at or past the log end are ``truncated``: the audit only asks about
  offsets the consume job's frontier has passed, so a log that ends below them
  now was cut back (a fail-over truncated it).

:func:`fold_records` is the pure part (records in, runs out); :func:`reread`
does the I/O with confluent-kafka (``read_uncommitted``: the audit judges
what the broker stored, not what a transactional reader would be shown).
"""

from __future__ import annotations

import logging
import time
from collections.abc import Iterable, Sequence
from dataclasses import dataclass
from datetime import UTC, datetime

from kafka_audit.clients import consumer_config
from kafka_audit.jobs.model import ReadRun, Reread
from kafka_audit.schemas.stamp import MALFORMED, NO_STAMP, StampError, checksum_ok, stamp_of_headers

__all__ = ["Record", "batch_size", "fold_records", "reread"]

log = logging.getLogger(__name__)


@dataclass(frozen=True)
class Record:
    offset: int
    producer_id: str | None
    run_id: str | None
    seq: int | None
    checksum_ok: bool | None
    leader_epoch: int | None
    stamp_error: str | None = None


def _record(msg) -> Record:
    """One record read, classified by the stamp rule (``schemas/stamp.py``)."""
    epoch = msg.leader_epoch()
    try:
        s = stamp_of_headers(msg.headers())
    except StampError as exc:
        return Record(msg.offset(), None, None, None, None, epoch, f"{MALFORMED}: {exc}")
    if s is None:
        return Record(msg.offset(), None, None, None, None, epoch, NO_STAMP)
    return Record(msg.offset(), s.producer_id, s.run_id, s.seq, checksum_ok(s, msg.value()),
                  epoch)


def fold_records(req: Reread, records: Iterable[Record], low: int, high: int,
                 read_time: datetime) -> list[ReadRun]:
    """The runs that answer ``req`` given the records read and the log's ``[low, high)``."""
    runs: list[ReadRun] = []

    def gap(lo: int, hi: int, status: str) -> None:
        if hi > lo:
            runs.append(ReadRun(req.topic, req.partition, lo, hi - lo, None, None, None,
                                read_time, "reread", status))

    gap(req.offset, min(req.end, low), "expired")
    pos = max(req.offset, low)
    cur: ReadRun | None = None
    for r in sorted(records, key=lambda r: r.offset):
        if not pos <= r.offset < min(req.end, high):
            continue
        if r.offset > pos:
            if cur:
                runs.append(cur)
                cur = None
            gap(pos, r.offset, "absent")
        stamped = r.producer_id is not None and r.checksum_ok is not False
        if cur is not None and cur.end == r.offset and cur.leader_epoch == r.leader_epoch and (
                (stamped and cur.stamped and (cur.producer_id, cur.run_id) == (r.producer_id,
                                                                               r.run_id)
                 and cur.seq + cur.count == r.seq)
                or (not stamped and not cur.stamped)):
            cur = ReadRun(cur.topic, cur.partition, cur.offset, cur.count + 1, cur.producer_id,
                          cur.run_id, cur.seq, read_time, "reread", "record", cur.leader_epoch)
        else:
            if cur:
                runs.append(cur)
            cur = ReadRun(req.topic, req.partition, r.offset, 1,
                          r.producer_id if stamped else None, r.run_id if stamped else None,
                          r.seq if stamped else None, read_time, "reread", "record",
                          r.leader_epoch)
        pos = r.offset + 1
    if cur:
        runs.append(cur)
    gap(pos, min(req.end, high), "absent")
    gap(max(pos, high, req.offset), req.end, "truncated")
    return runs


#: records asked of one ``consume`` call at most
MAX_BATCH = 5000


def batch_size(pos: int, stop: int) -> int:
    """Records to ask of one ``consume`` call while re-reading ``[pos, stop)``: the offsets
    left (at least one: the call that sees the partition's end), at most
    :data:`MAX_BATCH`."""
    return max(1, min(MAX_BATCH, stop - pos))


def reread(cluster: dict, requests: Sequence[Reread], timeout: float = 30.0) -> list[ReadRun]:
    """Read every requested range directly from the cluster (``cluster``: its client
    properties, :func:`~kafka_audit.clients.cluster_config`); one answer per offset asked."""
    from confluent_kafka import Consumer

    if not requests:
        return []
    c = Consumer(consumer_config(cluster, "kafka-audit-reread", **{
        "auto.offset.reset": "error", "enable.partition.eof": True}))
    out: list[ReadRun] = []
    try:
        for req in requests:
            try:
                out.extend(_reread_one(c, req, timeout))
            except Exception as exc:  # noqa: BLE001 - asked again next pass; others go on
                log.warning("re-read of %s/%s [%s, %s) failed: %s", req.topic, req.partition,
                            req.offset, req.end, exc)
    finally:
        c.close()
    return out


def _reread_one(c, req: Reread, timeout: float) -> list[ReadRun]:
    from confluent_kafka import KafkaError, KafkaException, TopicPartition

    tp = TopicPartition(req.topic, req.partition)
    low, high = c.get_watermark_offsets(tp, timeout=timeout)
    start, stop = max(req.offset, low), min(req.end, high)
    records: list[Record] = []
    if stop > start:
        c.assign([TopicPartition(req.topic, req.partition, start)])
        try:
            deadline = time.monotonic() + timeout
            pos = start
            while pos < stop:
                if time.monotonic() > deadline:
                    raise TimeoutError(f"re-read of {req.topic}/{req.partition} "
                                       f"[{start}, {stop}) stuck at {pos}")
                # no more than the offsets left: consume() returns when it has as many
                # records as asked or its timeout has passed, and a range near the log's
                # end followed by fewer than 5,000 records waited the whole second
                for m in c.consume(batch_size(pos, stop), timeout=1):
                    err = m.error()
                    if err is not None:
                        if err.code() == KafkaError._PARTITION_EOF:
                            pos = max(pos, stop)  # nothing more: the rest is absent
                            break
                        raise KafkaException(err)
                    pos = max(pos, m.offset() + 1)
                    if m.offset() < stop:
                        records.append(_record(m))
        finally:
            c.unassign()
        # retention may have moved the log start while we read: a gap below it is expired
        low = max(low, c.get_watermark_offsets(tp, timeout=timeout)[0])
    return fold_records(req, records, low, high, datetime.now(UTC))
