"""A suspicion's basis and what became of it: what the suspicion marker writes and the API
reads. Pure.

The rule that suspects writes at a leader change is ``jobs/core/suspicion.py``; the API
(``auditor_api/routes/suspicions.py``) derives each ``suspicions`` row's state from the
committed findings of its writes with :func:`settle`.
"""

from __future__ import annotations

from dataclasses import dataclass

from kafka_audit.schemas.verdicts import LOSSES, PRIMARY, Kind

__all__ = ["PRIMARY_KINDS", "BY_BROKER", "BY_TIME", "SUSPECTED", "CONFIRMED", "WITHDRAWN",
           "PARTLY", "STATES", "Settled", "settle"]

#: how the writes of the old leader's epoch were told: by the acknowledging broker the
#: ledger names, or by acknowledgement time within the epoch where it names none
BY_BROKER, BY_TIME = "broker", "ack_time"
#: a suspicion's state: not judged yet (some of it); judged lost; judged otherwise; both
SUSPECTED, CONFIRMED, WITHDRAWN, PARTLY = "suspected", "confirmed", "withdrawn", "partly"
STATES = (SUSPECTED, CONFIRMED, WITHDRAWN, PARTLY)


@dataclass(frozen=True)
class Settled:
    """What became of ``count`` suspected writes: judged lost, judged confirmed (found in
    the log), judged another primary verdict, not judged yet; and the state that makes."""

    lost: int
    found: int
    other: int
    pending: int

    @property
    def state(self) -> str:
        if self.pending:
            return SUSPECTED
        if not self.found and not self.other:
            return CONFIRMED
        return PARTLY if self.lost else WITHDRAWN


#: the verdicts (a write's one judgement; annotations such as duplicates are none)
PRIMARY_KINDS = frozenset(k.value for k in PRIMARY)
_LOST = frozenset(k.value for k in LOSSES)


def settle(seq: int, count: int, judged: list[tuple[str, int, int]]) -> Settled:
    """The seqs ``seq .. seq+count-1`` of one producer run against that run's findings
    ``judged`` (``(kind, seq, count)``; annotations such as duplicates are not verdicts and
    count for nothing): how many of them each verdict took."""
    lost = found = other = 0
    for kind, f_seq, f_count in judged:
        if kind not in PRIMARY_KINDS:
            continue
        n = min(seq + count, f_seq + f_count) - max(seq, f_seq)
        if n <= 0:
            continue
        if kind in _LOST:
            lost += n
        elif kind == Kind.confirmed.value:
            found += n
        else:
            other += n
    return Settled(lost, found, other, max(0, count - lost - found - other))
