"""``GET /v1/findings``, ``/v1/summary``, ``/v1/partitions``: verdicts and what is pending.

Only findings of committed audit passes are served: a pass that died before
its commit point is redone, and its findings are replaced, never shown twice.

:func:`router` builds the routes for one app: the largest ``page_size`` is in
the OpenAPI schema, from the settings the app was created with.
"""

# no ``from __future__ import annotations``: the routes' signatures use ``page_size_max``,
# a local of router(), which FastAPI could not resolve from a string annotation
import functools
import hashlib
import json
import operator
from datetime import datetime
from typing import Annotated

import pyarrow as pa
import pyarrow.compute as pc
from fastapi import APIRouter, Depends, Path, Query
from pydantic import BaseModel, Field, create_model

from kafka_audit.auditor_api.deps import ReaderDep
from kafka_audit.auditor_api.folds import findings_through, known_topics
from kafka_audit.auditor_api.params import (
    Instant,
    Partition,
    System,
    of_system,
    other_filters_cursor,
    pack_cursor,
    unpack_cursor,
)
from kafka_audit.auditor_api.problems import (
    UNKNOWN_FINDING,
    UNKNOWN_TOPIC,
    ProblemError,
    bad_parameters,
    problem_responses,
)
from kafka_audit.auditor_api.routes.partitions import latest_partitions
from kafka_audit.auditor_api.routes.suspicions import (
    SuspectedWrites,
    settled_suspicions,
    suspected_totals,
)
from kafka_audit.auditor_api.routes.windows import window_ids
from kafka_audit.auditor_api.totals import ACKED_DOC, ACKNOWLEDGED_DOC, FAILED_DOC
from kafka_audit.schemas.tables import row_model
from kafka_audit.schemas.verdicts import ANNOTATIONS, LOSSES, PRIMARY, Cause, Kind, Subkind

__all__ = ["router", "FindingOut", "Summary", "FindingFilters", "example", "committed_findings",
           "committed_finding_sums"]

FindingOut = create_model(
    "FindingOut", __base__=row_model("findings", "FindingRow", overrides={
        "evidence": (dict, "the rows that prove the verdict")}),
    window_id=(str | None, Field(None, description=(
        "the window (GET /v1/windows) the first write's ack fell in, the most telling kind "
        "first: split_brain, exposure, rejection, reduced_redundancy, leader_change; for "
        "a loss acknowledged in none, the first split_brain, exposure, reduced_redundancy "
        "or leader_change window that opened between its ack and its detection (what "
        "destroyed it); a loss suspected at the fail-over (suspected_by), unless it fell in "
        "a split_brain window: the leader_change window of the change that truncated it "
        "(two fail-overs in a row told apart); null: "
        "none (or the audit loop has not computed windows yet)"))),
    suspected_by=(dict | None, Field(None, description=(
        "for a loss suspected at the fail-over (GET /v1/suspicions): the leader change "
        "that truncated its first write: old_leader, new_leader, leader_epoch (the old "
        "leader's), new_epoch, end_offset (where that epoch ends in the new leader's log), "
        "changed_at, suspected_at, basis; null: not suspected"))))


class FindingsPage(BaseModel):
    """One page of findings of a traversal (the passes committed at its first page)."""

    total: int = Field(description="findings matching the filters as of as_of_pass")
    page_size: int
    as_of_pass: int = Field(description="the committed pass this traversal serves through: "
                                        "findings of later passes are not in it")
    next_cursor: str | None = Field(description="give it as cursor for the next page; null "
                                                "on the last page")
    items: list[FindingOut]  # type: ignore[valid-type]


def _counts(name: str, kinds, doc: str) -> type[BaseModel]:
    return create_model(name, __doc__=doc, **{
        k.value: (int, Field(0, description=f"writes judged {k.value}")) for k in kinds})


