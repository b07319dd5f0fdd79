"""Direct re-reads of suspect offset ranges, with a plain Kafka consumer.

The audit asks for a re-read before it reports a loss (so a consumer miss is
never reported as broker loss) and for writes acked near a leader change (so
truncation is caught even where the consume job read the write before it was
destroyed). A re-read answers for *every* offset asked:

* records found become read runs (``status = record``) with their leader epoch,
  classified by the stamp rule as the consume job classifies them (a foreign, malformed
  or forged record is no producer's; header keys are read as bytes: :class:`_RawHeaders`);
  a record that cannot be classified counts as malformed, never fails its range;
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

import ctypes
import functools
import logging
import time
from collections.abc import Iterable, Sequence
from dataclasses import dataclass
from datetime import UTC, datetime

from kafka_audit.clients import consumer_config
from kafka_audit.jobs.core.model import ReadRun, Reread
from kafka_audit.schemas.stamp import (
    FORGED,
    MALFORMED,
    NO_STAMP,
    ForgedStamp,
    StampError,
    StampMac,
    checksum_ok,
    stamp_of_headers,
)

__all__ = ["Record", "batch_size", "fold_records", "record_headers", "reread"]

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


class _RawHeaders:
    """A consumed record's headers as the log holds them: ``(key bytes, value bytes or
    None)`` pairs, or None (no headers).

    confluent-kafka's ``Message.headers()`` decodes every key as strict UTF-8: a key that is
    not (the protocol allows any bytes) makes it raise ``SystemError``, the record's other
    headers lost with it, and a second call returns a list holding a NULL (a crash). The
    Java client, so the consume job, decodes such a key with replacement characters and
    classifies the record by its other headers. So the re-read reads the headers librdkafka
    parsed, before confluent-kafka converts them: the Message's ``c_headers`` pointer
    (``confluent_kafka.h``: after the object header, the pointers ``topic``, ``value``,
    ``key``, ``headers``, then ``c_headers``), through librdkafka's
    ``rd_kafka_header_get_all``. The layout is checked on every record (the ``topic`` slot
    holds the object ``topic()`` returns; ``headers`` is still unset); where it does not
    hold, ``headers()`` is called once and a failure is a malformed record (:func:`_record`).
    librdkafka returns a key as a C string: a key with a NUL byte is cut at it (the consume
    job compares it whole; no producer of the auditor's writes such a key).
    """

    _P = ctypes.sizeof(ctypes.c_void_p)
    TOPIC = object.__basicsize__  # the first slot after the object header
    HEADERS = TOPIC + 3 * _P
    C_HEADERS = TOPIC + 4 * _P

    def __init__(self) -> None:
        from confluent_kafka import Message

        from kafka_audit.producers.native import librdkafka_path

        self.message_type = Message  # the layout is confluent-kafka's Message's
        self.get_all = ctypes.CDLL(librdkafka_path()).rd_kafka_header_get_all
        self.get_all.restype = ctypes.c_int
        self.get_all.argtypes = [ctypes.c_void_p, ctypes.c_size_t,
                                 ctypes.POINTER(ctypes.c_void_p),
                                 ctypes.POINTER(ctypes.c_void_p),
                                 ctypes.POINTER(ctypes.c_size_t)]

    def layout_holds(self, msg) -> bool:
        at = id(msg)
        return (ctypes.c_void_p.from_address(at + self.TOPIC).value == id(msg.topic())
                and ctypes.c_void_p.from_address(at + self.HEADERS).value is None)

    def __call__(self, msg) -> list[tuple[bytes, bytes | None]] | None:
        hdrs = ctypes.c_void_p.from_address(id(msg) + self.C_HEADERS).value
        if not hdrs:
            return None
        name, value, size = ctypes.c_void_p(), ctypes.c_void_p(), ctypes.c_size_t()
        at = (ctypes.byref(name), ctypes.byref(value), ctypes.byref(size))
        out = []
        while not self.get_all(hdrs, len(out), *at):
            out.append((ctypes.string_at(name.value),
                        ctypes.string_at(value.value, size.value) if value.value else None))
        return out


@functools.cache
def _raw_headers() -> _RawHeaders | None:
    try:
        return _RawHeaders()
    except Exception as exc:  # noqa: BLE001 - headers() then, its failures counted
        log.warning("re-reads read headers through confluent-kafka (%s): a record with a "
                    "header key that is not UTF-8 counts as malformed", exc)
        return None


def record_headers(msg):
    """A consumed record's headers for the stamp rule, keys as bytes where they can be read
    so (:class:`_RawHeaders`); :class:`StampError` if they cannot be read at all."""
    raw = _raw_headers()
    if raw is not None and type(msg) is raw.message_type and raw.layout_holds(msg):
        return raw(msg)
    try:
        return msg.headers()
    except Exception as exc:  # noqa: BLE001 - a key confluent-kafka cannot decode
        raise StampError(f"headers unreadable here ({type(exc).__name__}: {exc})") from None


def _record(msg, mac: StampMac | None = None) -> Record:
    """One record read, classified by the stamp rule (``schemas/stamp.py``; ``mac``: the
    stamp key's, when one is configured). Never raises: a record that cannot be classified
    is a malformed one (unjudged), not a failed range."""
    offset = msg.offset()
    try:
        epoch = msg.leader_epoch()
    except Exception:  # noqa: BLE001 - unknown: no epoch, as a broker may answer
        epoch = None

    def unjudged(why: str) -> Record:  # no producer's: it confirms no write
        return Record(offset, None, None, None, None, epoch, why)

    try:
        s = stamp_of_headers(record_headers(msg), mac)
        if s is None:
            return unjudged(NO_STAMP)
        return Record(offset, s.producer_id, s.run_id, s.seq, checksum_ok(s, msg.value()),
                      epoch)
    except ForgedStamp as exc:
        return unjudged(f"{FORGED}: {exc}")
    except StampError as exc:
        return unjudged(f"{MALFORMED}: {exc}")
    except Exception as exc:  # noqa: BLE001 - one record never fails its range
        log.warning("re-read: the record at offset %s could not be classified (%s: %s); "
                    "it counts as malformed", offset, type(exc).__name__, exc)
        return unjudged(f"{MALFORMED}: unreadable ({type(exc).__name__})")


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


def reread(cluster: dict, requests: Sequence[Reread], timeout: float = 30.0,
           mac: StampMac | None = None) -> list[ReadRun]:
    """Read every requested range directly from the cluster (``cluster``: its client
    properties, :func:`~kafka_audit.clients.cluster_config`); one answer per offset asked.
    ``mac``: the stamp key's (``kafka_audit.stamp_key.stamp_mac``), if one is configured."""
    from confluent_kafka import Consumer

    if not requests:
        return []
    c = Consumer(consumer_config(cluster, "kafka-audit-reread", **{
        "auto.offset.reset": "error", "enable.partition.eof": True}))
    out: list[ReadRun] = []
    try:
        for req in requests:
            try:
                out.extend(_reread_one(c, req, timeout, mac))
            except Exception as exc:  # noqa: BLE001 - asked again next pass; others go on
                log.warning("re-read of %s/%s [%s, %s) failed: %s", req.topic, req.partition,
                            req.offset, req.end, exc)
    finally:
        c.close()
    return out


def _reread_one(c, req: Reread, timeout: float, mac: StampMac | None = None) -> list[ReadRun]:
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
                        records.append(_record(m, mac))
        finally:
            c.unassign()
        # retention may have moved the log start while we read: a gap below it is expired
        low = max(low, c.get_watermark_offsets(tp, timeout=timeout)[0])
    return fold_records(req, records, low, high, datetime.now(UTC))
