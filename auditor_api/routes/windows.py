"""``GET /v1/windows``: when writes were at risk, from the ``windows`` table.

A window is an interval of one partition (``end`` null while it lasts): *exposure*
(the ISR below ``min.insync.replicas``, or the leader alone), *rejection* (producers
refused for want of replicas), *split_brain* (two leaders acknowledged writes),
*reduced_redundancy* (a replica out of the ISR) and *leader_change* (the leader changed or
there was none, until one is named again: an instant for a clean hand-over, where
unreplicated ``acks=1`` writes are cut). The audit loop computes them
(``jobs/upkeep/windows_job.py``); each loss finding names the window its write fell in
(``window_id`` in ``/v1/findings``), found with :func:`window_ids`.
"""

# no ``from __future__ import annotations``: FastAPI resolves the route's annotations
import json
from datetime import UTC, datetime, timedelta
from typing import Annotated, Literal

import pyarrow.compute as pc
from fastapi import APIRouter, Query
from pydantic import BaseModel, Field

from kafka_audit.auditor_api.deps import ReaderDep
from kafka_audit.auditor_api.params import Instant, Partition
from kafka_audit.auditor_api.problems import bad_parameters
from kafka_audit.schemas.events import LEADER_CHANGE_WINDOW, SPLIT_BRAIN_WINDOW, WINDOW_KINDS
from kafka_audit.schemas.verdicts import LOSSES
from kafka_audit.schemas.windows import Window, loss_window, window_of

__all__ = ["router", "WindowRow", "window_ids", "partition_windows_of"]

router = APIRouter(prefix="/v1", tags=["windows"])

WindowKind = Literal[WINDOW_KINDS]  # type: ignore[valid-type]


class WindowRow(BaseModel):
    """One window of one partition."""

    window_id: str = Field(description="kind:topic:partition:start; findings name it")
    kind: WindowKind
    topic: str
    partition: int
    start: datetime
    end: datetime | None = Field(description="null: open, it lasts")
    opened_by: str = Field(description="the event (or ack) that opened it")
    closed_by: str | None = Field(description="the event that closed it (null: open)")
    acks: int = Field(description="successful acks inside the window")
    losses: int = Field(description="writes acknowledged inside the window and lost (a write "
                                    "acknowledged before the window that destroyed it is "
                                    "not here: see losses_named)")
    losses_named: int = Field(description="lost writes whose finding names this window "
                                          "(window_id in /v1/findings): those acknowledged "
                                          "inside it, and those acknowledged in no window "
                                          "that it destroyed (an acks=1 fail-over, a clean "
                                          "hand-over that truncated them)")
    detail: dict | None = Field(description="what else the window knows (leaders, ISR ...)")


class WindowsPage(BaseModel):
    computed: bool = Field(description="false: the audit loop has not computed windows yet "
                                       "(no windows table): an empty list means nothing then")
    items: list[WindowRow]


_EPOCH = datetime(1970, 1, 1, tzinfo=UTC)


def _us(t: datetime) -> int:
    """Microseconds since the epoch (what an ``Instant`` parameter is), exactly."""
    return (t - _EPOCH) // timedelta(microseconds=1)


def _rows(reader) -> list[dict]:
    """Every window row, sorted (topic, partition, start, kind); memoized per version."""
    def compute(snap):
        rows = snap.data.to_pylist()
        for r in rows:
            r["detail"] = json.loads(r["detail"]) if r.get("detail") else None
            for k in ("start", "end"):
                if r.get(k) is not None:
                    r[k] = r[k].astimezone(UTC)
        return sorted(rows, key=lambda r: (r["topic"], r["partition"], r["start"], r["kind"]))

    return reader.memo("windows_rows", ("windows",), compute)


def partition_windows_of(reader) -> dict[tuple[str, int], list[Window]]:
    """The windows per partition, as :class:`Window` (empty without a windows table)."""
    if not reader.exists("windows"):
        return {}

    def compute(_snap):
        out: dict[tuple[str, int], list[Window]] = {}
        for r in _rows(reader):
            out.setdefault((r["topic"], r["partition"]), []).append(Window(
                r["kind"], r["topic"], r["partition"], r["start"], r["end"], r["opened_by"],
                r["closed_by"], r["acks"], r["losses"]))
        return out

    return reader.memo("windows_by_partition", ("windows",), compute)