Verdicts = _counts("Verdicts", PRIMARY, "Writes per verdict kind, from committed passes: "
                   "each write gets exactly one of these in the end.")
Annotations = _counts("Annotations", sorted(ANNOTATIONS), "Writes annotated beside their own "
                      "verdict (a duplicated write is also confirmed or lost, ...).")


class JudgedThrough(BaseModel):
    """How far the audit has judged: its last committed pass."""

    pass_id: int = Field(description="the last committed audit pass (0: none yet)")
    ack_time: datetime | None = Field(
        description="the ack time of the newest ack that pass had taken in: the latest "
                    "last_ack_time in the acks table version it consumed (null: none)")


class UnjudgedRecords(BaseModel):
    """Records the consume job read that the auditor cannot judge."""

    no_stamp: int = Field(description="no kaudit header (a foreign producer)")
    malformed_stamp: int = Field(description="a kaudit header that is not a well-formed stamp")
    forged_stamp: int = Field(0, description="a well-formed stamp without its MAC (a kaudit-mac "
                                             "header that verifies) while stamp.key_file is set")
    bad_checksum: int = Field(description="stamped, but the value's CRC32 differs from the "
                                          "stamped one")
    unknown_producer: int = Field(description="stamped and intact, but its (producer_id, "
                                              "run_id) has no row in the ack ledger")


class Summary(BaseModel):
    """Totals of the ack ledger and of the verdicts: sum(verdicts) + pending == acked."""

    topic: str | None = Field(description="the topic summed (null: every topic)")
    acked: int = Field(description=ACKED_DOC)
    acknowledged: int = Field(description=ACKNOWLEDGED_DOC)
    failed: int = Field(description=FAILED_DOC)
    verdicts: Verdicts  # type: ignore[valid-type]
    pending: int = Field(description="acked writes no committed pass has judged yet: "
                                     "acked - sum(verdicts)")
    lost: int = Field(description="writes lost: " + ", ".join(sorted(LOSSES)))
    unseen: int = Field(description="pending writes unread for longer than "
                                    "audit.unseen_after_seconds (last committed pass)")
    annotations: Annotations  # type: ignore[valid-type]
    unrecorded: int = Field(description="acknowledged writes whose delivery reports the "
                                        "producers' ack ledgers could not record (a full "
                                        "spool disk while the warehouse was out of reach): "
                                        "not in acked, never judged; the unrecorded findings "
                                        "say which producer, partition, seqs and when")
    judged_through: JudgedThrough
    unjudged_records: dict[str, UnjudgedRecords] = Field(
        description="per topic, stream records the auditor cannot judge")
    suspected: SuspectedWrites = Field(
        description="writes suspected lost at a leader change (GET /v1/suspicions), apart "
                    "from the verdicts: a state, not a verdict")


def _and(conditions: list) -> pc.Expression | None:
    given = [c for c in conditions if c is not None]
    return functools.reduce(operator.and_, given) if given else None


def _committed(reader, conditions: list, committed: int | None = None) -> pc.Expression:
    """AND of the given conditions and "written by a committed audit pass"."""
    committed = reader.committed_pass() if committed is None else committed
    return _and([*conditions, pc.field("pass_id") <= pa.scalar(committed, pa.int64())])


def _caused_by(causes) -> pc.Expression | None:
    """A cause may carry what qualifies it after its name (``acks=1 fail-over (watcher
    blind ...)``, ``unknown: watcher blind ...``): matched by its leading cause."""
    if not causes:
        return None
    return functools.reduce(operator.or_, [pc.starts_with(pc.field("cause"), pattern=str(c))
                                           for c in causes])


class KindCount(BaseModel):
    kind: Kind
    findings: int = Field(description="finding rows (each a range of writes)")
    writes: int = Field(description="writes they stand for")


class FindingCounts(BaseModel):
    """Findings per kind under the filters, as of a committed pass."""

    as_of_pass: int = Field(description="the committed audit pass counted through")
    kinds: list[KindCount]


