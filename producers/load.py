"""Load generator: stamped records at a given rate, ledgered (``kafka-audit produce``)."""

from __future__ import annotations

import os
import threading
import time
from collections.abc import Callable
from dataclasses import dataclass

from kafka_audit.clients import cluster_config
from kafka_audit.producers.instrumented import AuditedProducer
from kafka_audit.settings import Settings

__all__ = ["LoadSpec", "Pacer", "produce_paced", "run_load"]


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


class Pacer:
    """A schedule of ``rate`` writes a second (0: as fast as possible), restartable: after a
    fault heals a scenario paces again from the writes sent so far."""

    def __init__(self, rate: float) -> None:
        self.rate = rate
        self.restart(0)

    def restart(self, sent: int) -> None:
        self.start, self.base = time.monotonic(), sent

    def ahead(self, sent: int) -> bool:
        """Whether ``sent`` writes are ahead of the schedule (the next one must wait)."""
        return self.rate > 0 and sent - self.base > (time.monotonic() - self.start) * self.rate


#: what a gate says of the next write: send it, wait (poll a while), or stop the loop
SEND, WAIT, STOP = "send", "wait", "stop"


def produce_paced(p, topic: str, pacer: Pacer, gate: Callable[[int], str], pad: bytes, *,
                  partition: int | None = None, every: int = 500,
                  on_every: Callable[[int], None] | None = None) -> int:
    """The one rate-limited produce loop (the load generator, the scenarios, the soak
    benchmark): write ``sent`` is its sequence number as 12 big-endian bytes and ``pad``,
    sent when ``gate(sent)`` says :data:`SEND` and ``pacer`` is not ahead; the delivery
    reports are served while it waits and every ``every`` writes (then ``on_every(sent)``).
    A full local queue waits and tries again, never drops. Returns how many were sent."""
    where = {} if partition is None else {"partition": partition}
    sent = 0
    while (what := gate(sent)) != STOP:
        if what == WAIT:
            p.poll(0.05)
            continue
        if pacer.ahead(sent):
            p.poll(min(0.005, 1 / pacer.rate))
            continue
        try:
            p.produce(topic, sent.to_bytes(12, "big") + pad, **where)
        except BufferError:
            p.poll(0.05)
            continue
        sent += 1
        if sent % every == 0:
            p.poll(0)
            if on_every is not None:
                on_every(sent)
    return sent


def run_load(settings: Settings, spec: LoadSpec, stop: threading.Event | None = None,
             keep_record: bool = False, progress=None) -> AuditedProducer:
    """Produce until ``seconds``/``count`` or ``stop``; flush and close; return the producer."""
    stop = stop or threading.Event()
    p = AuditedProducer(producer_config(settings, spec), spec.producer_id, settings,
                        keep_record=keep_record)
    start = last_report = time.monotonic()

    def gate(sent: int) -> str:
        nonlocal last_report
        now = time.monotonic()
        if (stop.is_set() or (spec.count is not None and sent >= spec.count)
                or (spec.seconds is not None and now - start >= spec.seconds)):
            return STOP
        if progress and now - last_report >= 2:
            progress(f"sent {p.sent}, acked {p.acked}, failed {p.failed}")
            last_report = now
        return SEND

    produce_paced(p, spec.topic, Pacer(spec.rate), gate, os.urandom(max(0, spec.size - 12)))
    p.close()
    return p
