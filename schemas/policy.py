"""Which anomalies a producer's own settings allow: policy, kept apart from detection.

The rules (``jobs/core/rules.py``) find every anomaly whatever the producer asked
for; this table says which of them the producer's durability settings accept,
the way Jepsen's Kafka checker keeps ``allowed-error-types`` apart from its
detectors. An anomaly that is *allowed* is still reported (a user must see
their ``acks=1`` losses), but it is not a broken promise of the cluster: an
``acks=all`` loss is.

=====================  ======================================  ==========================
anomaly                allowed when                            because
=====================  ======================================  ==========================
``lost``,              ``acks`` is ``0`` or ``1``              the leader acknowledges
``lost_after_seen``                                            before any follower holds
                                                               the write: a fail-over
                                                               before replication loses it
``duplicate``          no idempotence and ``retries`` > 0      a retried request whose
                                                               first attempt was appended
                                                               is written twice
``reordered``          no idempotence, ``retries`` > 0 and     a retried batch lands after
                       more than one request in flight         the batches sent after it
=====================  ======================================  ==========================

Everything else (a loss with ``acks=all``, a duplicate with idempotence) is a
violation: the cluster or the client broke what the settings promise.
"""

from __future__ import annotations

from collections.abc import Callable
from dataclasses import dataclass
from typing import NamedTuple

from kafka_audit.schemas.systems import TRANSIENT
from kafka_audit.schemas.verdicts import Kind

__all__ = ["Durability", "Allowance", "ALLOWANCES", "allowed_because"]


class Durability(NamedTuple):
    """The producer settings that decide durability, as the ``acks`` table stores them."""

    acks: str  # "0", "1" or "all"; RabbitMQ: "persistent" or "transient"
    idempotence: bool
    retries: int
    max_in_flight: int


@dataclass(frozen=True)
class Allowance:
    kinds: frozenset[Kind]
    when: Callable[[Durability], bool]
    because: str


ALLOWANCES: tuple[Allowance, ...] = (
    Allowance(frozenset({Kind.lost, Kind.lost_after_seen}),
              lambda d: d.acks in ("0", "1"),
              "acks=0/1: acknowledged before any follower held the write"),
    Allowance(frozenset({Kind.lost}),
              lambda d: d.acks == TRANSIENT,
              "RabbitMQ, published without the persistent flag: a restart of its queue's "
              "node drops it"),
    Allowance(frozenset({Kind.duplicate}),
              lambda d: not d.idempotence and d.retries > 0,
              "retries without idempotence: a retried request may be appended twice"),
    Allowance(frozenset({Kind.reordered}),
              lambda d: not d.idempotence and d.retries > 0 and d.max_in_flight > 1,
              "retries with several requests in flight and no idempotence"),
)


def allowed_because(kind: str, durability: Durability) -> str | None:
    """Why the producer's settings allow an anomaly of ``kind`` (None: a violation)."""
    for a in ALLOWANCES:
        if kind in a.kinds and a.when(durability):
            return a.because
    return None