FINDING_EXAMPLE = {
    "finding_id": "lost:orders:0:demo:9f2c1a:79704", "kind": "lost", "subkind": "overwritten",
    "topic": "orders", "partition": 0, "offset": 26735, "producer_id": "demo",
    "run_id": "9f2c1a", "seq": 79704, "count": 99, "ack_time": "2026-11-22T07:51:02.114Z",
    "evidence": {"acked_offset": 26735, "seen": [[26735, "reread", "other"]]},
    "cause": "acks=1 fail-over", "detected_at": "2026-11-22T07:51:40Z", "pass_id": 7}


def example(value) -> dict:
    """``responses=`` entry giving a 200's JSON example in the OpenAPI schema."""
    return {200: {"content": {"application/json": {"example": value}}}}


def router(page_size_max: int) -> APIRouter:
    """The findings and summary routes, ``page_size`` bounded by ``page_size_max`` in the
    schema."""
    r = APIRouter(prefix="/v1", tags=["findings"])
    page_size_default = min(100, page_size_max)

    @r.get("/findings", response_model=FindingsPage, responses=example({
        "total": 7, "page_size": 1, "as_of_pass": 7, "next_cursor": "eyJ2IjoxLC4uLn0",
        "items": [FINDING_EXAMPLE]}))
    def list_findings(
        reader: ReaderDep,
        filters: Annotated[FindingFilters, Depends(finding_filters)],
        cursor: Annotated[str | None, Query(
            description="next_cursor of the previous page (the same filters): the next "
                        "page of the same traversal", max_length=4096)] = None,
        page_size: Annotated[int, Query(ge=1, le=page_size_max)] = page_size_default,
    ) -> dict:
        """Findings of committed passes, each a range of writes with its evidence, in the
        order topic, partition, kind, offset. Pages go by **cursor**: a traversal serves the
        findings committed when its first page was asked (``as_of_pass``), so passes that
        commit between pages neither shift nor repeat a row; ``after_pass=as_of_pass`` later
        fetches what came since. ``next_cursor`` is null on the last page."""
        committed = reader.committed_pass()
        as_of, after = committed, None
        if cursor is not None:
            as_of, after = _decode_cursor(cursor, filters, committed)
        t = _matching(reader, filters, as_of)
        total = t.num_rows
        if after is not None:
            t = t.filter(pc.greater(t.column(_KEY), pa.scalar(after, pa.string())))
        page = t.slice(0, page_size)
        rows = page.drop_columns([_KEY]).to_pylist()
        for row in rows:
            row["evidence"] = json.loads(row["evidence"] or "{}")
        window_ids(reader, rows)  # and suspected_by
        more = t.num_rows > page_size
        nxt = (_encode_cursor(as_of, page.column(_KEY)[-1].as_py(), filters)
               if more and rows else None)
        return {"total": total, "page_size": page_size, "as_of_pass": as_of,
                "next_cursor": nxt, "items": rows}  # validated once, by the response model

    @r.get("/findings/counts", response_model=FindingCounts, responses=example({
        "as_of_pass": 7, "kinds": [{"kind": "confirmed", "findings": 40, "writes": 541039},
                                   {"kind": "lost", "findings": 7, "writes": 2513}]}))
    def finding_counts(reader: ReaderDep,
                       filters: Annotated[FindingFilters, Depends(finding_filters)]
                       ) -> FindingCounts:
        """Findings and the writes they stand for, per kind (every kind, zeros included),
        under the same filters as ``/v1/findings``."""
        committed = reader.committed_pass()
        t = _matching(reader, filters, committed)
        by = {r["kind"]: r for r in t.group_by("kind").aggregate(
            [("count", "sum"), ("count", "count")]).to_pylist()}
        return FindingCounts(as_of_pass=committed, kinds=[
            KindCount(kind=k, findings=int(by.get(k.value, {}).get("count_count") or 0),
                      writes=int(by.get(k.value, {}).get("count_sum") or 0)) for k in Kind])

    @r.get("/findings/{finding_id}", response_model=FindingOut,
           responses={**problem_responses(404), **example(FINDING_EXAMPLE)})
    def get_finding(reader: ReaderDep, finding_id: Annotated[str, Path(
            description="the finding's id, as /v1/findings gives it", max_length=2048,
            examples=[FINDING_EXAMPLE["finding_id"]])]) -> FindingOut:
        """One finding of a committed pass, by id; a 404 if no committed pass wrote it."""
        t = reader.read("findings", _committed(reader, [pc.field("finding_id") == finding_id]))
        if t.num_rows == 0:
            raise ProblemError(404, f"no finding {finding_id!r} in a committed pass",
                               type_=UNKNOWN_FINDING, title="Unknown finding")
        row = max(t.to_pylist(), key=lambda r: r["pass_id"])
        row["evidence"] = json.loads(row["evidence"] or "{}")
        window_ids(reader, [row])  # and suspected_by
        return FindingOut(**row)

    @r.get("/summary", response_model=Summary, responses={**problem_responses(404), **example({
        "topic": "orders", "acked": 543552, "acknowledged": 543552, "failed": 0,
        "verdicts": {"confirmed": 541039, "lost": 2414, "lost_after_seen": 99,
                     "indeterminate": 0, "rejected": 0, "unverified": 0},
        "pending": 0, "lost": 2513, "unseen": 0,
        "annotations": {"duplicate": 0, "reordered": 0}, "unrecorded": 0,
        "judged_through": {"pass_id": 7, "ack_time": "2026-11-22T07:51:09.8Z"},
        "unjudged_records": {"orders": {"no_stamp": 0, "malformed_stamp": 0,
                                        "forged_stamp": 0, "bad_checksum": 0,
                                        "unknown_producer": 0}}})})
    def summary(reader: ReaderDep,
                topic: Annotated[str | None, Query(description="one topic (default: every "
                                                               "topic)")] = None) -> Summary:
        """What the ack ledger holds and what the audit made of it: acked writes, their
        verdicts, the writes still pending (acked, not judged yet: from the first ack on),
        the annotations apart, how far the audit has judged, and the records it cannot
        judge. ``sum(verdicts) + pending == acked``. An unknown topic is a 404."""
        if topic is not None and topic not in reader.known_partitions():
            raise _unknown_topic(topic)  # at once: no answer computed, none kept
        return reader.memo(("summary", topic), ("acks", "findings", "consumed",
                                                "partition_state", "audit_hot", "suspicions"),
                           lambda *_: _summary(reader, topic))

    return r


