"""Acknowledged writes the ack ledger could not record: ``unrecorded`` findings from its
own account. Pure: the notes in, findings out; the audit pass calls this with the notes
of the ``acks`` commits it takes in.

A producer's ledger that can neither spool a batch of delivery reports (its disk is
full) nor commit it (the warehouse is out of reach) holds it in memory, up to a bound;
past it the oldest batch is dropped, counted and described. The first commit the
ledger makes afterwards carries the description in its ``commitInfo``
(:data:`~kafka_audit.schemas.tables.LEDGER_NOTES`, a list of notes): ``{"app_id",
"dropped_reports" (all of its run so far), "unrecorded": [span, ...]}``, a span per
topic and partition of each dropped batch: ``producer_id``, ``run_id``, ``topic``,
``partition``, ``first_seq``, ``last_seq``, ``reports``, ``first_ack``, ``last_ack``
(ISO 8601).

Each span becomes one finding of kind ``unrecorded``: ``count`` the reports dropped,
``seq`` the first seq (the span's seqs are not all its own: the producer's other
partitions' writes interleave), ``ack_time`` the first ack; the evidence holds the rest.
Those writes are not in ``acks``: never judged, counted apart from the verdicts.

A note is written by the auditor's own ledger, yet it sits in a table other writers
can reach: a span that is not of this shape is skipped and named in the problems
returned, never a crash and never half a finding.
"""

from __future__ import annotations

from collections.abc import Iterable
from datetime import UTC, datetime
from typing import Any

from kafka_audit.jobs.core.model import Finding
from kafka_audit.schemas.verdicts import Kind

__all__ = ["unrecorded_findings"]

_TEXT = ("producer_id", "run_id", "topic")
_COUNTS = ("partition", "first_seq", "last_seq", "reports")


def _when(value: Any) -> datetime:
    if not isinstance(value, str):
        raise ValueError(f"not an ISO 8601 time: {value!r}")
    t = datetime.fromisoformat(value)
    return t if t.tzinfo is not None else t.replace(tzinfo=UTC)


def _finding(app_id: Any, span: Any) -> Finding:
    if not isinstance(span, dict):
        raise ValueError(f"a span is an object, got {type(span).__name__}")
    for k in _TEXT:
        if not isinstance(span.get(k), str) or not span[k]:
            raise ValueError(f"{k} must be a non-empty string, got {span.get(k)!r}")
    for k in _COUNTS:
        v = span.get(k)
        if not isinstance(v, int) or isinstance(v, bool) or v < 0:
            raise ValueError(f"{k} must be a whole number >= 0, got {v!r}")
    if span["reports"] < 1 or span["last_seq"] < span["first_seq"]:
        raise ValueError(f"an empty span: {span['reports']} reports, seqs "
                         f"{span['first_seq']}..{span['last_seq']}")
    first, last = _when(span.get("first_ack")), _when(span.get("last_ack"))
    return Finding(
        Kind.unrecorded.value, span["topic"], span["partition"], span["producer_id"],
        span["run_id"], span["first_seq"], None, span["reports"], ack_time=first,
        evidence={"ledger": str(app_id), "first_seq": span["first_seq"],
                  "last_seq": span["last_seq"], "first_ack": first.isoformat(),
                  "last_ack": last.isoformat(),
                  "why": "the producer's ack ledger could neither spool nor commit these "
                         "delivery reports (its disk full while the warehouse was out of "
                         "reach) past what it holds in memory"})


def unrecorded_findings(notes: Iterable[tuple[int, Any]]) -> tuple[list[Finding], list[str]]:
    """The ``unrecorded`` findings of the ledger notes ``(commit version, note)``, and a
    line per note or span skipped as malformed."""
    found: list[Finding] = []
    problems: list[str] = []
    for version, said in notes:
        # a list: a commit carries every note of the ledgers and batch files it appends
        for note in (said if isinstance(said, list) else [said]):
            _take(version, note, found, problems)
    return found, problems


def _take(version: int, note: Any, found: list[Finding], problems: list[str]) -> None:
    """One ledger's note: its spans to ``found``, what is not of their shape to
    ``problems``."""
    if not isinstance(note, dict) or not isinstance(note.get("unrecorded", []), list):
        problems.append(f"commit {version}: a ledger note that is not an object with a "
                        f"list of spans: skipped")
        return
    for i, span in enumerate(note.get("unrecorded", [])):
        try:
            found.append(_finding(note.get("app_id"), span))
        except (ValueError, TypeError) as exc:
            problems.append(f"commit {version}, span {i}: {exc}: skipped")
