"""The instrumented producer: a confluent-kafka ``Producer`` that stamps and records.

Every record gets one ``kaudit`` header (``schemas/stamp.py``: producer id,
run id, sequence, CRC32 of the value). Every delivery report, success or
failure, goes to the :class:`~kafka_audit.producers.ledger.AckLedger` together
with the settings that decide durability. The delivery callback is one tuple
append: the per-message cost is one ``struct.pack``, one CRC32 and that append.

Usage::

    with AuditedProducer({"bootstrap.servers": "...", "acks": "all"}, "billing-1",
                         settings) as p:
        p.produce("orders", b"...")
"""

from __future__ import annotations

import time
import uuid
from functools import partial
from typing import Any

from confluent_kafka import Producer

from kafka_audit.clients import client_logger
from kafka_audit.producers.ledger import AckLedger, DurabilitySettings
from kafka_audit.schemas.stamp import HEADER, SEQ_CRC, crc32, stamp_prefix
from kafka_audit.settings import Settings

__all__ = ["AuditedProducer"]


def _durability(conf: dict[str, Any]) -> DurabilitySettings:
    idem = str(conf.get("enable.idempotence", False)).lower() == "true"
    acks = "all" if idem else str(conf.get("acks", conf.get("request.required.acks", "all")))
    retries = int(conf.get("retries", conf.get("message.send.max.retries", 2147483647)))
    inflight = int(conf.get("max.in.flight.requests.per.connection",
                            conf.get("max.in.flight", 1000000)))
    if idem:
        inflight = min(inflight, 5)
    return DurabilitySettings("all" if acks == "-1" else acks, idem, retries, inflight)


class AuditedProducer:
    """Stamps records and ledgers every delivery report. Not thread-safe (like Producer)."""

    def __init__(self, config: dict[str, Any], producer_id: str, settings: Settings,
                 run_id: str | None = None, keep_record: bool = False) -> None:
        self.producer_id = producer_id
        self.run_id = run_id or f"{time.strftime('%Y%m%dT%H%M%S')}-{uuid.uuid4().hex[:8]}"
        conf = {"logger": client_logger(), **config}
        self.durability = _durability(conf)
        self._producer = Producer(conf)
        self._head, self._tail = stamp_prefix(producer_id, self.run_id)
        self._seq = 0
        self.ledger = AckLedger(
            settings.table_path("acks"), settings.home_dir / "spool" / "acks",
            app_id=f"{producer_id}/{self.run_id}", producer_id=producer_id, run_id=self.run_id,
            durability=self.durability, flush_seconds=settings.producer.ledger_flush_seconds,
            flush_rows=settings.producer.ledger_flush_rows,
        ).start()
        self.acked = 0
        self.failed = 0
        # the producer's own record (ground truth for tests): (seq, topic, partition, offset)
        # per acked write, and (seq, topic, partition, error name) per failed one
        self.record: list[tuple[int, str, int, int]] | None = [] if keep_record else None
        self.failures: list[tuple[int, str, int, str]] | None = [] if keep_record else None
        self._on_delivery = self._make_callback()

    def _make_callback(self):
        add = self.ledger.add
        now = time.time
        record = self.record
        failures = self.failures
        me = self

        # librdkafka hands delivery reports back without their headers, so each record's
        # seq is bound to its callback with functools.partial (cheaper than a closure)
        def on_delivery(seq, err, msg):
            add((seq, msg.topic(), msg.partition(), msg.offset(), err, msg.latency(), now()))
            if err is None:
                me.acked += 1
                if record is not None:
                    record.append((seq, msg.topic(), msg.partition(), msg.offset()))
            else:
                me.failed += 1
                if failures is not None:
                    failures.append((seq, msg.topic(), msg.partition(), err.name()))

        return on_delivery

    @property
    def sent(self) -> int:
        return self._seq

    def produce(self, topic: str, value: bytes, key: bytes | None = None,
                partition: int | None = None,
                headers: list[tuple[str, bytes]] | None = None) -> int:
        """Send one stamped record; return its sequence number."""
        seq = self._seq
        stamp = self._head + SEQ_CRC.pack(seq, crc32(value)) + self._tail
        hdrs = [(HEADER, stamp), *headers] if headers else [(HEADER, stamp)]
        cb = partial(self._on_delivery, seq)
        if partition is None:
            self._producer.produce(topic, value, key, headers=hdrs, on_delivery=cb)
        else:
            self._producer.produce(topic, value, key, partition=partition, headers=hdrs,
                                   on_delivery=cb)
        self._seq = seq + 1
        return seq

    # transactions: passed through; every record's delivery report is ledgered as usual
    def init_transactions(self, timeout: float = 30) -> None:
        self._producer.init_transactions(timeout)

    def begin_transaction(self) -> None:
        self._producer.begin_transaction()

    def commit_transaction(self, timeout: float = 30) -> None:
        self._producer.commit_transaction(timeout)

    def abort_transaction(self, timeout: float = 30) -> None:
        self._producer.abort_transaction(timeout)

    def poll(self, timeout: float = 0) -> int:
        return self._producer.poll(timeout)

    def flush(self, timeout: float = 60) -> int:
        """Wait for outstanding delivery reports; return how many are still outstanding."""
        left = self._producer.flush(timeout)
        self.ledger.flush()
        return left

    def __len__(self) -> int:
        return len(self._producer)

    def close(self, timeout: float = 60) -> None:
        self._producer.flush(timeout)
        self.ledger.close()

    def __enter__(self) -> AuditedProducer:
        return self

    def __exit__(self, *exc: object) -> None:
        self.close()
