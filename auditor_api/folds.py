"""Running totals behind the summary, topics and metrics, folded from each commit's rows.

A summary used to group the whole ledger, the whole findings table and the whole
consumed stream at every new version; with commits every second its cost grew
with the hours the auditor had run. These folds (:class:`~kafka_audit.auditor_api.
snapshots.Fold`) keep the same sums, updated with each commit's own rows, so a
summary costs a few dictionary sums whatever the tables hold:

* ``ack_sums`` (``acks``): writes per topic and partition, failed writes, writes and
  producers per durability setting, the producer runs the ledger knows, and the newest
  ack time per topic as of each recent ledger version (the pass that is committed names
  the ledger version it had taken in);
* ``finding_sums`` (``findings``): writes (and the newest loss) per (topic, partition,
  kind) per audit pass, the passes older than the newest :data:`RECENT_PASSES` summed
  into one base, so "as of the committed pass" is exact for any committed pass not older
  than the base;
* ``producer_sums`` (``acks``): per producer and topic, writes, failed writes, runs,
  writes per durability setting and a histogram of the ack latency (three significant
  digits), and the settings each run wrote with: the producers resource without the
  ledger's rows;
* ``stream_sums`` (``consumed``): per topic, the stream records without a verdict of
  their own by reason, and the intact ones per producer run (whether the ledger knows
  the run is decided when asked: the ledger may name it later).

Each state is immutable: ``add`` returns a new one and leaves the old to the requests
that hold it. All of it is pure Arrow in, dictionaries out (unit-tested against the
whole-table computation).
"""

from __future__ import annotations

from dataclasses import dataclass, field
from datetime import datetime

import numpy as np
import pyarrow as pa
import pyarrow.compute as pc

from kafka_audit.auditor_api.snapshots import Fold
from kafka_audit.schemas.stamp import FORGED, NO_STAMP
from kafka_audit.schemas.verdicts import LOSSES

__all__ = ["AckSums", "FindingSums", "ProducerSums", "StreamSums", "latency_buckets",
           "SUMMARY_FOLDS", "RECENT_PASSES", "NEWEST_ACK_VERSIONS", "DURABILITY",
           "findings_through", "known_topics"]

#: audit passes whose findings are kept apart (older ones are summed into the base)
RECENT_PASSES = 64
#: ledger versions whose newest ack time per topic is remembered
NEWEST_ACK_VERSIONS = 1024
def _sum_by(t: pa.Table, keys: list[str], value: str = "count") -> list[tuple[tuple, int]]:
    if t.num_rows == 0:
        return []
    g = t.group_by(keys).aggregate([(value, "sum")])
    cols = [g.column(k).to_pylist() for k in keys]
    return [(tuple(c[i] for c in cols), int(n or 0))
            for i, n in enumerate(g.column(f"{value}_sum").to_pylist())]


def _plus(base: dict, pairs) -> dict:
    out = dict(base)
    for k, n in pairs:
        out[k] = out.get(k, 0) + n
    return out


#: the durability settings a ledger row records
DURABILITY = ("acks", "idempotence", "retries", "max_in_flight")


@dataclass(frozen=True)
class AckSums:
    """What the ledger holds, summed: writes per (topic, partition) (failed writes under
    their partition, -1), failed writes per topic, successful writes and their producers
    per (topic, durability settings), the producer runs, and the newest ack time per
    topic as of each of the latest ledger versions."""

    by_partition: dict = field(default_factory=dict)  # (topic, partition) -> writes
    failed: dict = field(default_factory=dict)  # topic -> failed writes
    durability: dict = field(default_factory=dict)  # (topic, *DURABILITY) -> (writes, ids)
    runs: frozenset = frozenset()  # (producer_id, run_id)
    newest: tuple = ()  # (version, {topic: newest last_ack_time}), ascending versions
    first_version: int | None = None  # the oldest version newest_ack can answer for

    @property
    def acked(self) -> dict:
        """topic -> writes (failed included)."""
        out: dict = {}
        for (topic, _p), n in self.by_partition.items():
            out[topic] = out.get(topic, 0) + n
        return out

    @property
    def newest_now(self) -> dict:
        """topic -> the newest ack time in the ledger."""
        return self.newest[-1][1] if self.newest else {}

    def newest_at(self, version: int) -> dict | None:
        """topic -> the newest ack time as of ledger ``version``; None when the version is
        older than those remembered (only the rows that version held can say)."""
        if self.first_version is None or version < self.first_version:
            return None
        best: dict = {}
        for v, by_topic in self.newest:
            if v > version:
                break
            best = by_topic
        return best

    def newest_ack(self, version: int, topic: str | None) -> tuple[bool, datetime | None]:
        """(known, the newest ack time of ``topic`` or of any topic) as of ``version``;
        not known when the version is older than those remembered."""
        by_topic = self.newest_at(version)
        if by_topic is None:
            return False, None
        values = [by_topic.get(topic)] if topic is not None else list(by_topic.values())
        values = [x for x in values if x is not None]
        return True, (max(values) if values else None)