class FindingFilters(BaseModel):
    system: str | None = None
    topic: str | None = None
    partition: int | None = None
    kind: list[str] | None = None
    subkind: list[str] | None = None
    cause: list[str] | None = None
    producer: str | None = None
    since: int | None = None
    until: int | None = None
    after_pass: int | None = None

    def fingerprint(self) -> str:
        text = self.model_dump_json()
        return hashlib.sha256(text.encode()).hexdigest()[:16]


def finding_filters(
    system: System = None,
    topic: str | None = None,
    partition: Partition = None,
    kind: Annotated[list[Kind] | None, Query(description="one or more kinds")] = None,
    subkind: Annotated[list[Subkind] | None, Query(description="one or more sub-kinds")]
    = None,
    cause: Annotated[list[Cause] | None, Query(
        description="one or more likely causes (a cause qualified after its name, e.g. "
                    "'acks=1 fail-over (watcher blind ...)', matches its name)")] = None,
    producer: Annotated[str | None, Query(description="one producer_id")] = None,
    since: Annotated[Instant | None, Query(
        description="ack_time >= since; before until if both are given")] = None,
    until: Annotated[Instant | None, Query(description="ack_time < until")] = None,
    after_pass: Annotated[int | None, Query(
        ge=0, le=2**62, description="only findings of audit passes after this one (e.g. a "
                                    "traversal's as_of_pass: what committed since)")] = None,
) -> FindingFilters:
    """The findings filters, shared by the list and the counts."""
    if since is not None and until is not None and since >= until:
        raise bad_parameters(("since", "must be before until"),
                             ("until", "must be after since"))
    return FindingFilters(system=system, topic=topic, partition=partition,
                          kind=[k.value for k in kind] if kind else None,
                          subkind=[k.value for k in subkind] if subkind else None,
                          cause=[c.value for c in cause] if cause else None,
                          producer=producer, since=since, until=until, after_pass=after_pass)


