"""Tiny-history helpers: ``ack(p, off, seq)`` and ``read(p, off, seq)``."""

from kafka_audit.jobs.model import Ack, Read


def ack(partition: int, offset: int, seq: int, producer: str = "p", run: str = "r",
        topic: str = "t", acks: str = "all") -> Ack:
    return Ack(topic, partition, offset, producer, run, seq, None, acks)


def read(partition: int, offset: int, seq: int | None, producer: str | None = "p",
         run: str | None = "r", topic: str = "t") -> Read:
    if seq is None:
        producer = run = None
    return Read(topic, partition, offset, producer, run, seq)
