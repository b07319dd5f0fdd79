"""A window, and which window a write fell in: what the windows job writes and the API
reads (the kinds: :mod:`kafka_audit.schemas.events`). Pure.

The windows themselves are computed in ``jobs/core/windows.py``; the API
(``auditor_api/routes/windows.py``) names a finding's window with :func:`window_of` and
:func:`loss_window` over the rows of the ``windows`` table, as the windows job does.
"""

from __future__ import annotations

from collections.abc import Sequence
from dataclasses import dataclass, field
from datetime import datetime

from kafka_audit.schemas.events import REJECTION, WINDOW_KINDS

__all__ = ["Window", "window_of", "loss_window"]


@dataclass(frozen=True)
class Window:
    kind: str
    topic: str
    partition: int
    start: datetime
    end: datetime | None  # None: open (it lasts)
    opened_by: str
    closed_by: str | None = None
    acks: int = 0  # acknowledged writes (successes) inside
    losses: int = 0  # writes acknowledged inside and lost
    detail: dict = field(default_factory=dict, compare=False)

    @property
    def window_id(self) -> str:
        return f"{self.kind}:{self.topic}:{self.partition}:{self.start.isoformat()}"

    def holds(self, t: datetime) -> bool:
        return self.start <= t and (self.end is None or t <= self.end)


def window_of(windows: Sequence[Window], t: datetime | None,
              order=WINDOW_KINDS) -> Window | None:
    """The window a write acknowledged at ``t`` fell in, the most telling kind first."""
    if t is None:
        return None
    for kind in order:
        for w in windows:
            if w.kind == kind and w.holds(t):
                return w
    return None


#: the cluster's own windows, the most telling first (a rejection is a producer's error)
_CLUSTER_KINDS = tuple(k for k in WINDOW_KINDS if k != REJECTION)


def loss_window(windows: Sequence[Window], acked: datetime | None,
                detected: datetime | None = None) -> Window | None:
    """The window a lost write fell in: the one its ack fell in (:func:`window_of`); else
    the first of the cluster's windows that opened after the ack and before the loss was
    found, the disturbance that destroyed a write acknowledged while all was well (a
    simultaneous crash's exposure, the reduced redundancy of an ``acks=1`` fail-over, the
    leader change of a clean hand-over that truncated one); None when there is none."""
    inside = window_of(windows, acked)
    if inside is not None or acked is None:
        return inside
    later = [w for w in windows if w.kind in _CLUSTER_KINDS and w.start >= acked
             and (detected is None or w.start <= detected)]
    return min(later, key=lambda w: (w.start, _CLUSTER_KINDS.index(w.kind)), default=None)
