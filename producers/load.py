"""Load generator: stamped records at a given rate, ledgered (``kafka-audit produce``)."""

from __future__ import annotations

import os
import threading
import time
from dataclasses import dataclass

from kafka_audit.clients import cluster_config
from kafka_audit.producers.instrumented import AuditedProducer
from kafka_audit.settings import Settings

__all__ = ["LoadSpec", "run_load"]


@dataclass(frozen=True)
class LoadSpec:
    topic: str
    rate: float  # messages per second; 0 = as fast as possible
    seconds: float | None = None
    count: int | None = None
    size: int = 100
    acks: str = "all"
    idempotence: bool = False
    retries: int = 2
    producer_id: str = "load"


def producer_config(settings: Settings, spec: LoadSpec) -> dict:
    return {
        **cluster_config(settings),  # the audited cluster, through its profile
        "acks": spec.acks,  # what the auditor is here to check
        "enable.idempotence": spec.idempotence,
        "retries": spec.retries,
        "linger.ms": settings.producer.linger_ms,
        "message.timeout.ms": settings.producer.message_timeout_ms,
        "queue.buffering.max.messages": 1_000_000,
    }


def run_load(settings: Settings, spec: LoadSpec, stop: threading.Event | None = None,
             keep_record: bool = False, progress=None) -> AuditedProducer:
    """Produce until ``seconds``/``count`` or ``stop``; flush and close; return the producer."""
    stop = stop or threading.Event()
    p = AuditedProducer(producer_config(settings, spec), spec.producer_id, settings,
                        keep_record=keep_record)
    start = time.monotonic()
    payload_pad = os.urandom(max(0, spec.size - 12))
    last_report = start
    i = 0
    while not stop.is_set():
        if spec.count is not None and i >= spec.count:
            break
        now = time.monotonic()
        if spec.seconds is not None and now - start >= spec.seconds:
            break
        if spec.rate > 0 and i > (now - start) * spec.rate:
            p.poll(min(0.01, 1 / spec.rate))
            continue
        try:
            p.produce(spec.topic, i.to_bytes(12, "big") + payload_pad)
        except BufferError:
            p.poll(0.05)
            continue
        i += 1
        if i % 500 == 0:
            p.poll(0)
        if progress and now - last_report >= 2:
            progress(f"sent {p.sent}, acked {p.acked}, failed {p.failed}")
            last_report = now
    p.close()
    return p
