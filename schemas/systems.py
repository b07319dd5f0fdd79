"""The messaging systems the auditor audits, and how a ledger key names what it audits.

Every table keys its rows by ``(topic, partition)``. A Kafka row's ``topic`` is the topic's
name; a RabbitMQ row's is a key naming the queue or stream, its ``partition`` 0::

    rabbitmq:queue:<vhost>:<queue>       a classic (mirrored) or quorum queue
    rabbitmq:stream:<vhost>:<stream>     a stream

with the vhost and the name percent-encoded (RFC 3986, nothing kept: a ``:`` or a ``/``
in either cannot split the key). A Kafka topic's name holds ASCII letters, digits, ``.``,
``_`` and ``-`` only, so no Kafka topic is ever read as a RabbitMQ key: the prefix alone
tells the system (:func:`system_of`), in every table, old rows included. ``acks`` and
``consumed`` also carry it as their ``system`` column, for who filters them in a BI tool
(null in rows written before the column existed: all of those are Kafka's).
"""

from __future__ import annotations

from collections.abc import Iterable
from dataclasses import dataclass
from urllib.parse import quote, unquote

__all__ = ["KAFKA", "RABBITMQ", "SYSTEMS", "RABBIT_KINDS", "PERSISTENT", "TRANSIENT",
           "RabbitTarget", "system_of",
           "kafka_topics", "rabbit_key", "parse_rabbit_key"]

KAFKA = "kafka"
RABBITMQ = "rabbitmq"
SYSTEMS = (KAFKA, RABBITMQ)
#: what a RabbitMQ key names: a queue (classic, mirrored or quorum) or a stream
RABBIT_KINDS = ("queue", "stream")

#: a RabbitMQ write's ``acks`` value: the delivery mode it was published with (a
#: transient message does not survive a restart of its queue's node)
PERSISTENT, TRANSIENT = "persistent", "transient"

_PREFIX = RABBITMQ + ":"


def system_of(topic: str) -> str:
    """The system a ledger key belongs to: ``rabbitmq`` for a RabbitMQ key, else ``kafka``."""
    return RABBITMQ if topic.startswith(_PREFIX) else KAFKA


def kafka_topics(keys: Iterable[str]) -> set[str]:
    """The Kafka topics among ledger keys: what the Kafka cluster is ever asked about (a
    RabbitMQ queue's key is read by the RabbitMQ reader, never subscribed or described)."""
    return {k for k in keys if not k.startswith(_PREFIX)}


@dataclass(frozen=True)
class RabbitTarget:
    """A RabbitMQ queue or stream as a ledger key names it."""

    kind: str  # queue | stream
    vhost: str
    name: str

    @property
    def key(self) -> str:
        return rabbit_key(self.kind, self.vhost, self.name)


def rabbit_key(kind: str, vhost: str, name: str) -> str:
    """The ledger key of a RabbitMQ queue or stream (``kind``: queue | stream)."""
    if kind not in RABBIT_KINDS:
        raise ValueError(f"a RabbitMQ key names a queue or a stream, not {kind!r}")
    if not name:
        raise ValueError("a RabbitMQ key needs the queue's name")
    return f"{_PREFIX}{kind}:{quote(vhost, safe='')}:{quote(name, safe='')}"


def parse_rabbit_key(key: str) -> RabbitTarget:
    """The queue or stream a RabbitMQ ledger key names; ``ValueError`` for any other string."""
    parts = key.split(":")
    if len(parts) != 4 or parts[0] != RABBITMQ or parts[1] not in RABBIT_KINDS or not parts[3]:
        raise ValueError(f"not a RabbitMQ ledger key: {key!r} (want "
                         f"rabbitmq:queue|stream:<vhost>:<name>, percent-encoded)")
    target = RabbitTarget(parts[1], unquote(parts[2], errors="strict"),
                          unquote(parts[3], errors="strict"))
    if target.key != key:  # one spelling per target: a key that would not round-trip is not one
        raise ValueError(f"not a RabbitMQ ledger key in its one spelling: {key!r} "
                         f"(that is {target.key!r})")
    return target