#: the sort key of a finding row, one string: topic, partition, kind, offset (nulls last),
#: finding_id, pass_id; the cursor carries the last one served
_KEY = "__key"
_CURSOR_VERSION = 1


def _sorted_findings(t: pa.Table) -> pa.Table:
    """Findings rows with their sort key, sorted by it."""
    if t.num_rows == 0:
        return t.append_column(_KEY, pa.array([], pa.string()))

    def padded(col, width, shift=0):
        values = pc.add(pc.cast(col, pa.int64()), shift) if shift else pc.cast(col, pa.int64())
        return pc.utf8_lpad(pc.cast(values, pa.string()), width, "0")

    offset = pc.fill_null(padded(t.column("offset"), 19), "~")  # nulls after every offset
    key = pc.binary_join_element_wise(
        t.column("topic"), padded(t.column("partition"), 10, 2**31), t.column("kind"), offset,
        t.column("finding_id"), padded(t.column("pass_id"), 19), "\x00")
    t = t.append_column(_KEY, key)
    return t.take(pc.sort_indices(key))


def _matching(reader, f: FindingFilters, as_of: int) -> pa.Table:
    """Sorted findings of passes up to ``as_of`` under the filters ``f``."""
    ts = pa.timestamp("us", tz="UTC")
    where = _and([
        pc.field("pass_id") <= pa.scalar(as_of, pa.int64()),
        of_system(f.system),
        pc.field("topic") == f.topic if f.topic is not None else None,
        pc.field("partition") == pa.scalar(f.partition, pa.int32()) if f.partition is not None
        else None,
        pc.field("kind").isin(f.kind) if f.kind else None,
        pc.field("subkind").isin(f.subkind) if f.subkind else None,
        _caused_by(f.cause),
        pc.field("producer_id") == f.producer if f.producer is not None else None,
        pc.field("ack_time") >= pa.scalar(f.since, ts) if f.since is not None else None,
        pc.field("ack_time") < pa.scalar(f.until, ts) if f.until is not None else None,
        pc.field("pass_id") > pa.scalar(f.after_pass, pa.int64()) if f.after_pass is not None
        else None,
    ])
    # the matching rows only are copied and sorted: a sorted copy of every finding, kept
    # per version, grew with the findings held (they are in the spool, deps.SPOOLED)
    fingerprint = f.fingerprint()
    return reader.memo(("findings_matching", fingerprint, as_of), ("findings",),
                       lambda findings: _sorted_findings(findings.data.filter(where)),
                       family=("findings_matching", fingerprint))


def _encode_cursor(as_of: int, key: str, f: FindingFilters) -> str:
    return pack_cursor({"v": _CURSOR_VERSION, "a": as_of, "k": key, "q": f.fingerprint()})


def _decode_cursor(cursor: str, f: FindingFilters, committed: int) -> tuple[int, str]:
    """(as_of pass, last key served) of a cursor; a 422 naming ``cursor`` otherwise."""
    data = unpack_cursor(cursor, lambda d: (
        d.get("v") == _CURSOR_VERSION and type(d["a"]) is int and isinstance(d["k"], str)
        and isinstance(d["q"], str)))
    if data["q"] != f.fingerprint():
        raise other_filters_cursor()
    if not 0 <= data["a"] <= committed:
        raise bad_parameters(("cursor", "not a cursor this API gave (its pass is not "
                                        "committed)"))
    return data["a"], data["k"]