def _add_acks(s: AckSums, rows: pa.Table, version: int) -> AckSums:
    by_partition = _plus(s.by_partition, _sum_by(rows, ["topic", "partition"]))
    failed = rows.filter(pc.is_valid(rows.column("error_name")))
    failed_by = _plus(s.failed, ((k[0], n) for k, n in _sum_by(failed, ["topic"])))
    durability = dict(s.durability)
    ok = rows.filter(pc.is_null(rows.column("error_name")))
    if ok.num_rows:
        g = ok.group_by(["topic", *DURABILITY]).aggregate(
            [("count", "sum"), ("producer_id", "distinct")])
        keys = [g.column(k).to_pylist() for k in ("topic", *DURABILITY)]
        for i, (n, ids) in enumerate(zip(g.column("count_sum").to_pylist(),
                                         g.column("producer_id_distinct").to_pylist(),
                                         strict=True)):
            key = tuple(c[i] for c in keys)
            writes, known = durability.get(key, (0, frozenset()))
            durability[key] = (writes + int(n or 0), known | frozenset(ids))
    pairs = rows.select(["producer_id", "run_id"]).group_by(["producer_id", "run_id"]) \
        .aggregate([]).to_pylist() if rows.num_rows else []
    new_runs = {(r["producer_id"], r["run_id"]) for r in pairs} - s.runs
    runs = s.runs | new_runs if new_runs else s.runs
    newest = dict(s.newest[-1][1]) if s.newest else {}
    if rows.num_rows:
        g = rows.group_by("topic").aggregate([("last_ack_time", "max")])
        for topic, t in zip(g.column("topic").to_pylist(),
                            g.column("last_ack_time_max").to_pylist(), strict=True):
            if t is not None and (newest.get(topic) is None or t > newest[topic]):
                newest[topic] = t
    before = s.newest[:-1] if s.newest and s.newest[-1][0] == version else s.newest
    history = (*before, (version, newest))[-NEWEST_ACK_VERSIONS:]  # a version's rows may
    first = version if s.first_version is None else s.first_version  # come in batches
    if len(before) >= NEWEST_ACK_VERSIONS:  # the oldest remembered version went
        first = history[0][0]
    return AckSums(by_partition, failed_by, durability, runs, history, first)


#: significant digits an ack latency is kept with in the producers' histograms
LATENCY_DIGITS = 3