def window_ids(reader, rows: list[dict]) -> None:
    """Set ``window_id`` on finding rows: the window the first write's ack fell in, the
    most telling kind first (split brain, exposure, rejection, reduced redundancy); for a
    loss acknowledged in none, the first window of the cluster's that opened between its
    ack and its detection (:func:`~kafka_audit.schemas.windows.loss_window`); null when
    there is none (or windows are not computed yet). A loss suspected at the fail-over
    (``suspected_by``, set here too) names the leader-change window of the change that
    truncated it, unless it fell in a split brain: two fail-overs in a row, the second
    while the first's reduced redundancy lasts, are told apart so."""
    from kafka_audit.auditor_api.routes.suspicions import suspected_by

    windows = partition_windows_of(reader)
    if any("suspected_by" not in row for row in rows):
        suspected_by(reader, rows)
    for row in rows:
        mine = windows.get((row["topic"], row["partition"]), ())
        w = (loss_window(mine, row.get("ack_time"), row.get("detected_at"))
             if row.get("kind") in LOSSES else window_of(mine, row.get("ack_time")))
        by = row.get("suspected_by")
        if by is not None and (w is None or w.kind != SPLIT_BRAIN_WINDOW):
            w = next((x for x in mine if x.kind == LEADER_CHANGE_WINDOW
                      and x.holds(by["changed_at"])), w)
        row["window_id"] = w.window_id if w is not None else None


def _named_losses(reader) -> dict[str, int]:
    """window_id -> the lost writes whose committed finding names it (memoized per
    version of the windows, the findings and the committed pass)."""
    from kafka_audit.auditor_api.routes.findings import committed_findings

    def compute(_windows, _findings, _hot, _suspicions):
        found = committed_findings(reader)
        rows = found.filter(pc.field("kind").isin(sorted(k.value for k in LOSSES))).select(
            ["topic", "partition", "kind", "ack_time", "detected_at", "count", "producer_id",
             "run_id", "seq"]).to_pylist()
        window_ids(reader, rows)
        out: dict[str, int] = {}
        for r in rows:
            if r["window_id"] is not None:
                out[r["window_id"]] = out.get(r["window_id"], 0) + (r["count"] or 0)
        return out

    return reader.memo("windows_named_losses", ("windows", "findings", "audit_hot",
                                                "suspicions"), compute)


@router.get("/windows", response_model=WindowsPage)
def list_windows(
    reader: ReaderDep,
    topic: str | None = None,
    partition: Partition = None,
    kind: Annotated[list[WindowKind] | None, Query(description="one or more kinds")] = None,
    since: Annotated[Instant | None, Query(
        description="windows that end at or after this instant (open ones always do)")] = None,
    until: Annotated[Instant | None, Query(
        description="windows that start before this instant")] = None,
    open_only: Annotated[bool, Query(description="only windows that last now")] = False,
) -> WindowsPage:
    """Windows of the partitions, in the order topic, partition, start: when writes were
    at risk (exposure, split brain), refused (rejection) or kept on fewer replicas
    (reduced redundancy), with the events that opened and closed them and the acks and
    losses inside, and the losses whose findings name each. Filters: topic, partition,
    kind, a time range the window overlaps."""
    if since is not None and until is not None and since >= until:
        raise bad_parameters(("since", "must be before until"),
                             ("until", "must be after since"))
    if not reader.exists("windows"):
        return WindowsPage(computed=False, items=[])
    items = [r for r in _rows(reader)
             if (topic is None or r["topic"] == topic)
             and (partition is None or r["partition"] == partition)
             and (not kind or r["kind"] in kind)
             and (since is None or r["end"] is None or _us(r["end"]) >= since)
             and (until is None or _us(r["start"]) < until)
             and (not open_only or r["end"] is None)]
    named = _named_losses(reader)
    return WindowsPage(computed=True, items=[WindowRow(**{
        **{k: r.get(k) for k in WindowRow.model_fields},
        "losses_named": named.get(r["window_id"], 0)}) for r in items])