def _summary(reader, topic: str | None) -> Summary:
    """From the running sums (``auditor_api/folds.py``): a few dictionary sums, whatever the
    tables hold; the tables themselves only where the sums cannot say (a committed pass
    older than their base, a ledger version older than those remembered)."""
    progress = reader.progress()
    acks = reader.snapshots.fold("ack_sums")
    stream = reader.snapshots.fold("stream_sums")
    found = committed_finding_sums(reader, progress.pass_id)
    if (topic is not None and topic not in acks.acked and topic not in stream.topics
            and not any(t == topic for t, _p, _k in found)):
        raise _unknown_topic(topic)

    by_kind: dict[str, int] = {}
    for (t, _p, kind), (n, _last) in found.items():
        if topic is None or t == topic:
            by_kind[kind] = by_kind.get(kind, 0) + n
    verdicts = {k.value: by_kind.get(k.value, 0) for k in PRIMARY}
    acked = acks.acked.get(topic, 0) if topic is not None else sum(acks.acked.values())
    failed = acks.failed.get(topic, 0) if topic is not None else sum(acks.failed.values())
    parts = [p for p in latest_partitions(reader, progress.pass_id)
             if topic is None or p.topic == topic]
    topics = {topic} if topic is not None else known_topics(acks, found, stream)
    return Summary(
        topic=topic, acked=acked, acknowledged=acked - failed, failed=failed,
        verdicts=Verdicts(**verdicts),
        pending=acked - sum(verdicts.values()), lost=sum(verdicts[k.value] for k in LOSSES),
        unseen=sum(p.unseen for p in parts),
        annotations=Annotations(**{k.value: by_kind.get(k.value, 0) for k in ANNOTATIONS}),
        unrecorded=by_kind.get(Kind.unrecorded.value, 0),
        judged_through=JudgedThrough(pass_id=progress.pass_id,
                                     ack_time=_newest_ack(reader, progress, topic)),
        unjudged_records={t: UnjudgedRecords(**stream.unjudged(t, acks.runs))
                          for t in sorted(topics)},
        suspected=suspected_totals([r for r in settled_suspicions(reader)
                                    if topic is None or r["topic"] == topic]))


def _unknown_topic(topic: str) -> ProblemError:
    return ProblemError(404, f"unknown topic {topic!r}: no acked write, consumed record or "
                             f"finding names it", type_=UNKNOWN_TOPIC, title="Unknown topic")


def _newest_ack(reader, progress, topic: str | None) -> datetime | None:
    """The newest ack time the committed pass had taken in (the ``acks`` version it names)."""
    by_topic = reader.newest_acks(progress.acks_version)
    values = [by_topic.get(topic)] if topic is not None else list(by_topic.values())
    values = [t for t in values if t is not None]
    return max(values) if values else None


def committed_finding_sums(reader, committed: int) -> dict:
    """(topic, partition, kind) -> (writes, newest loss) of the passes up to ``committed``:
    from the running sums, or the committed findings when the sums cannot say."""
    return findings_through(reader.snapshots.fold("finding_sums"), committed,
                            lambda: reader.read("findings", _committed(reader, [], committed)))


def committed_findings(reader) -> pa.Table:
    """Every finding of a committed pass but the confirmations (memoized per findings and
    audit_hot version): what the producers' totals and the timelines show. A copy of the
    confirmations too would grow with the writes judged."""
    def compute(findings, _hot):
        return findings.data.filter(_committed(reader, [
            pc.field("kind") != Kind.confirmed.value]))
    return reader.memo("committed_findings", ("findings", "audit_hot"), compute)
