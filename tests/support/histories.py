"""Tiny-history helpers: ack runs, read runs and events at whole seconds after ``T0``."""

from datetime import UTC, datetime, timedelta

from kafka_audit.jobs.core.model import AckRun, ClusterEvent, ReadRun

T0 = datetime(2026, 1, 1, tzinfo=UTC)


def at(seconds: float) -> datetime:
    return T0 + timedelta(seconds=seconds)


def ack(offset: int | None, seq: int, count: int = 1, t: float = 0, error: str | None = None,
        partition: int = 0, producer: str = "p", run: str = "r", topic: str = "t",
        acks: str = "all", t_last: float | None = None) -> AckRun:
    return AckRun(topic, partition, producer, run, seq, count, offset, at(t),
                  at(t if t_last is None else t_last), error, acks)


def read(offset: int, seq: int | None, count: int = 1, t: float = 1, source: str = "stream",
         status: str = "record", producer: str | None = "p", run: str | None = "r",
         partition: int = 0, topic: str = "t", epoch: int | None = None) -> ReadRun:
    if seq is None or status != "record":
        producer = run = seq = None
    return ReadRun(topic, partition, offset, count, producer, run, seq, at(t), source, status,
                   epoch)


def leader_change(t: float, leader: int = 2, previous: int = 1,
                  previous_isr: tuple[int, ...] = (1, 2, 3), partition: int = 0,
                  topic: str = "t") -> ClusterEvent:
    # a fail-over keeps the rest of the ISR; an unclean election leaves the new leader alone
    isr = tuple(sorted({leader, *(r for r in previous_isr if r != previous)}))
    return ClusterEvent(at(t), topic, partition, "leader_change", leader, previous,
                        isr, previous_isr)