def latency_buckets(micros: np.ndarray) -> np.ndarray:
    """Each latency (µs, int64) rounded to :data:`LATENCY_DIGITS` significant digits: a
    histogram of at most 900 buckets a decade, exact for whole milliseconds and within
    0.5% of any latency otherwise (negative latencies, a clock step, are kept as 0)."""
    x = np.maximum(micros.astype(np.int64), 0)
    digits = np.floor(np.log10(np.maximum(x, 1))).astype(np.int64)
    scale = 10 ** np.maximum(digits - (LATENCY_DIGITS - 1), 0)
    return (x + scale // 2) // scale * scale


@dataclass(frozen=True)
class ProducerSums:
    """What the ledger says per producer, summed per (producer_id, topic): writes, failed
    writes, the runs, each durability setting's writes, and the ack latency histogram of
    the successful writes (µs :func:`latency_buckets` -> writes; a run's latency is its
    first write's, ack_time - send_time, weighted by the run's writes); and per
    (producer_id, run_id) the durability settings it wrote with."""

    writes: dict = field(default_factory=dict)  # (producer, topic) -> (acked, failed)
    runs: dict = field(default_factory=dict)  # (producer, topic) -> frozenset of run_id
    settings: dict = field(default_factory=dict)  # (producer, topic, *DURABILITY) -> writes
    latency: dict = field(default_factory=dict)  # (producer, topic) -> {µs: writes}
    run_settings: dict = field(default_factory=dict)  # (producer, run) -> frozenset


def _add_producers(s: ProducerSums, rows: pa.Table, _version: int) -> ProducerSums:
    if rows.num_rows == 0:
        return s
    writes = dict(s.writes)
    failed = rows.filter(pc.is_valid(rows.column("error_name")))
    for k, n in _sum_by(rows, ["producer_id", "topic"]):
        a, f = writes.get(k, (0, 0))
        writes[k] = (a + n, f)
    for k, n in _sum_by(failed, ["producer_id", "topic"]):
        a, f = writes[k]
        writes[k] = (a, f + n)
    runs, run_settings = dict(s.runs), dict(s.run_settings)
    for r in rows.group_by(["producer_id", "topic", "run_id", *DURABILITY]).aggregate(
            []).to_pylist():
        pid, run = r["producer_id"], r["run_id"]
        runs[(pid, r["topic"])] = runs.get((pid, r["topic"]), frozenset()) | {run}
        run_settings[(pid, run)] = run_settings.get((pid, run), frozenset()) | {
            tuple(r[k] for k in DURABILITY)}
    ok = rows.filter(pc.is_null(rows.column("error_name")))
    settings = _plus(s.settings, _sum_by(ok, ["producer_id", "topic", *DURABILITY]))
    latency = dict(s.latency)
    ok = ok.filter(pc.is_valid(ok.column("send_time")))
    if ok.num_rows:
        micros = pc.subtract(pc.cast(ok.column("ack_time"), pa.int64()),
                             pc.cast(ok.column("send_time"), pa.int64()))
        buckets = latency_buckets(micros.to_numpy(zero_copy_only=False))
        g = pa.table({"producer_id": ok.column("producer_id"), "topic": ok.column("topic"),
                      "us": buckets, "count": ok.column("count")})
        copied: set = set()  # the histograms this call copied (the old state stays as is)
        for (pid, topic, us), n in _sum_by(g, ["producer_id", "topic", "us"]):
            key = (pid, topic)
            if key not in copied:
                latency[key] = dict(latency.get(key, {}))
                copied.add(key)
            latency[key][us] = latency[key].get(us, 0) + n
    return ProducerSums(writes, runs, settings, latency, run_settings)


def _merge(into: dict, pairs) -> dict:
    """``into`` with (count, newest loss time) values of ``pairs`` added."""
    out = dict(into)
    for k, (n, t) in pairs:
        had = out.get(k)
        if had is None:
            out[k] = (n, t)
        else:
            newest = had[1] if t is None or (had[1] is not None and had[1] >= t) else t
            out[k] = (had[0] + n, newest)
    return out


@dataclass(frozen=True)
class FindingSums:
    """Per (topic, partition, kind): (writes, newest ack time of a loss, None for the other
    kinds); passes up to ``base_pass`` summed in ``base``, the newer ones per pass in
    ``recent``."""

    base_pass: int = -1
    base: dict = field(default_factory=dict)
    recent: dict = field(default_factory=dict)  # pass_id -> {(topic, partition, kind): ..}

    def through(self, committed: int) -> dict | None:
        """(topic, partition, kind) -> (writes, newest loss) of the passes up to
        ``committed``; None if ``committed`` is older than the base (then only the table
        itself can say)."""
        if committed < self.base_pass:
            return None
        out = self.base
        for p, sums in self.recent.items():
            if p <= committed:
                out = _merge(out, sums.items())
        return out


def _add_findings(s: FindingSums, rows: pa.Table, _version: int) -> FindingSums:
    recent = dict(s.recent)
    if rows.num_rows:
        loss = pc.is_in(rows.column("kind"), pa.array(sorted(k.value for k in LOSSES)))
        rows = rows.append_column("_loss_at", pc.if_else(loss, rows.column("ack_time"),
                                                          pa.scalar(None, rows.schema.field(
                                                              "ack_time").type)))
        g = rows.group_by(["pass_id", "topic", "partition", "kind"]).aggregate(
            [("count", "sum"), ("_loss_at", "max")])
        cols = [g.column(k).to_pylist() for k in ("pass_id", "topic", "partition", "kind",
                                                  "count_sum", "_loss_at_max")]
        by_pass: dict[int, list] = {}
        for p, topic, part, kind, n, t in zip(*cols, strict=True):
            by_pass.setdefault(p, []).append(((topic, part, kind), (int(n or 0), t)))
        for p, pairs in by_pass.items():
            recent[p] = _merge(recent.get(p, {}), pairs)
    base_pass, base = s.base_pass, s.base
    if len(recent) > RECENT_PASSES:
        for p in sorted(recent)[:len(recent) - RECENT_PASSES]:
            base = _merge(base, recent.pop(p).items())
            base_pass = max(base_pass, p)
    # a late row of a pass already in the base (not written by the audit, which appends
    # a pass's findings before it commits the next) keeps the base exact
    for p in [p for p in recent if p <= base_pass]:
        base = _merge(base, recent.pop(p).items())
    return FindingSums(base_pass, base, recent)


@dataclass(frozen=True)
class StreamSums:
    """Per topic, the stream's records without a verdict of their own by reason, the
    intact stamped ones per producer run, and every topic and partition the consumed table
    names."""

    reasons: dict = field(default_factory=dict)  # (topic, reason) -> records
    intact: dict = field(default_factory=dict)  # (topic, producer_id, run_id) -> records
    topics: frozenset = frozenset()  # of any source (stream or re-read)
    stream_topics: frozenset = frozenset()
    partitions: frozenset = frozenset()  # (topic, partition) of any source

    def unjudged(self, topic: str, runs: frozenset) -> dict[str, int]:
        """The reasons of ``topic``; ``unknown_producer``: intact records of runs the
        ledger (``runs``) does not know."""
        return {
            "no_stamp": self.reasons.get((topic, "no_stamp"), 0),
            "malformed_stamp": self.reasons.get((topic, "malformed_stamp"), 0),
            "forged_stamp": self.reasons.get((topic, "forged_stamp"), 0),
            "bad_checksum": self.reasons.get((topic, "bad_checksum"), 0),
            "unknown_producer": sum(n for (t, p, r), n in self.intact.items()
                                    if t == topic and (p, r) not in runs),
        }


def _add_stream(s: StreamSums, rows: pa.Table, _version: int) -> StreamSums:
    topics = set(rows.column("topic").unique().to_pylist()) if rows.num_rows else set()
    parts = s.partitions | {k for k, _n in _sum_by(rows, ["topic", "partition"])}
    # records alone: a RabbitMQ redelivery is a record read again, a barrier none
    stream = rows.filter((pc.field("source") == "stream") & (pc.field("status") == "record"))
    if stream.num_rows == 0:
        return StreamSums(s.reasons, s.intact, s.topics | topics, s.stream_topics, parts)
    stamped = pc.fill_null(stream.column("stamped"), False)
    no_header = pc.fill_null(pc.equal(stream.column("stamp_error"), NO_STAMP), False)
    forged = pc.fill_null(pc.equal(stream.column("stamp_error"), FORGED), False)
    bad = pc.and_(stamped, pc.fill_null(pc.equal(stream.column("checksum_ok"), False), False))
    reasons = s.reasons
    for reason, mask in (("no_stamp", pc.and_(pc.invert(stamped), no_header)),
                         ("malformed_stamp", pc.and_(pc.invert(stamped), pc.invert(
                             pc.or_(no_header, forged)))),
                         ("forged_stamp", pc.and_(pc.invert(stamped), forged)),
                         ("bad_checksum", bad)):
        reasons = _plus(reasons, (((k[0], reason), n)
                                  for k, n in _sum_by(stream.filter(mask), ["topic"])))
    intact = _plus(s.intact, _sum_by(stream.filter(pc.and_(stamped, pc.invert(bad))),
                                     ["topic", "producer_id", "run_id"]))
    return StreamSums(reasons, intact, s.topics | topics,
                      s.stream_topics | set(stream.column("topic").unique().to_pylist()),
                      parts)


def known_topics(acks: AckSums, found: dict, stream: StreamSums) -> set[str]:
    """Every topic the ledger, the committed findings (``found``) or the stream names."""
    return set(acks.acked) | {t for t, _p, _k in found} | set(stream.stream_topics)


def findings_through(state: FindingSums, committed: int, table) -> dict:
    """``state.through(committed)``, or the same sums from the committed findings
    ``table()`` gives when the state cannot say (a pass older than its base)."""
    found = state.through(committed)
    if found is None:
        found = _add_findings(FindingSums(), table(), 0).through(committed)
    return found


SUMMARY_FOLDS = (
    Fold("ack_sums", "acks", AckSums, _add_acks),
    Fold("finding_sums", "findings", FindingSums, _add_findings),
    Fold("stream_sums", "consumed", StreamSums, _add_stream),
    Fold("producer_sums", "acks", ProducerSums, _add_producers),
)
